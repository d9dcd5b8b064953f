use std::collections::HashSet;
use std::time::{Duration, Instant};

use perfcast_core::ModuleKind;
use perfcast_data::DatasetDir;

use crate::{perfcast, run, stderr, write_fast_sweep};

#[test]
fn profile_writes_a_dataset_that_show_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = write_fast_sweep(tmp.path(), "");
    let out = tmp.path().join("ds");
    let o = run(&[
        "profile",
        "--modules",
        "relu,linear",
        "--samples",
        "4",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["kinds"]["relu"]["measured"], 4);
    assert_eq!(summary["kinds"]["linear"]["total_rows"], 4);

    let dir = DatasetDir::open(&out).unwrap();
    assert_eq!(dir.kinds(), vec![ModuleKind::Linear, ModuleKind::Relu]);
    let rows = dir.read(ModuleKind::Relu).unwrap();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let t = r.timing().expect("measured");
        assert!(t.median_ms > 0.0 && t.min_ms.unwrap() <= t.median_ms);
        assert!(t.mad_ms.is_some() && t.repetitions.unwrap() >= 3);
        assert_eq!(r.backend, "flex");
    }
    assert!(dir.device().unwrap().peak_gflops > 0.0);

    let o = run(&[
        "datasets",
        "show",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["kinds"][1]["kind"], "relu");
    assert_eq!(shown["kinds"][1]["rows"], 4);

    // Profiling the same sweep again without --resume would duplicate rows: refused.
    let o = run(&[
        "profile",
        "--modules",
        "relu",
        "--samples",
        "4",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));
}

/// A killed run resumed with `--resume` loses no finished row and duplicates none.
#[test]
fn killed_run_resumes_without_loss_or_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    // Slow rows down a little (30 ms warm-up each) so the kill lands mid-run.
    let sweep = write_fast_sweep(tmp.path(), "");
    let text = std::fs::read_to_string(&sweep)
        .unwrap()
        .replace("warmup_s = 0.0", "warmup_s = 0.03");
    std::fs::write(&sweep, text).unwrap();
    let out = tmp.path().join("ds");
    let args = [
        "profile",
        "--modules",
        "relu",
        "--samples",
        "40",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let mut child = perfcast().args(args).spawn().unwrap();
    let start = Instant::now();
    let before = loop {
        if let Ok(dir) = DatasetDir::open(&out)
            && let Ok(rows) = dir.read(ModuleKind::Relu)
            && rows.len() >= 3
        {
            break rows;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no rows appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let dir = DatasetDir::open(&out).unwrap();
    let after_kill = dir.read(ModuleKind::Relu).unwrap();
    assert!(
        after_kill.len() < 40,
        "the run finished before it was killed"
    );
    // Rows seen before the kill are all still there, byte for byte.
    for r in &before {
        assert!(after_kill.contains(r));
    }

    let o = perfcast().args(args).arg("--resume").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let done = dir.read(ModuleKind::Relu).unwrap();
    assert_eq!(done.len(), 40);
    let keys: HashSet<String> = done.iter().map(|r| r.key()).collect();
    assert_eq!(keys.len(), 40, "duplicated rows");
    for r in &after_kill {
        assert!(done.contains(r), "lost a finished row");
    }
}

/// Ctrl-C during a sweep stopped it but exited 2; a second sweep in the same process did not
/// see it at all. It stops after the row in flight, exits 130 saying how to resume, and the
/// resumed run finishes the sweep.
#[test]
fn ctrl_c_stops_a_sweep_exits_130_and_the_resumed_run_finishes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = write_fast_sweep(tmp.path(), "");
    let text = std::fs::read_to_string(&sweep)
        .unwrap()
        .replace("warmup_s = 0.0", "warmup_s = 0.03");
    std::fs::write(&sweep, text).unwrap();
    let out = tmp.path().join("ds");
    let args = [
        "profile",
        "--modules",
        "relu",
        "--samples",
        "40",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let child = perfcast()
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Rows are written only while the sweep runs, after its Ctrl-C handler is in place.
    let start = Instant::now();
    while !DatasetDir::open(&out)
        .and_then(|d| d.read(ModuleKind::Relu))
        .is_ok_and(|rows| rows.len() >= 3)
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no rows appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(last.starts_with("error: "), "{err}");
    assert!(last.contains("rerun with `--resume`"), "{err}");
    let dir = DatasetDir::open(&out).unwrap();
    let stopped = dir.read(ModuleKind::Relu).unwrap();
    assert!(stopped.len() < 40, "the run finished before the signal");

    let o = perfcast().args(args).arg("--resume").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let done = dir.read(ModuleKind::Relu).unwrap();
    assert_eq!(done.len(), 40);
    for r in &stopped {
        assert!(done.contains(r), "lost a finished row");
    }
}

#[test]
fn malformed_sweep_is_a_one_line_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("bad.toml");
    std::fs::write(&sweep, "samples = 3\nbatch = [1, 2\n").unwrap();
    let o = run(&[
        "profile",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        tmp.path().join("ds").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("bad.toml") && err.contains("line 2"), "{err}");
    assert!(
        !tmp.path().join("ds").exists(),
        "nothing written on a bad sweep"
    );
}

#[test]
fn bad_time_cap_is_named_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for bad in ["-1", "0", "NaN"] {
        let cap = format!("--max-time-s={bad}");
        let o = run(&[
            "profile",
            "--modules",
            "relu",
            "--samples",
            "2",
            &cap,
            "--out",
            tmp.path().join("ds").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("timing.max_time_s"), "{bad}: {err}");
        assert!(!tmp.path().join("ds").exists(), "nothing written for {bad}");
    }
}

#[test]
fn rounds_visit_every_row_again_and_bad_counts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // Exactly 3 ungrouped samples per visit, so a row's repetition count shows its visits. No
    // canary: on a busy machine it would re-measure rows, replacing their three visits with one.
    let sweep = write_fast_sweep(tmp.path(), "");
    let text = std::fs::read_to_string(&sweep)
        .unwrap()
        .replace("seed = 1", "seed = 1\ncanary = false")
        .replace(
            "min_samples = 3",
            "min_samples = 3\nmax_samples = 3\nmin_sample_s = 0.0",
        );
    std::fs::write(&sweep, text).unwrap();
    let out = tmp.path().join("ds");
    let o = run(&[
        "profile",
        "--modules",
        "relu",
        "--samples",
        "3",
        "--rounds",
        "3",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = DatasetDir::open(&out)
        .unwrap()
        .read(ModuleKind::Relu)
        .unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        let t = r.timing().expect("measured");
        assert_eq!(t.repetitions, Some(9), "3 visits of 3 samples");
        assert!(t.min_ms.unwrap() <= t.median_ms && t.median_ms <= t.p90_ms.unwrap());
    }

    for bad in ["0", "99"] {
        let o = run(&[
            "profile",
            "--modules",
            "relu",
            "--samples",
            "2",
            "--rounds",
            bad,
            "--out",
            tmp.path().join("bad").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("timing.rounds") && err.contains(bad), "{err}");
        assert!(
            !tmp.path().join("bad").exists(),
            "nothing written for {bad}"
        );
    }
}

#[test]
fn impossible_shapes_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("conv.toml");
    std::fs::write(
        &sweep,
        "samples = 2\nmodules = [\"conv2d\"]\n[conv2d]\ninput_hw = [3]\nkernel = [7]\npadding = [1]\n",
    )
    .unwrap();
    let o = run(&[
        "profile",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        tmp.path().join("ds").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("conv.toml")
            && err.contains("kernel height 7 is larger than the padded input 5"),
        "{err}"
    );

    std::fs::write(
        &sweep,
        "samples = 2\nmodules = [\"conv2d\"]\n[conv2d]\nin_channels = [0]\n",
    )
    .unwrap();
    let o = run(&[
        "profile",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        tmp.path().join("ds").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("conv.toml") && err.contains("`conv2d.in_channels` values must be in [1"),
        "{err}"
    );
}

#[test]
fn unreadable_dataset_is_a_one_line_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = write_fast_sweep(tmp.path(), "");
    let out = tmp.path().join("ds");
    let o = run(&[
        "profile",
        "--modules",
        "relu",
        "--samples",
        "2",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(out.join("relu.parquet"), b"PAR1 this is not parquet").unwrap();
    let o = run(&["datasets", "show", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("relu.parquet"), "{err}");

    let o = run(&[
        "datasets",
        "show",
        tmp.path().join("nowhere").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no dataset at"), "{}", stderr(&o));
}

#[test]
fn remeasured_sessions_merge_into_the_median_or_the_fastest_of_each_row() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = write_fast_sweep(tmp.path(), "");
    let ds = tmp.path().join("ds");
    let o = run(&[
        "profile",
        "--modules",
        "relu",
        "--samples",
        "3",
        "--sweep",
        sweep.to_str().unwrap(),
        "--out",
        ds.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sessions: Vec<_> = ["s2", "s3"].iter().map(|s| tmp.path().join(s)).collect();
    for s in &sessions {
        let o = run(&[
            "datasets",
            "remeasure",
            ds.to_str().unwrap(),
            "--all",
            "--write",
            s.to_str().unwrap(),
        ]);
        // Exit 1 only says the rows moved more than the limits; the session is written anyway.
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    }
    // Writing over an existing session is refused before measuring.
    let o = run(&[
        "datasets",
        "remeasure",
        ds.to_str().unwrap(),
        "--write",
        sessions[0].to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("already holds a dataset"),
        "{}",
        stderr(&o)
    );

    let merged = tmp.path().join("merged");
    let o = run(&[
        "datasets",
        "merge",
        ds.to_str().unwrap(),
        sessions[0].to_str().unwrap(),
        sessions[1].to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["kinds"][0]["by_sessions"],
        serde_json::json!([0, 0, 3])
    );
    let read = |d: &std::path::Path| {
        let mut rows = DatasetDir::open(d).unwrap().read(ModuleKind::Relu).unwrap();
        rows.sort_by_key(perfcast_data::Record::key);
        rows
    };
    let (a, b, c, m) = (
        read(&ds),
        read(&sessions[0]),
        read(&sessions[1]),
        read(&merged),
    );
    assert_eq!(m.len(), 3);
    for i in 0..3 {
        assert_eq!(a[i].key(), m[i].key());
        let mut medians = [&a[i], &b[i], &c[i]].map(|r| r.timing().unwrap().median_ms);
        medians.sort_by(f64::total_cmp);
        let t = m[i].timing().unwrap();
        assert_eq!(t.median_ms, medians[1], "the middle session");
        let reps: u32 = [&a[i], &b[i], &c[i]]
            .iter()
            .map(|r| r.timing().unwrap().repetitions.unwrap())
            .sum();
        assert_eq!(t.repetitions, Some(reps));
    }

    // `--combine fastest` keeps, per row, the whole timing of the session that measured it
    // fastest.
    let fastest = tmp.path().join("fastest");
    let o = run(&[
        "datasets",
        "merge",
        ds.to_str().unwrap(),
        sessions[0].to_str().unwrap(),
        sessions[1].to_str().unwrap(),
        "--combine",
        "fastest",
        "--out",
        fastest.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["combine"], "fastest");
    let f = read(&fastest);
    assert_eq!(f.len(), 3);
    for i in 0..3 {
        let best = [&a[i], &b[i], &c[i]]
            .map(|r| r.timing().unwrap().clone())
            .into_iter()
            .min_by(|x, y| x.median_ms.total_cmp(&y.median_ms))
            .unwrap();
        assert_eq!(f[i].timing().unwrap(), &best, "the fastest session, whole");
    }

    // Sessions of another device do not merge.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for f in ["relu.parquet", "device.json"] {
        std::fs::copy(sessions[0].join(f), other.join(f)).unwrap();
    }
    let device = std::fs::read_to_string(other.join("device.json")).unwrap();
    let renamed = device.replacen("\"name\": \"", "\"name\": \"Other ", 1);
    assert_ne!(device, renamed);
    std::fs::write(other.join("device.json"), renamed).unwrap();
    let out = tmp.path().join("bad-merge");
    let o = run(&[
        "datasets",
        "merge",
        ds.to_str().unwrap(),
        other.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    assert!(!out.exists(), "nothing written");
}

#[test]
fn active_rounds_measure_new_configurations_chosen_by_disagreement() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        "seed = 1\nphases = [\"inference\"]\nbatch = [1, 2]\n\
         [timing]\nwarmup_s = 0.0\nmin_samples = 3\nmax_time_s = 0.01\n\
         [linear]\ntokens = { min = 1, max = 16 }\nin_features = { min = 4, max = 256 }\nout_features = [8]\n",
    )
    .unwrap();
    let out = tmp.path().join("ds");
    let profile = |extra: &[&str]| {
        let mut args = vec![
            "profile",
            "--modules",
            "linear",
            "--sweep",
            sweep.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--resume",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    // Too few rows for an ensemble: the draws as they come, said so.
    let o = profile(&["--samples", "6", "--active"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("6 random draws"), "{}", stderr(&o));
    let o = profile(&["--samples", "44"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before: HashSet<_> = DatasetDir::open(&out)
        .unwrap()
        .read(ModuleKind::Linear)
        .unwrap()
        .iter()
        .map(|r| (r.spec.config(), r.context.batch))
        .collect();
    let o = profile(&["--samples", "5", "--active"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`linear`: 5 of") && stderr(&o).contains("disagree most"),
        "{}",
        stderr(&o)
    );
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["kinds"]["linear"]["measured"], 5);
    let after = DatasetDir::open(&out)
        .unwrap()
        .read(ModuleKind::Linear)
        .unwrap();
    assert_eq!(after.len(), before.len() + 5);
    let new: HashSet<_> = after
        .iter()
        .map(|r| (r.spec.config(), r.context.batch))
        .filter(|k| !before.contains(k))
        .collect();
    assert_eq!(new.len(), 5, "five configurations never measured before");
}

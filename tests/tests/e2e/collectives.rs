//! `perfcast collectives fit | eval` end to end: the fits file, the held-out table,
//! bad input.

use crate::{run, stderr};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/collectives/a100-dgx-sample.csv"
);

#[test]
fn fit_writes_the_file_plan_reads_and_eval_prints_the_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fits.json");
    let o = run(&[
        "collectives",
        "fit",
        SAMPLE,
        "--name",
        "dgx",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(printed, written);
    assert_eq!(written["name"], "dgx");
    let fits = written["fits"].as_array().unwrap();
    // One fit over p = 2, 4, 8 and one for each of them.
    assert_eq!(fits.len(), 4, "{written}");
    for f in fits {
        for p in f["pieces"].as_array().unwrap() {
            assert!(p["bus_bandwidth_gbs"].as_f64().unwrap() > 0.0);
        }
    }
    // Nothing but the file is left beside it.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);

    let o = run(&["collectives", "eval", SAMPLE]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for want in [
        "size <= 16 MiB -> larger",
        "p <= 4 -> p = 8",
        "formula MAPE",
    ] {
        assert!(text.contains(want), "{text}");
    }
}

#[test]
fn bad_timings_are_one_line_naming_file_and_value_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("all_reduce.csv");
    std::fs::write(
        &bad,
        "time_stats.all_reduce.median,num_workers,size,collective,devices_per_node\n\
         0.1,2,2048,all_reduce,2\n0.2,2,-8,all_reduce,2\n",
    )
    .unwrap();
    let out = tmp.path().join("fits.json");
    let o = run(&[
        "collectives",
        "fit",
        bad.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("all_reduce.csv") && e.contains("line 3") && e.contains("`-8`"),
        "{e}"
    );
    assert!(!out.exists());
}

use perfcast_core::{
    Caches, Context, DeviceKind, DeviceSpec, ModuleKind, Phase, SpecSource, testing,
};
use perfcast_data::{DatasetDir, Outcome, Record, Timing, table};
use polars::prelude::*;

fn device(name: &str) -> DeviceSpec {
    DeviceSpec {
        name: name.into(),
        kind: DeviceKind::Cpu,
        peak_gflops: 50.0,
        mem_bandwidth_gbs: 10.0,
        cores: 2,
        threads: 2,
        clock_mhz: 2000.0,
        memory_gb: 8.0,
        cache_mb: 16.0,
        caches: Caches::default(),
        source: SpecSource::Measured,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    }
}

fn record(spec: perfcast_core::ModuleSpec, batch: usize, ms: f64) -> Record {
    Record {
        spec,
        context: Context {
            batch,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        },
        backend: "flex".into(),
        outcome: Outcome::Ok(Timing {
            median_ms: ms,
            min_ms: Some(ms * 0.9),
            mad_ms: Some(ms * 0.01),
            p10_ms: Some(ms * 0.95),
            p90_ms: Some(ms * 1.1),
            repetitions: Some(20),
        }),
        perfcast_version: "test".into(),
        timestamp: 1_700_000_000,
    }
}

#[test]
fn imported_rows_keep_unknown_statistics_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("gpu a")).unwrap();
    let mut row = record(testing::one_of_each_kind().remove(1), 8, 0.25);
    row.outcome = Outcome::Ok(Timing::median_only(0.25));
    dir.append(ModuleKind::Linear, std::slice::from_ref(&row))
        .unwrap();
    assert_eq!(dir.read(ModuleKind::Linear).unwrap(), vec![row]);
}

#[test]
fn every_kind_round_trips_through_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path().join("dev"), &device("cpu a")).unwrap();
    for spec in testing::one_of_each_kind() {
        let kind = spec.kind();
        let mut failed = record(spec.clone(), 4, 1.0);
        failed.outcome = Outcome::Failed {
            reason: "out of memory".into(),
        };
        let rows = vec![record(spec.clone(), 1, 0.5), failed];
        dir.append(kind, &rows).unwrap();
        assert_eq!(dir.read(kind).unwrap(), rows, "{kind}");
    }
    assert_eq!(dir.kinds().len(), ModuleKind::ALL.len());
    assert_eq!(dir.device().unwrap(), device("cpu a"));
}

#[test]
fn append_keeps_old_rows_and_leaves_no_temp_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let spec = testing::one_of_each_kind().remove(0);
    dir.append(ModuleKind::Conv2d, &[record(spec.clone(), 1, 1.0)])
        .unwrap();
    dir.append(ModuleKind::Conv2d, &[record(spec.clone(), 2, 2.0)])
        .unwrap();
    let rows = dir.read(ModuleKind::Conv2d).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(dir.measured_keys(ModuleKind::Conv2d).unwrap().len(), 2);
    // A row the table holds (or that repeats within the call) is not stored again.
    let stored = dir
        .append(
            ModuleKind::Conv2d,
            &[
                record(spec.clone(), 2, 5.0),
                record(spec.clone(), 3, 3.0),
                record(spec.clone(), 3, 4.0),
            ],
        )
        .unwrap();
    assert_eq!(stored, 1);
    let rows = dir.read(ModuleKind::Conv2d).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[1].timing().unwrap().median_ms,
        2.0,
        "the first copy stays"
    );
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    // The lock file stays (it is locked, never replaced); no temp file does.
    assert_eq!(
        sorted,
        vec![".perfcast.lock", "conv2d.parquet", "device.json"],
        "{names:?}"
    );
}

/// Threads appending to one dataset at once lose no row and store none twice.
#[test]
fn concurrent_appends_store_every_row_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let spec = testing::one_of_each_kind().remove(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (dir, spec) = (dir.clone(), spec.clone());
            s.spawn(move || {
                // Every thread offers batches 1..=12, in its own order.
                for i in 0..12 {
                    let b = 1 + (i * 5 + t * 3) % 12;
                    dir.append(ModuleKind::Conv2d, &[record(spec.clone(), b, b as f64)])
                        .unwrap();
                }
            });
        }
    });
    let rows = dir.read(ModuleKind::Conv2d).unwrap();
    let keys: std::collections::HashSet<String> = rows.iter().map(|r| r.key()).collect();
    assert_eq!((rows.len(), keys.len()), (12, 12));
}

#[test]
fn a_dataset_of_another_device_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let err = DatasetDir::create_or_open(tmp.path(), &device("cpu b"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`cpu a`") && err.contains("`cpu b`"), "{err}");
}

#[test]
fn truncated_file_is_unreadable_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let spec = testing::one_of_each_kind().remove(1);
    dir.append(ModuleKind::Linear, &[record(spec, 1, 1.0)])
        .unwrap();
    let path = dir.module_path(ModuleKind::Linear);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = dir.read(ModuleKind::Linear).unwrap_err().to_string();
    assert!(err.contains("linear.parquet"), "{err}");
    assert!(err.starts_with("unreadable dataset"), "{err}");
}

fn write_frame(dir: &DatasetDir, kind: ModuleKind, mut df: DataFrame) {
    table::write_parquet_atomic(&dir.module_path(kind), &mut df).unwrap();
}

fn good_frame() -> (DataFrame, ModuleKind) {
    let spec = testing::one_of_each_kind().remove(1);
    let kind = spec.kind();
    (
        table::to_frame(kind, &[record(spec.clone(), 1, 1.0), record(spec, 2, 2.0)]).unwrap(),
        kind,
    )
}

#[test]
fn missing_column_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let (df, kind) = good_frame();
    write_frame(&dir, kind, df.drop("in_features").unwrap());
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(err.contains("missing column `in_features`"), "{err}");
}

/// A matmul's operand transposes survive a dataset, a table written before they
/// existed reads as untransposed, and a bad flag is named with its row.
#[test]
fn matmul_layout_columns_round_trip_and_default_to_untransposed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let spec = testing::one_of_each_kind().remove(2);
    let kind = spec.kind();
    assert_eq!(spec.layout(), vec![0, 1]);
    let plain = spec.clone().with_layout(&[0, 0]).unwrap();
    let rows = vec![record(spec.clone(), 1, 1.0), record(plain.clone(), 1, 3.0)];
    dir.append(kind, &rows).unwrap();
    assert_eq!(dir.read(kind).unwrap(), rows);
    // Same configuration and context, another layout: another measurement.
    assert_ne!(rows[0].key(), rows[1].key());

    let df = table::to_frame(kind, &rows).unwrap();
    write_frame(
        &dir,
        kind,
        df.drop("trans_a").unwrap().drop("trans_b").unwrap(),
    );
    let old = dir.read(kind).unwrap();
    assert!(old.iter().all(|r| r.spec == plain), "{old:?}");

    let mut df = table::to_frame(kind, &rows).unwrap();
    df.replace("trans_b", Column::new("trans_b".into(), [1i64, 2]))
        .unwrap();
    write_frame(&dir, kind, df);
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(
        err.contains("row 1: ") && err.contains("`trans_b` must be 0 or 1, got 2"),
        "{err}"
    );
}

#[test]
fn nan_and_negative_latencies_are_named_with_the_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let (mut df, kind) = good_frame();
    df.replace(
        "median_ms",
        Column::new("median_ms".into(), [Some(1.0), Some(f64::NAN)]),
    )
    .unwrap();
    write_frame(&dir, kind, df);
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(err.contains("row 1: `median_ms` is NaN"), "{err}");

    let (mut df, kind) = good_frame();
    df.replace(
        "min_ms",
        Column::new("min_ms".into(), [Some(-1.0), Some(1.0)]),
    )
    .unwrap();
    write_frame(&dir, kind, df);
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(
        err.contains("row 0: `min_ms`") && err.contains("-1"),
        "{err}"
    );
}

#[test]
fn impossible_shapes_in_a_table_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let (mut df, kind) = good_frame();
    df.replace(
        "out_features",
        Column::new("out_features".into(), [0i64, 8]),
    )
    .unwrap();
    write_frame(&dir, kind, df);
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(
        err.contains("row 0") && err.contains("`out_features` must be at least 1"),
        "{err}"
    );
}

#[test]
fn wrong_column_type_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = DatasetDir::create_or_open(tmp.path(), &device("cpu a")).unwrap();
    let (mut df, kind) = good_frame();
    df.replace("batch", Column::new("batch".into(), ["one", "two"]))
        .unwrap();
    write_frame(&dir, kind, df);
    let err = dir.read(kind).unwrap_err().to_string();
    assert!(
        err.contains("column `batch`") && err.contains("expected integers"),
        "{err}"
    );
}

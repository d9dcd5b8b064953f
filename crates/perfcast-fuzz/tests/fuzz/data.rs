//! perfcast-data: the CSV importers (users' CSVs with a TOML mapping, NeuSight, Justus,
//! DeepBench) and Parquet datasets (mutated bytes, frames with extreme values).
//!
//! Beyond "no panic", an import that succeeds must write datasets that read back with every
//! row it imported (nothing lost), and a dataset that reads must hold only valid rows.

use std::path::{Path, PathBuf};

use perfcast_core::{Context, ModuleKind, ModuleSpec, Phase};
use perfcast_data::import::{self, Import};
use perfcast_data::{DatasetDir, Outcome, Record, Timing};
use polars::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, check, fuzz};
use crate::mutate::{
    ByteOp, CsvOp, JsonOp, TomlOp, apply_bytes, apply_csv, apply_text, byte_ops, csv_ops, json_ops,
    mutate_json_text, mutate_toml_text, toml_ops,
};

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Checks a record read from a dataset: valid spec and context, finite non-negative times.
fn check_record(r: &Record) -> Result<(), TestCaseError> {
    r.spec
        .validate()
        .map_err(|e| fail(format!("read a row with an invalid spec: {e}")))?;
    r.context
        .validate()
        .map_err(|e| fail(format!("read a row with an invalid context: {e}")))?;
    if let Outcome::Ok(t) = &r.outcome {
        for v in [Some(t.median_ms), t.min_ms, t.mad_ms, t.p10_ms, t.p90_ms]
            .into_iter()
            .flatten()
        {
            check(v.is_finite() && v >= 0.0, || {
                format!("read a time of {v} ms")
            })?;
        }
    }
    Ok(())
}

/// Writes an importer's rows as datasets under `out` and reads every table back: each must
/// hold exactly the rows imported. Returns whether anything was imported.
fn write_and_read_back(rows: &Import, out: &Path) -> Result<bool, TestCaseError> {
    if rows.write(out, false).is_err() {
        return Ok(false);
    }
    for d in &rows.devices {
        let Some(spec) = &d.device else { continue };
        if d.imported() == 0 {
            continue;
        }
        let dir = DatasetDir::open(out.join(spec.slug()))
            .map_err(|e| fail(format!("import wrote `{}` but it does not open: {e}", d.id)))?;
        for (kind, imported) in &d.tables {
            let read = dir.read(*kind).map_err(|e| {
                fail(format!(
                    "import wrote {} `{kind}` rows of `{}` that do not read back: {e}",
                    imported.len(),
                    d.id
                ))
            })?;
            check(&read == imported, || {
                format!(
                    "`{kind}` of `{}`: imported {} rows, read back {} (or changed)",
                    d.id,
                    imported.len(),
                    read.len()
                )
            })?;
            read.iter().try_for_each(check_record)?;
        }
    }
    Ok(true)
}

/// A fresh directory per case (the importers write next to their output).
fn scratch() -> Result<tempfile::TempDir, TestCaseError> {
    tempfile::tempdir().map_err(fail)
}

const DEVICE_TABLE: &str = r#"
[device]
name = "fuzz gpu"
kind = "gpu"
peak_gflops = 1000.0
mem_bandwidth_gbs = 500.0
cores = 10
threads = 100
clock_mhz = 1000.0
memory_gb = 16.0
cache_mb = 4.0
source = "published"
"#;

/// (mapping TOML, CSV) pairs covering constants, pairs, flags, a phase column and a device file.
fn mappings() -> Vec<(String, &'static str)> {
    vec![
        (
            format!(
                r#"kind = "conv2d"
backend = "fuzz"
unit = "us"
phase = "inference"
{DEVICE_TABLE}
[columns]
batch = "N"
in_channels = "C"
out_channels = "K"
input_hw = "HW"
kernel = "R"
median_ms = "latency"
min_ms = "latency_min"

[defaults]
stride = 1
padding = 0
dilation = 1
groups = 1
bias = true
"#
            ),
            "N,C,K,HW,R,latency,latency_min\n1,3,8,32,3,10.5,9.0\n4,16,16,14,1,20,18\n8,8,8,7,7,5,4\n",
        ),
        (
            r#"kind = "matmul"
device = "device.json"
backend = "fuzz"
unit = "ms"

[columns]
batch = "b"
heads = "h"
m = "m"
k = "k"
n = "n"
trans_a = "ta"
phase = "mode"
median_ms = "t"
threads = "thr"

[defaults]
trans_b = false
utilisation = 0.5
"#
            .to_string(),
            "b,h,m,k,n,ta,mode,t,thr\n1,1,64,64,64,0,inference,0.5,1\n2,12,128,64,128,true,training,1.5,2\n3,4,1,1,1,False,train,0.01,2\n",
        ),
        (
            format!(
                r#"kind = "relu"
backend = "fuzz"
unit = "s"
phase = "training"
{DEVICE_TABLE}
[columns]
c = "c"
h = "h"
w = "w"
median_ms = "secs"
utilisation = "u"

[defaults]
batch = 1
"#
            ),
            "c,h,w,secs,u\n1,1,1,0.001,0\n3,224,224,0.01,0.5\n64,56,56,0.002,0.25\n",
        ),
    ]
}

/// `import::csv` with mutated mappings and mutated CSVs; with `read_back`, an import must
/// write and read back whole.
fn fuzz_csv(name: &str, read_back: bool) {
    let pairs = mappings();
    let device_json =
        serde_json::to_string(&perfcast_core::testing::cpu_device()).expect("serialises");
    // One of the four kinds of change per case (or none): several at once rarely leave an
    // input that gets past the first check.
    let strategy = (
        0..pairs.len(),
        0u8..5,
        toml_ops(2),
        byte_ops(1),
        csv_ops(3),
        byte_ops(1),
    )
        .prop_map(|(i, which, t, tb, c, cb)| {
            let keep = |n: u8| which == n;
            (
                i,
                if keep(1) { t } else { Vec::new() },
                if keep(2) { tb } else { Vec::new() },
                if keep(3) { c } else { Vec::new() },
                if keep(4) { cb } else { Vec::new() },
            )
        });
    fuzz(
        name,
        Cost::Files,
        strategy,
        |(i, toml, toml_bytes, csv, csv_bytes): (
            usize,
            Vec<TomlOp>,
            Vec<ByteOp>,
            Vec<CsvOp>,
            Vec<ByteOp>,
        )| {
            let tmp = scratch()?;
            let (mapping_text, csv_text) = &pairs[i];
            let mapping_path = tmp.path().join("mapping.toml");
            let csv_path = tmp.path().join("data.csv");
            std::fs::write(tmp.path().join("device.json"), &device_json).map_err(fail)?;
            let mapping_text = mutate_toml_text(mapping_text, &toml, &toml_bytes);
            std::fs::write(&mapping_path, &mapping_text).map_err(fail)?;
            let mut bytes = apply_csv(csv_text, &csv).into_bytes();
            apply_bytes(&mut bytes, &csv_bytes);
            std::fs::write(&csv_path, &bytes).map_err(fail)?;

            let mapping = match import::csv::Mapping::from_toml(&mapping_text, &mapping_path) {
                Ok(m) => m,
                Err(e) => {
                    if toml.is_empty() && toml_bytes.is_empty() {
                        eprintln!("DEBUG mapping {i}: {e}");
                    }
                    return Ok(false);
                }
            };
            let rows = match import::csv::import(&csv_path, &mapping) {
                Ok(r) => r,
                Err(e) => {
                    if csv.is_empty() && csv_bytes.is_empty() {
                        eprintln!("DEBUG csv {i}: {e}");
                    }
                    return Ok(false);
                }
            };
            let out = tmp.path().join("out");
            if import::csv::write(&rows, &out, false).is_err() {
                return Ok(false);
            }
            let imported = &rows.devices[0].tables;
            if !read_back {
                if let Ok(dir) = DatasetDir::open(&out) {
                    for kind in imported.keys() {
                        let _ = dir.read(*kind);
                    }
                }
                return Ok(true);
            }
            let dir = DatasetDir::open(&out).map_err(|e| {
                fail(format!(
                    "csv import wrote a dataset that does not open: {e}"
                ))
            })?;
            for (kind, want) in imported {
                let read = dir.read(*kind).map_err(|e| {
                    fail(format!(
                        "csv import wrote {} `{kind}` rows that do not read back: {e}",
                        want.len()
                    ))
                })?;
                check(&read == want, || {
                    format!(
                        "`{kind}`: imported {} rows, read back {} (or changed)",
                        want.len(),
                        read.len()
                    )
                })?;
                read.iter().try_for_each(check_record)?;
            }
            Ok(true)
        },
    );
}

/// `import::csv` with mutated mappings and CSVs: no panic importing, writing or reading.
#[test]
fn csv_import() {
    fuzz_csv("csv_import", false);
}

/// Nothing lost: what the CSV importer accepts writes and reads back row for row.
#[test]
fn csv_import_reads_back() {
    fuzz_csv("csv_import_reads_back", true);
}

fn test_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../perfcast-data/tests/data")
}

/// The files of one published source (relative paths under the test data), read once.
fn source_files(source: &str, files: &[&str]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|f| {
            let path = test_data().join(source).join(f);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("test data `{}`: {e}", path.display()));
            ((*f).to_string(), text)
        })
        .collect()
}

/// Copies a source's files into a scratch folder with file `which` mutated, runs `read` on the
/// folder, and writes and reads back what it imported.
fn fuzz_source(
    name: &str,
    files: Vec<(String, String)>,
    read: fn(&Path) -> perfcast_data::Result<Import>,
    read_back: bool,
) {
    let strategy = (0..files.len(), csv_ops(4), json_ops(3), byte_ops(1));
    fuzz(
        name,
        Cost::Files,
        strategy,
        |(which, csv, json, bytes): (usize, Vec<CsvOp>, Vec<JsonOp>, Vec<ByteOp>)| {
            let tmp = scratch()?;
            let src = tmp.path().join("src");
            for (i, (rel, text)) in files.iter().enumerate() {
                let path = src.join(rel);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(fail)?;
                }
                let text = if i != which {
                    text.clone()
                } else if rel.ends_with(".json") {
                    mutate_json_text(text, &json, &bytes)
                } else {
                    apply_text(&apply_csv(text, &csv), &bytes)
                };
                std::fs::write(&path, text).map_err(fail)?;
            }
            match read(&src) {
                Ok(rows) if read_back => write_and_read_back(&rows, &tmp.path().join("out")),
                Ok(rows) => {
                    // Writing and reading must not panic; what they return is the strict
                    // variant's concern.
                    let out = tmp.path().join("out");
                    if rows.write(&out, false).is_ok() {
                        for d in &rows.devices {
                            let Some(spec) = &d.device else { continue };
                            if let Ok(dir) = DatasetDir::open(out.join(spec.slug())) {
                                for kind in d.tables.keys() {
                                    let _ = dir.read(*kind);
                                }
                            }
                        }
                    }
                    Ok(true)
                }
                Err(_) => Ok(false),
            }
        },
    );
}

/// `import::neusight::import` on a NeuSight folder with one CSV or device config mutated.
#[test]
fn neusight_import() {
    fuzz_source(
        "neusight_import",
        neusight_files(),
        import::neusight::import,
        false,
    );
}

/// `import::justus::import` with `conv.csv` or `dense.csv` mutated.
#[test]
fn justus_import() {
    let files = source_files("justus", &["conv.csv", "dense.csv"]);
    fuzz_source("justus_import", files, import::justus::import, false);
}

/// `import::deepbench::import` with `conv.csv`, `gemm.csv` or `specs.csv` mutated.
#[test]
fn deepbench_import() {
    let files = source_files("deepbench", &["conv.csv", "gemm.csv", "specs.csv"]);
    fuzz_source("deepbench_import", files, import::deepbench::import, false);
}

fn neusight_files() -> Vec<(String, String)> {
    source_files(
        "neusight",
        &[
            "linear/Tesla_T4.csv",
            "linear/Tesla_V100-PCIE-32GB.csv",
            "bmm/Tesla_V100-PCIE-32GB.csv",
            "conv/Tesla_V100-PCIE-32GB.csv",
            "device_configs/Tesla_T4.json",
            "device_configs/Tesla_V100-PCIE-32GB.json",
        ],
    )
}

/// Nothing lost: what the NeuSight importer accepts writes and reads back row for row.
#[test]
fn neusight_import_reads_back() {
    fuzz_source(
        "neusight_import_reads_back",
        neusight_files(),
        import::neusight::import,
        true,
    );
}

/// Nothing lost: what the Justus importer accepts writes and reads back row for row.
#[test]
fn justus_import_reads_back() {
    let files = source_files("justus", &["conv.csv", "dense.csv"]);
    fuzz_source(
        "justus_import_reads_back",
        files,
        import::justus::import,
        true,
    );
}

/// Nothing lost: what the DeepBench importer accepts writes and reads back row for row.
#[test]
fn deepbench_import_reads_back() {
    let files = source_files("deepbench", &["conv.csv", "gemm.csv", "specs.csv"]);
    fuzz_source(
        "deepbench_import_reads_back",
        files,
        import::deepbench::import,
        true,
    );
}

/// Valid rows of a few kinds, with full and partial timings and a failed row.
fn records(kind: ModuleKind) -> Vec<Record> {
    let spec: ModuleSpec = perfcast_core::testing::one_of_each_kind()
        .into_iter()
        .find(|s| s.kind() == kind)
        .expect("every kind has a test spec");
    let mut out = Vec::new();
    for (i, phase) in [Phase::Inference, Phase::Training, Phase::Inference]
        .into_iter()
        .enumerate()
    {
        let outcome = match i {
            0 => Outcome::Ok(Timing {
                median_ms: 1.5,
                min_ms: Some(1.0),
                mad_ms: Some(0.1),
                p10_ms: Some(1.1),
                p90_ms: Some(2.0),
                repetitions: Some(7),
            }),
            1 => Outcome::Ok(Timing::median_only(3.0)),
            _ => Outcome::Failed {
                reason: "out of memory".into(),
            },
        };
        out.push(Record {
            spec: spec.clone(),
            context: Context {
                batch: 1 << i,
                phase,
                threads: 1 + i,
                utilisation: 0.25 * i as f64,
            },
            backend: "fuzz".into(),
            outcome,
            perfcast_version: perfcast_core::VERSION.into(),
            timestamp: 1_700_000_000 + i as i64,
        });
    }
    out
}

const PARQUET_KINDS: [ModuleKind; 4] = [
    ModuleKind::Conv2d,
    ModuleKind::Linear,
    ModuleKind::Matmul,
    ModuleKind::MaxPool2d,
];

/// Reads `kind` from `dir`; a table that reads must hold only valid rows and survive a
/// write and a second read unchanged.
fn read_checked(dir: &DatasetDir, kind: ModuleKind) -> Result<bool, TestCaseError> {
    let Ok(read) = dir.read(kind) else {
        return Ok(false);
    };
    read.iter().try_for_each(check_record)?;
    dir.write(kind, &read)
        .map_err(|e| fail(format!("rows that read do not write: {e}")))?;
    let again = dir
        .read(kind)
        .map_err(|e| fail(format!("rows written back do not read: {e}")))?;
    check(again == read, || "rows change on a write and read".into())?;
    Ok(true)
}

/// A dataset directory with a valid device and one valid table per kind, and its files' bytes.
fn dataset() -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = DatasetDir::create_or_open(
        tmp.path().join("base"),
        &perfcast_core::testing::cpu_device(),
    )
    .expect("dataset");
    let bytes = PARQUET_KINDS
        .iter()
        .map(|kind| {
            dir.write(*kind, &records(*kind)).expect("valid rows write");
            std::fs::read(dir.module_path(*kind)).expect("written table reads")
        })
        .collect();
    (tmp, bytes)
}

/// `DatasetDir::read` on Parquet files with flipped, inserted, deleted bytes and truncation.
#[test]
fn parquet_bytes() {
    let (tmp, tables) = dataset();
    let work = DatasetDir::create_or_open(
        tmp.path().join("work"),
        &perfcast_core::testing::cpu_device(),
    )
    .expect("dataset");
    let strategy = (0..PARQUET_KINDS.len(), byte_ops(4));
    fuzz("parquet_bytes", Cost::Files, strategy, |(i, ops)| {
        let kind = PARQUET_KINDS[i];
        let mut bytes = tables[i].clone();
        apply_bytes(&mut bytes, &ops);
        std::fs::write(work.module_path(kind), &bytes).map_err(fail)?;
        read_checked(&work, kind)
    });
}

/// The `parquet_bytes` case that aborts the process: polars asks for 2,305,843,009,213,693,944
/// bytes (2^61 - 8) reading this mutated maxpool2d table, and a failed allocation is no panic
/// `read_parquet` could catch. Found with `PERFCAST_FUZZ_SEED=13398714477801462692
/// PERFCAST_FUZZ_CASES=160000`; run it alone with `-- --ignored parquet_allocation_abort`.
#[test]
#[ignore = "aborts the test process (a 2^61-byte allocation inside polars); not fixed yet"]
fn parquet_allocation_abort() {
    let (tmp, tables) = dataset();
    let work = DatasetDir::create_or_open(
        tmp.path().join("work"),
        &perfcast_core::testing::cpu_device(),
    )
    .expect("dataset");
    let kind = PARQUET_KINDS[3];
    assert_eq!(kind, ModuleKind::MaxPool2d);
    let mut bytes = tables[3].clone();
    apply_bytes(
        &mut bytes,
        &[
            ByteOp::Insert(17772291912875652645, 6),
            ByteOp::Flip(7765919293265605693, 121),
        ],
    );
    std::fs::write(work.module_path(kind), &bytes).expect("table writes");
    assert!(work.read(kind).is_err(), "a corrupt table is an error");
}

/// One change to a frame before it is written as Parquet.
#[derive(Clone, Debug)]
enum FrameOp {
    /// Set one cell of an integer column.
    Int(usize, usize, i64),
    /// Set one cell of a float column.
    Float(usize, usize, f64),
    /// Set one cell of a string column.
    Str(usize, usize, &'static str),
    /// Null one cell.
    Null(usize, usize),
    /// Replace a column by another type: 0 u64::MAX, 1 strings, 2 floats, 3 booleans, 4 i32,
    /// 5 all null.
    Retype(usize, u8),
    /// Drop a column.
    Drop(usize),
}

fn frame_op() -> impl Strategy<Value = FrameOp> {
    let ints = prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(-1i64),
        Just(0i64),
        Just(1i64),
        Just(2i64),
        Just(1i64 << 24),
        Just((1i64 << 24) + 1),
        Just(1i64 << 32),
        Just(1i64 << 40),
        Just(u32::MAX as i64 + 1),
        any::<i64>(),
        0i64..64,
    ];
    let floats = prop_oneof![
        Just(f64::MAX),
        Just(f64::MIN),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0f64),
        Just(-1.0f64),
        Just(5e-324f64),
        Just(86_400_000.0f64),
        Just(86_400_000.000_1f64),
        Just(0.999_999f64),
        Just(1.0f64),
        any::<f64>(),
    ];
    let strs = proptest::sample::select(vec![
        "",
        "ok",
        "failed",
        "inference",
        "training",
        "train",
        "OK",
        "é😀",
        "1",
        "NaN",
    ]);
    prop_oneof![
        4 => (any::<usize>(), any::<usize>(), ints).prop_map(|(c, r, v)| FrameOp::Int(c, r, v)),
        3 => (any::<usize>(), any::<usize>(), floats).prop_map(|(c, r, v)| FrameOp::Float(c, r, v)),
        2 => (any::<usize>(), any::<usize>(), strs).prop_map(|(c, r, v)| FrameOp::Str(c, r, v)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(c, r)| FrameOp::Null(c, r)),
        1 => (any::<usize>(), 0u8..6).prop_map(|(c, t)| FrameOp::Retype(c, t)),
        1 => any::<usize>().prop_map(FrameOp::Drop),
    ]
}

/// Applies one change; a change that does not fit the column's type is skipped.
fn apply_frame(df: &mut DataFrame, op: &FrameOp) -> PolarsResult<()> {
    let names: Vec<PlSmallStr> = df.get_column_names_owned();
    let height = df.height();
    if names.is_empty() || height == 0 {
        return Ok(());
    }
    let col_at = |c: usize| names[c % names.len()].clone();
    match *op {
        FrameOp::Int(c, r, v) => {
            let name = col_at(c);
            let col = df.column(&name)?;
            if col.dtype() == &DataType::Int64 {
                let mut values: Vec<Option<i64>> = col.i64()?.iter().collect();
                values[r % height] = Some(v);
                df.with_column(Column::new(name, values))?;
            }
        }
        FrameOp::Float(c, r, v) => {
            let name = col_at(c);
            let col = df.column(&name)?;
            if col.dtype() == &DataType::Float64 {
                let mut values: Vec<Option<f64>> = col.f64()?.iter().collect();
                values[r % height] = Some(v);
                df.with_column(Column::new(name, values))?;
            }
        }
        FrameOp::Str(c, r, v) => {
            let name = col_at(c);
            let col = df.column(&name)?;
            if col.dtype() == &DataType::String {
                let mut values: Vec<Option<String>> =
                    col.str()?.iter().map(|s| s.map(str::to_string)).collect();
                values[r % height] = Some(v.to_string());
                df.with_column(Column::new(name, values))?;
            }
        }
        FrameOp::Null(c, r) => {
            let name = col_at(c);
            let col = df.column(&name)?.clone();
            let mask: Vec<bool> = (0..height).map(|i| i != r % height).collect();
            let mask = BooleanChunked::new("mask".into(), mask);
            let nulls = Column::full_null(name.clone(), height, col.dtype());
            let kept = col
                .as_materialized_series()
                .zip_with(&mask, nulls.as_materialized_series())?;
            df.with_column(kept.into_column())?;
        }
        FrameOp::Retype(c, t) => {
            let name = col_at(c);
            let col = match t {
                0 => Column::new(name, vec![u64::MAX; height]),
                1 => Column::new(name, vec!["1"; height]),
                2 => Column::new(name, vec![1.0f64; height]),
                3 => Column::new(name, vec![true; height]),
                4 => Column::new(name, vec![1i32; height]),
                _ => Column::full_null(name, height, &DataType::Int64),
            };
            df.with_column(col)?;
        }
        FrameOp::Drop(c) => {
            let name = col_at(c);
            df.drop_in_place(&name)?;
        }
    }
    Ok(())
}

/// Parquet files written through polars with extreme values (i64::MAX, f64::MAX, NaN,
/// negative, nulls), retyped and missing columns: `read` returns an error or valid rows.
#[test]
fn parquet_frames() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let work = DatasetDir::create_or_open(
        tmp.path().join("work"),
        &perfcast_core::testing::cpu_device(),
    )
    .expect("dataset");
    let frames: Vec<DataFrame> = PARQUET_KINDS
        .iter()
        .map(|k| perfcast_data::table::to_frame(*k, &records(*k)).expect("valid rows frame"))
        .collect();
    let strategy = (
        0..PARQUET_KINDS.len(),
        proptest::collection::vec(frame_op(), 1..=4),
    );
    fuzz("parquet_frames", Cost::Files, strategy, |(i, ops)| {
        let kind = PARQUET_KINDS[i];
        let mut df = frames[i].clone();
        for op in &ops {
            apply_frame(&mut df, op).map_err(|e| fail(format!("building the frame: {e}")))?;
        }
        let file = std::fs::File::create(work.module_path(kind)).map_err(fail)?;
        ParquetWriter::new(file)
            .finish(&mut df)
            .map_err(|e| fail(format!("writing the frame: {e}")))?;
        read_checked(&work, kind)
    });
}

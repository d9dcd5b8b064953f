//! Records <-> polars DataFrames <-> Parquet files, with schema checks on the way in.

use std::path::Path;

use perfcast_core::{Context, ModuleKind, ModuleSpec, Phase};
use polars::prelude::*;

use crate::error::{Error, Result};
use crate::record::{Outcome, Record, Timing};

/// Version of the column layout; bumped when columns change meaning.
pub const SCHEMA_VERSION: i64 = 1;

/// Context, target and provenance columns every dataset has (after the kind's config columns).
pub const COMMON_COLUMNS: &[&str] = &[
    "batch",
    "phase",
    "threads",
    "utilisation",
    "backend",
    "status",
    "error",
    "median_ms",
    "min_ms",
    "mad_ms",
    "p10_ms",
    "p90_ms",
    "repetitions",
    "perfcast_version",
    "timestamp",
    "schema_version",
];

/// Builds the DataFrame of records of one kind.
pub fn to_frame(kind: ModuleKind, records: &[Record]) -> PolarsResult<DataFrame> {
    let n = records.len();
    let mut columns: Vec<Column> = Vec::new();
    for (i, name) in kind.config_columns().iter().enumerate() {
        let values: Vec<i64> = records.iter().map(|r| r.spec.config()[i]).collect();
        columns.push(Column::new((*name).into(), values));
    }
    for (i, name) in kind.layout_columns().iter().enumerate() {
        let values: Vec<i64> = records.iter().map(|r| r.spec.layout()[i]).collect();
        columns.push(Column::new((*name).into(), values));
    }
    let ctx = |f: &dyn Fn(&Context) -> i64| -> Vec<i64> {
        records.iter().map(|r| f(&r.context)).collect()
    };
    columns.push(Column::new("batch".into(), ctx(&|c| c.batch as i64)));
    columns.push(Column::new(
        "phase".into(),
        records
            .iter()
            .map(|r| r.context.phase.name())
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new("threads".into(), ctx(&|c| c.threads as i64)));
    columns.push(Column::new(
        "utilisation".into(),
        records
            .iter()
            .map(|r| r.context.utilisation)
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "backend".into(),
        records
            .iter()
            .map(|r| r.backend.as_str())
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "status".into(),
        records
            .iter()
            .map(|r| if r.timing().is_some() { "ok" } else { "failed" })
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "error".into(),
        records
            .iter()
            .map(|r| match &r.outcome {
                Outcome::Failed { reason } => Some(reason.as_str()),
                Outcome::Ok(_) => None,
            })
            .collect::<Vec<_>>(),
    ));
    let timing = |f: &dyn Fn(&Timing) -> f64| -> Vec<Option<f64>> {
        records.iter().map(|r| r.timing().map(f)).collect()
    };
    let optional = |f: &dyn Fn(&Timing) -> Option<f64>| -> Vec<Option<f64>> {
        records.iter().map(|r| r.timing().and_then(f)).collect()
    };
    columns.push(Column::new("median_ms".into(), timing(&|t| t.median_ms)));
    columns.push(Column::new("min_ms".into(), optional(&|t| t.min_ms)));
    columns.push(Column::new("mad_ms".into(), optional(&|t| t.mad_ms)));
    columns.push(Column::new("p10_ms".into(), optional(&|t| t.p10_ms)));
    columns.push(Column::new("p90_ms".into(), optional(&|t| t.p90_ms)));
    columns.push(Column::new(
        "repetitions".into(),
        records
            .iter()
            .map(|r| r.timing().and_then(|t| t.repetitions).map(i64::from))
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "perfcast_version".into(),
        records
            .iter()
            .map(|r| r.perfcast_version.as_str())
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "timestamp".into(),
        records.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "schema_version".into(),
        vec![SCHEMA_VERSION; n],
    ));
    DataFrame::new(n, columns)
}

/// Typed access to one column, with errors naming the file and column.
struct Columns<'a> {
    df: &'a DataFrame,
    path: &'a Path,
}

impl Columns<'_> {
    fn get(&self, name: &str) -> Result<&Column> {
        self.df
            .column(name)
            .map_err(|_| Error::schema(self.path, format!("missing column `{name}`")))
    }

    /// `values` of column `name` when it has one per row: a corrupt file can decode to a
    /// frame whose column is shorter than its height (a fuzzed byte did), which would index
    /// past the end.
    fn per_row<T>(&self, name: &str, values: Vec<T>) -> Result<Vec<T>> {
        if values.len() == self.df.height() {
            Ok(values)
        } else {
            Err(Error::schema(
                self.path,
                format!(
                    "column `{name}` holds {} values for {} rows",
                    values.len(),
                    self.df.height()
                ),
            ))
        }
    }

    fn i64s(&self, name: &str) -> Result<Vec<Option<i64>>> {
        let col = self.get(name)?;
        let cast = col.cast(&DataType::Int64).map_err(|_| {
            Error::schema(
                self.path,
                format!("column `{name}` is {} (expected integers)", col.dtype()),
            )
        })?;
        if !matches!(
            col.dtype(),
            DataType::Int64
                | DataType::Int32
                | DataType::UInt32
                | DataType::UInt64
                | DataType::Int16
                | DataType::Int8
                | DataType::UInt8
                | DataType::UInt16
        ) {
            return Err(Error::schema(
                self.path,
                format!("column `{name}` is {} (expected integers)", col.dtype()),
            ));
        }
        let ca = cast
            .i64()
            .map_err(|e| Error::schema(self.path, e.to_string()))?;
        self.per_row(name, ca.iter().collect())
    }

    fn f64s(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let col = self.get(name)?;
        if !col.dtype().is_primitive_numeric() {
            return Err(Error::schema(
                self.path,
                format!("column `{name}` is {} (expected numbers)", col.dtype()),
            ));
        }
        let cast = col
            .cast(&DataType::Float64)
            .map_err(|e| Error::schema(self.path, e.to_string()))?;
        let ca = cast
            .f64()
            .map_err(|e| Error::schema(self.path, e.to_string()))?;
        self.per_row(name, ca.iter().collect())
    }

    fn strs(&self, name: &str) -> Result<Vec<Option<String>>> {
        let col = self.get(name)?;
        let ca = col.str().map_err(|_| {
            Error::schema(
                self.path,
                format!("column `{name}` is {} (expected strings)", col.dtype()),
            )
        })?;
        self.per_row(name, ca.iter().map(|s| s.map(str::to_string)).collect())
    }
}

fn required<T>(path: &Path, column: &str, row: usize, v: Option<T>) -> Result<T> {
    v.ok_or_else(|| Error::schema(path, format!("row {row}: column `{column}` is null")))
}

fn check_usize(path: &Path, column: &str, row: usize, v: i64) -> Result<usize> {
    usize::try_from(v).map_err(|_| {
        Error::schema(
            path,
            format!("row {row}: `{column}` must not be negative, got {v}"),
        )
    })
}

/// Largest time a dataset may store for one call, ms (a day).
pub const MAX_TIME_MS: f64 = 86_400_000.0;

fn finite_positive(path: &Path, column: &str, row: usize, v: f64) -> Result<f64> {
    if v.is_nan() {
        return Err(Error::schema(path, format!("row {row}: `{column}` is NaN")));
    }
    if !(v.is_finite() && v >= 0.0) {
        return Err(Error::schema(
            path,
            format!("row {row}: `{column}` must be a non-negative finite time, got {v}"),
        ));
    }
    // A day per call is beyond anything measured; larger values (1e308) trained into `inf%`.
    if v > MAX_TIME_MS {
        return Err(Error::schema(
            path,
            format!("row {row}: `{column}` is {v} ms, more than a day ({MAX_TIME_MS} ms)"),
        ));
    }
    Ok(v)
}

/// Converts a DataFrame read from `path` back into records, validating every value.
pub fn from_frame(kind: ModuleKind, df: &DataFrame, path: &Path) -> Result<Vec<Record>> {
    let cols = Columns { df, path };
    let version = cols.i64s("schema_version")?;
    if let Some(v) = version.iter().flatten().find(|&&v| v != SCHEMA_VERSION) {
        return Err(Error::schema(
            path,
            format!(
                "schema version {v} is not supported (this perfcast reads version {SCHEMA_VERSION})"
            ),
        ));
    }
    let config: Vec<Vec<Option<i64>>> = kind
        .config_columns()
        .iter()
        .map(|c| cols.i64s(c))
        .collect::<Result<_>>()?;
    // Layout columns came later than the configuration: a file without them holds the default
    // layout.
    let layout: Vec<Option<Vec<Option<i64>>>> = kind
        .layout_columns()
        .iter()
        .map(|c| {
            if df.column(c).is_ok() {
                cols.i64s(c).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<_>>()?;
    let batch = cols.i64s("batch")?;
    let phase = cols.strs("phase")?;
    let threads = cols.i64s("threads")?;
    let utilisation = cols.f64s("utilisation")?;
    let backend = cols.strs("backend")?;
    let status = cols.strs("status")?;
    let error = cols.strs("error")?;
    let median = cols.f64s("median_ms")?;
    let min = cols.f64s("min_ms")?;
    let mad = cols.f64s("mad_ms")?;
    let p10 = cols.f64s("p10_ms")?;
    let p90 = cols.f64s("p90_ms")?;
    let reps = cols.i64s("repetitions")?;
    let version_str = cols.strs("perfcast_version")?;
    let timestamp = cols.i64s("timestamp")?;

    let mut records = Vec::with_capacity(df.height());
    for row in 0..df.height() {
        let values: Vec<i64> = kind
            .config_columns()
            .iter()
            .zip(&config)
            .map(|(name, col)| required(path, name, row, col[row]))
            .collect::<Result<_>>()?;
        let layout_values: Vec<i64> = kind
            .layout_columns()
            .iter()
            .zip(&layout)
            .map(|(name, col)| match col {
                Some(col) => required(path, name, row, col[row]),
                None => Ok(0),
            })
            .collect::<Result<_>>()?;
        let spec = ModuleSpec::from_config(kind, &values)
            .and_then(|s| s.with_layout(&layout_values))
            .map_err(|e| Error::schema(path, format!("row {row}: {e}")))?;
        let phase_name = required(path, "phase", row, phase[row].clone())?;
        let context = Context {
            batch: check_usize(
                path,
                "batch",
                row,
                required(path, "batch", row, batch[row])?,
            )?,
            phase: phase_name
                .parse::<Phase>()
                .map_err(|e| Error::schema(path, format!("row {row}: {e}")))?,
            threads: check_usize(
                path,
                "threads",
                row,
                required(path, "threads", row, threads[row])?,
            )?,
            utilisation: required(path, "utilisation", row, utilisation[row])?,
        };
        context
            .validate()
            .map_err(|e| Error::schema(path, format!("row {row}: {e}")))?;
        let outcome = match required(path, "status", row, status[row].clone())?.as_str() {
            "ok" => {
                let optional = |name: &str, col: &[Option<f64>]| -> Result<Option<f64>> {
                    col[row]
                        .map(|v| finite_positive(path, name, row, v))
                        .transpose()
                };
                let repetitions = reps[row]
                    .map(|n| {
                        u32::try_from(n).map_err(|_| {
                            Error::schema(path, format!("row {row}: `repetitions` is {n}"))
                        })
                    })
                    .transpose()?;
                let median = required(path, "median_ms", row, median[row])?;
                Outcome::Ok(Timing {
                    median_ms: finite_positive(path, "median_ms", row, median)?,
                    min_ms: optional("min_ms", &min)?,
                    mad_ms: optional("mad_ms", &mad)?,
                    p10_ms: optional("p10_ms", &p10)?,
                    p90_ms: optional("p90_ms", &p90)?,
                    repetitions,
                })
            }
            "failed" => Outcome::Failed {
                reason: error[row].clone().unwrap_or_default(),
            },
            other => {
                return Err(Error::schema(
                    path,
                    format!("row {row}: `status` must be `ok` or `failed`, got `{other}`"),
                ));
            }
        };
        records.push(Record {
            spec,
            context,
            backend: required(path, "backend", row, backend[row].clone())?,
            outcome,
            perfcast_version: version_str[row].clone().unwrap_or_default(),
            timestamp: timestamp[row].unwrap_or(0),
        });
    }
    Ok(records)
}

/// Most rows a dataset table may claim: far beyond any measured table (one row is one
/// measurement), far below what would exhaust memory when a decoder reserves room for them.
pub const MAX_TABLE_ROWS: usize = 1 << 28;

/// Most bytes one column chunk may claim uncompressed (16 GiB).
const MAX_CHUNK_BYTES: i64 = 1 << 34;

/// Why a Parquet footer cannot describe a dataset table, if it cannot: row, value and byte
/// counts that polars trusts to reserve memory before it reads a value. A failed allocation
/// aborts the process (no panic the reader could catch); a fuzz run once aborted asking for
/// 2.3e18 bytes, likely such a count read from corrupt bytes. Page headers are not checked
/// here (their counts are `i32`).
fn implausible(metadata: &polars::io::parquet::read::FileMetadata) -> Option<String> {
    let too_many = |what: &str, n: i128| {
        (!(0..=MAX_TABLE_ROWS as i128).contains(&n)).then(|| {
            format!("the Parquet footer claims {n} {what} (at most {MAX_TABLE_ROWS}); the file is corrupt")
        })
    };
    if let Some(why) = too_many("rows", metadata.num_rows as i128)
        .or_else(|| too_many("rows in a row group", metadata.max_row_group_height as i128))
    {
        return Some(why);
    }
    let mut sum = 0i128;
    for group in &metadata.row_groups {
        sum += group.num_rows() as i128;
        if let Some(why) = too_many("rows in a row group", group.num_rows() as i128) {
            return Some(why);
        }
        for column in group.parquet_columns() {
            if let Some(why) = too_many("values in a column", i128::from(column.num_values())) {
                return Some(why);
            }
            let bytes = column.uncompressed_size();
            if !(0..=MAX_CHUNK_BYTES).contains(&bytes) {
                return Some(format!(
                    "the Parquet footer claims a column of {bytes} bytes; the file is corrupt"
                ));
            }
        }
    }
    (sum != metadata.num_rows as i128).then(|| {
        format!(
            "the Parquet footer claims {} rows, its row groups {sum}; the file is corrupt",
            metadata.num_rows
        )
    })
}

/// Reads a Parquet file into a DataFrame.
pub fn read_parquet(path: &Path) -> Result<DataFrame> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        action: "open",
        path: path.to_path_buf(),
        source,
    })?;
    // polars' decoders assert on some corrupt pages instead of returning an error (a flipped
    // byte in a conv2d table tripped `offset + length <= self.length` in polars-arrow): a
    // corrupt file is outside input, so its panic becomes the file's error, reported once.
    // The hook is process-wide: readers on several threads take turns swapping it, so one
    // cannot restore another's silent hook and leave panics unreported for good.
    static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let read = {
        let _turn = HOOK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let read = std::panic::catch_unwind(move || {
            let mut reader = ParquetReader::new(file);
            let metadata = reader.get_metadata()?;
            if let Some(why) = implausible(metadata) {
                return Ok(Err(why));
            }
            reader.finish().map(Ok)
        });
        std::panic::set_hook(previous);
        read
    };
    match read {
        Ok(Ok(Ok(df))) => Ok(df),
        Ok(Ok(Err(why))) => Err(Error::unreadable(path, why)),
        Ok(Err(e)) => Err(Error::unreadable(path, e)),
        Err(_) => Err(Error::unreadable(
            path,
            "the Parquet data is corrupt (the decoder failed on it)",
        )),
    }
}

/// Writes a DataFrame to `path` atomically: a temp file beside it, then a rename.
pub fn write_parquet_atomic(path: &Path, df: &mut DataFrame) -> Result<()> {
    crate::atomic::write_atomic_with(path, |file| {
        ParquetWriter::new(file)
            .with_compression(ParquetCompression::Zstd(None))
            .finish(df)
            .map(|_| ())
            .map_err(|e| Error::unreadable(path, format!("writing failed: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use polars::io::parquet::read::FileMetadata;

    fn metadata_of_a_table(dir: &Path) -> FileMetadata {
        let path = dir.join("t.parquet");
        let mut df = DataFrame::new(
            3,
            vec![
                Column::new("a".into(), [1i64, 2, 3]),
                Column::new("b".into(), [0.5f64, 1.5, 2.5]),
            ],
        )
        .unwrap();
        write_parquet_atomic(&path, &mut df).unwrap();
        assert_eq!(read_parquet(&path).unwrap(), df);
        let file = std::fs::File::open(&path).unwrap();
        (**ParquetReader::new(file).get_metadata().unwrap()).clone()
    }

    /// A footer claiming more rows or bytes than any table holds is refused before polars
    /// reserves memory for them (a fuzz run once aborted on a 2.3e18-byte allocation).
    #[test]
    fn footers_claiming_impossible_sizes_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = metadata_of_a_table(tmp.path());
        assert_eq!(implausible(&meta), None);
        let mut m = meta.clone();
        m.num_rows = 1 << 58;
        let why = implausible(&m).unwrap();
        assert!(why.contains("claims 288230376151711744 rows"), "{why}");
        let mut m = meta.clone();
        m.max_row_group_height = usize::MAX;
        assert!(implausible(&m).is_some());
        let mut m = meta.clone();
        m.num_rows += 1;
        let why = implausible(&m).unwrap();
        assert!(why.contains("claims 4 rows, its row groups 3"), "{why}");
        let mut m = meta;
        m.row_groups.clear();
        assert!(implausible(&m).is_some());
    }
}

//! Users' own measurements: one CSV of one module kind on one device, and a TOML mapping that
//! says what its columns mean.
//!
//! ```toml
//! kind = "conv2d"
//! # A device.json (relative to this file), or an inline [device] table with the fields of a
//! # perfcast device spec (name, kind, peak_gflops, mem_bandwidth_gbs, cores, threads,
//! # clock_mhz, memory_gb, cache_mb, source).
//! device = "a100.json"
//! backend = "pytorch-2.3-cuda12"   # what ran the measurements
//! unit = "us"                      # of the latency columns: ms, us or s
//! phase = "inference"              # or map a column: [columns] phase = "mode"
//!
//! [columns]                        # perfcast name = CSV column
//! batch = "N"
//! in_channels = "C"
//! out_channels = "K"
//! input_hw = "HW"                  # a pair name sets both: in_h and in_w from column HW
//! kernel_h = "R"
//! kernel_w = "S"
//! median_ms = "latency"            # the central latency, in `unit`
//! min_ms = "latency_min"           # optional
//!
//! [defaults]                       # constants for what the CSV does not hold
//! stride = 1
//! padding = 0
//! dilation = 1
//! groups = 1
//! bias = true
//! ```
//!
//! Every configuration column of the kind ([`ModuleKind::config_columns`]) and `batch` must
//! come from `[columns]` or `[defaults]`; layout columns ([`ModuleKind::layout_columns`]: a
//! matmul's `trans_a` and `trans_b`, 0/1 or true/false) may, and are 0 otherwise; pair names (`input_hw`, `kernel`, `stride`,
//! `padding`, `dilation`) set the `_h` and `_w` columns at once. `threads` (default 1 on a GPU;
//! required for a CPU device) and `utilisation` (default 0) may come from either too. Unknown
//! keys, a key given twice, a missing CSV column, and an empty, NaN, negative or non-numeric
//! cell are errors that name the file, the line and the column. Nothing is skipped silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use perfcast_core::{Context, DeviceKind, DeviceSpec, ModuleKind, ModuleSpec, Phase};
use serde::Deserialize;

use super::read::{Col, CsvFile, line};
use super::{DeviceRows, Import, ImportSummary};
use crate::dataset::DatasetDir;
use crate::error::{Error, Result};
use crate::record::{Outcome, Record, Timing};

/// Unit of the latency columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
    /// Seconds.
    S,
}

impl Unit {
    /// Milliseconds per unit.
    pub fn to_ms(self) -> f64 {
        match self {
            Unit::Ms => 1.0,
            Unit::Us => 1e-3,
            Unit::S => 1e3,
        }
    }
}

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    /// A CSV column, by name.
    Column(String),
    /// A constant from `[defaults]`.
    Constant(f64),
}

/// A parsed and checked mapping.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// The mapping file (errors name it).
    pub path: PathBuf,
    /// Module kind of every row.
    pub kind: ModuleKind,
    /// The device measured on.
    pub device: DeviceSpec,
    /// Backend name stored in every row.
    pub backend: String,
    /// Unit of the latency columns.
    pub unit: Unit,
    /// The phase of every row, when constant (otherwise `fields["phase"]` names a column).
    pub phase: Option<Phase>,
    /// perfcast name -> source, for the config and layout columns, `batch`, `threads`,
    /// `utilisation`, `median_ms`, `min_ms` and `phase`.
    pub fields: BTreeMap<String, Field>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    kind: String,
    device: toml::Value,
    backend: String,
    unit: String,
    phase: Option<String>,
    #[serde(default)]
    columns: toml::Table,
    #[serde(default)]
    defaults: toml::Table,
}

/// Context and target names a mapping may set besides the kind's config columns.
const CONTEXT: [&str; 3] = ["batch", "threads", "utilisation"];
const COLUMN_ONLY: [&str; 3] = ["median_ms", "min_ms", "phase"];

/// The config columns a pair name stands for in `kind`, if it is one.
fn pair(kind: ModuleKind, key: &str) -> Option<[&'static str; 2]> {
    let (h, w) = match key {
        "input_hw" => ("in_h", "in_w"),
        "kernel" => ("kernel_h", "kernel_w"),
        "stride" => ("stride_h", "stride_w"),
        "padding" => ("pad_h", "pad_w"),
        "dilation" => ("dilation_h", "dilation_w"),
        _ => return None,
    };
    let columns = kind.config_columns();
    let h = columns.iter().find(|c| **c == h)?;
    let w = columns.iter().find(|c| **c == w)?;
    Some([h, w])
}

fn location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            format!("line {line}: ")
        }
        None => String::new(),
    }
}

impl Mapping {
    /// Reads and checks a mapping file.
    pub fn from_file(path: &Path) -> Result<Mapping> {
        let text = std::fs::read_to_string(path).map_err(|e| super::cannot_read(path, &e))?;
        Mapping::from_toml(&text, path)
    }

    /// Parses mapping TOML; `path` names it in errors and anchors a relative device path.
    pub fn from_toml(text: &str, path: &Path) -> Result<Mapping> {
        let fail = |message: String| Error::schema(path, message);
        let raw: RawMapping = toml::from_str(text).map_err(|e| {
            fail(format!(
                "{}{}",
                location(text, e.span()),
                e.message().trim().replace('\n', " ")
            ))
        })?;
        let kind: ModuleKind = raw
            .kind
            .parse()
            .map_err(|_| fail(format!("`kind`: unknown module kind `{}`", raw.kind)))?;
        let device = match raw.device {
            toml::Value::String(file) => {
                let base = path.parent().unwrap_or(Path::new(""));
                let file = base.join(file);
                let text =
                    std::fs::read_to_string(&file).map_err(|e| super::cannot_read(&file, &e))?;
                DeviceSpec::from_json(&text).map_err(|e| Error::schema(&file, e.to_string()))?
            }
            table @ toml::Value::Table(_) => {
                let spec: DeviceSpec = table.try_into().map_err(|e: toml::de::Error| {
                    fail(format!(
                        "`device`: {}",
                        e.message().trim().replace('\n', " ")
                    ))
                })?;
                spec.validate()
                    .map_err(|e| fail(format!("`device`: {e}")))?;
                spec
            }
            other => {
                return Err(fail(format!(
                    "`device` must be a path to a device.json or a [device] table, got {other}"
                )));
            }
        };
        if raw.backend.trim().is_empty() {
            return Err(fail("`backend` is empty".into()));
        }
        let unit = match raw.unit.trim().to_ascii_lowercase().as_str() {
            "ms" => Unit::Ms,
            "us" | "µs" => Unit::Us,
            "s" => Unit::S,
            other => {
                return Err(fail(format!(
                    "`unit` must be \"ms\", \"us\" or \"s\", got \"{other}\""
                )));
            }
        };

        let config = kind.config_columns();
        let layout = kind.layout_columns();
        let known =
            |key: &str| config.contains(&key) || layout.contains(&key) || CONTEXT.contains(&key);
        let mut fields: BTreeMap<String, Field> = BTreeMap::new();
        let mut given_as: BTreeMap<String, String> = BTreeMap::new();
        let mut set = |name: &str, field: Field, as_key: String| -> Result<()> {
            if let Some(first) = given_as.get(name) {
                return Err(fail(format!(
                    "`{name}` is given twice (by `{first}` and by `{as_key}`)"
                )));
            }
            given_as.insert(name.to_string(), as_key);
            fields.insert(name.to_string(), field);
            Ok(())
        };
        let expected = |table: &str| -> String {
            let mut names: Vec<&str> = config.to_vec();
            names.extend(layout);
            names.extend(
                ["input_hw", "kernel", "stride", "padding", "dilation"]
                    .into_iter()
                    .filter(|k| pair(kind, k).is_some()),
            );
            names.extend(CONTEXT);
            if table == "columns" {
                names.extend(COLUMN_ONLY);
            }
            names.join(", ")
        };
        for (key, value) in &raw.columns {
            let Some(column) = value.as_str() else {
                return Err(fail(format!(
                    "`columns.{key}` must be a CSV column name (a string), got {value}"
                )));
            };
            let as_key = format!("columns.{key}");
            let field = Field::Column(column.to_string());
            if let Some(names) = pair(kind, key) {
                for name in names {
                    set(name, field.clone(), as_key.clone())?;
                }
            } else if known(key) || COLUMN_ONLY.contains(&key.as_str()) {
                set(key, field, as_key)?;
            } else {
                return Err(fail(format!(
                    "unknown key `{as_key}` for a {kind} mapping (expected one of: {})",
                    expected("columns")
                )));
            }
        }
        for (key, value) in &raw.defaults {
            let as_key = format!("defaults.{key}");
            let number = match value {
                toml::Value::Integer(i) => *i as f64,
                toml::Value::Boolean(b) if key == "bias" || layout.contains(&key.as_str()) => {
                    f64::from(u8::from(*b))
                }
                toml::Value::Float(f) if key == "utilisation" && f.is_finite() => *f,
                other => {
                    return Err(fail(format!(
                        "`{as_key}` must be {}, got {other}",
                        match key.as_str() {
                            k if k == "bias" || layout.contains(&k) => "true, false, 0 or 1",
                            "utilisation" => "a number",
                            _ => "an integer",
                        }
                    )));
                }
            };
            if number < 0.0 {
                return Err(fail(format!(
                    "`{as_key}` must not be negative, got {number}"
                )));
            }
            if let Some(names) = pair(kind, key) {
                for name in names {
                    set(name, Field::Constant(number), as_key.clone())?;
                }
            } else if known(key) {
                set(key, Field::Constant(number), as_key)?;
            } else {
                return Err(fail(format!(
                    "unknown key `{as_key}` for a {kind} mapping (expected one of: {})",
                    expected("defaults")
                )));
            }
        }
        let phase = match (&raw.phase, fields.contains_key("phase")) {
            (Some(_), true) => {
                return Err(fail(
                    "`phase` is given twice (as a constant and as `columns.phase`)".into(),
                ));
            }
            (Some(p), false) => Some(
                p.parse::<Phase>()
                    .map_err(|e| fail(format!("`phase`: {e}")))?,
            ),
            (None, true) => None,
            (None, false) => {
                return Err(fail(
                    "no phase: set `phase = \"inference\"` (or \"training\") or map a column with `[columns] phase`"
                        .into(),
                ));
            }
        };
        let missing: Vec<&str> = config
            .iter()
            .copied()
            .chain(["batch", "median_ms"])
            .filter(|c| !fields.contains_key(*c))
            .collect();
        if !missing.is_empty() {
            return Err(fail(format!(
                "no column or default for {} (a {kind} row needs {}, batch and median_ms)",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                config.join(", ")
            )));
        }
        if let Some(Field::Constant(_)) = fields.get("median_ms") {
            return Err(fail("`median_ms` must be a CSV column".into()));
        }
        if !fields.contains_key("threads") {
            if device.kind == DeviceKind::Cpu {
                return Err(fail(format!(
                    "device `{}` is a CPU: say how many threads measured, with `[defaults] threads` or `[columns] threads`",
                    device.name
                )));
            }
            fields.insert("threads".into(), Field::Constant(1.0));
        }
        fields
            .entry("utilisation".into())
            .or_insert(Field::Constant(0.0));
        Ok(Mapping {
            path: path.to_path_buf(),
            kind,
            device,
            backend: raw.backend.trim().to_string(),
            unit,
            phase,
            fields,
        })
    }
}

/// Whether `name` is a layout column of any kind (a 0/1 flag, like `bias`).
fn is_layout(name: &str) -> bool {
    ModuleKind::ALL
        .iter()
        .any(|k| k.layout_columns().contains(&name))
}

/// One value source resolved against a CSV.
enum Value<'a> {
    Column(Col<'a>),
    Constant(f64),
}

impl Value<'_> {
    fn integer(&self, row: usize, name: &str) -> Result<i64> {
        match self {
            Value::Constant(v) => Ok(*v as i64),
            Value::Column(col) if name == "bias" || is_layout(name) => {
                col.flag(row).map(i64::from).or_else(|_| col.integer(row))
            }
            Value::Column(col) => col.integer(row),
        }
    }

    fn number(&self, row: usize) -> Result<f64> {
        match self {
            Value::Constant(v) => Ok(*v),
            Value::Column(col) => col.number(row),
        }
    }
}

/// Reads `csv` with `mapping`: one device, one kind, every row imported or an error.
pub fn import(csv_path: &Path, mapping: &Mapping) -> Result<Import> {
    let csv = CsvFile::read(csv_path)?;
    let resolve = |name: &str| -> Result<Option<Value<'_>>> {
        Ok(match mapping.fields.get(name) {
            None => None,
            Some(Field::Constant(v)) => Some(Value::Constant(*v)),
            Some(Field::Column(column)) => Some(Value::Column(csv.column_for(
                column,
                &format!(" (mapped to `{name}` by `{}`)", mapping.path.display()),
            )?)),
        })
    };
    let require = |name: &str| -> Result<Value<'_>> {
        resolve(name)?.ok_or_else(|| {
            Error::schema(&mapping.path, format!("no column or default for `{name}`"))
        })
    };
    let config: Vec<(&str, Value<'_>)> = mapping
        .kind
        .config_columns()
        .iter()
        .map(|c| Ok((*c, require(c)?)))
        .collect::<Result<_>>()?;
    let layout: Vec<(&str, Option<Value<'_>>)> = mapping
        .kind
        .layout_columns()
        .iter()
        .map(|c| Ok((*c, resolve(c)?)))
        .collect::<Result<_>>()?;
    let batch = require("batch")?;
    let threads = require("threads")?;
    let utilisation = require("utilisation")?;
    let median = match require("median_ms")? {
        Value::Column(c) => c,
        Value::Constant(_) => {
            return Err(Error::schema(
                &mapping.path,
                "`median_ms` must be a CSV column",
            ));
        }
    };
    let min = match resolve("min_ms")? {
        Some(Value::Column(c)) => Some(c),
        _ => None,
    };
    let phase_col = match resolve("phase")? {
        Some(Value::Column(c)) => Some(c),
        _ => None,
    };
    let scale = mapping.unit.to_ms();
    let fail = |row: usize, message: String| {
        Error::schema(csv_path, format!("line {}: {message}", line(row)))
    };

    let mut rows = DeviceRows::new(&mapping.device.name, Some(mapping.device.clone()));
    for row in 0..csv.rows() {
        let values: Vec<i64> = config
            .iter()
            .map(|(name, v)| v.integer(row, name))
            .collect::<Result<_>>()?;
        let layout_values: Vec<i64> = layout
            .iter()
            .map(|(name, v)| v.as_ref().map_or(Ok(0), |v| v.integer(row, name)))
            .collect::<Result<_>>()?;
        let spec = ModuleSpec::from_config(mapping.kind, &values)
            .and_then(|s| s.with_layout(&layout_values))
            .map_err(|e| fail(row, e.to_string()))?;
        let phase = match (&phase_col, mapping.phase) {
            (Some(col), _) => {
                let s = col.text(row)?;
                s.parse::<Phase>().map_err(|_| {
                    fail(
                        row,
                        format!(
                            "column `{}`: `{s}` is neither inference nor training",
                            col.name()
                        ),
                    )
                })?
            }
            (None, Some(p)) => p,
            (None, None) => Phase::Inference,
        };
        let count = |v: &Value<'_>, name: &str| -> Result<usize> {
            let n = v.integer(row, name)?;
            usize::try_from(n).map_err(|_| fail(row, format!("`{name}` is {n}")))
        };
        let context = Context {
            batch: count(&batch, "batch")?,
            phase,
            threads: count(&threads, "threads")?,
            utilisation: utilisation.number(row)?,
        };
        context.validate().map_err(|e| fail(row, e.to_string()))?;
        let mut timing = Timing::median_only(median.time_ms(row, scale)?);
        if let Some(min) = &min {
            timing.min_ms = Some(min.time_ms(row, scale)?);
        }
        rows.push(Record {
            spec,
            context,
            backend: mapping.backend.clone(),
            outcome: Outcome::Ok(timing),
            perfcast_version: perfcast_core::VERSION.to_string(),
            timestamp: 0,
        });
    }
    let mut out = Import::new("csv", csv_path);
    out.devices.push(rows);
    Ok(out)
}

/// Writes a CSV import into the dataset directory `out`.
///
/// A new `out` is built in a temp directory beside it and renamed into place. An existing
/// dataset of the same device gains the kind's table; a table it already holds is replaced only
/// with `force` (atomically: the old file stays until the new one is complete).
pub fn write(import: &Import, out: &Path, force: bool) -> Result<ImportSummary> {
    let mut summary = import.summary(out);
    for d in &mut summary.devices {
        d.dataset = Some(".".into());
    }
    let Some(rows) = import.devices.first() else {
        return Ok(summary);
    };
    let Some(device) = &rows.device else {
        return Ok(summary);
    };
    if std::fs::symlink_metadata(out).is_err() {
        let tmp = crate::outdir::stage_beside(out, "import")?;
        let dir = DatasetDir::create_or_open(tmp.path(), device)?;
        for (kind, records) in &rows.tables {
            dir.write(*kind, records)?;
        }
        crate::outdir::replace_with(tmp, out)?;
        return Ok(summary);
    }
    if !out.join(crate::DEVICE_FILE).is_file() {
        return Err(Error::schema(
            out,
            "it exists and is not a dataset (no device.json): not importing into it",
        ));
    }
    let dir = DatasetDir::create_or_open(out, device)?;
    for kind in rows.tables.keys() {
        if dir.module_path(*kind).exists() && !force {
            return Err(Error::schema(
                &dir.module_path(*kind),
                "the dataset already holds this table (force to replace it)",
            ));
        }
    }
    for (kind, records) in &rows.tables {
        dir.write(*kind, records)?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICE: &str = "[device]\nname = \"Test GPU\"\nkind = \"gpu\"\npeak_gflops = 1000.0\n\
        mem_bandwidth_gbs = 100.0\ncores = 10\nthreads = 640\nclock_mhz = 1000.0\nmemory_gb = 8.0\n\
        cache_mb = 4.0\nsource = \"published\"\n";

    fn mapping(body: &str) -> Result<Mapping> {
        Mapping::from_toml(&format!("{body}\n{DEVICE}"), Path::new("map.toml"))
    }

    #[test]
    fn pairs_expand_and_defaults_fill() {
        let m = mapping(
            "kind = \"conv2d\"\nbackend = \"x\"\nunit = \"us\"\nphase = \"training\"\n\
             [columns]\nbatch = \"N\"\nin_channels = \"C\"\nout_channels = \"K\"\ninput_hw = \"HW\"\n\
             kernel = \"R\"\nmedian_ms = \"t\"\n\
             [defaults]\nstride = 1\npadding = 0\ndilation = 1\ngroups = 1\nbias = false\n",
        )
        .unwrap();
        assert_eq!(m.fields["in_w"], Field::Column("HW".into()));
        assert_eq!(m.fields["kernel_h"], Field::Column("R".into()));
        assert_eq!(m.fields["bias"], Field::Constant(0.0));
        assert_eq!(m.fields["threads"], Field::Constant(1.0));
        assert_eq!(m.phase, Some(Phase::Training));
        assert_eq!(m.unit, Unit::Us);
    }

    #[test]
    fn mistakes_are_named() {
        let base = "kind = \"matmul\"\nbackend = \"x\"\nunit = \"ms\"\nphase = \"inference\"\n";
        let cols = "[columns]\nbatch = \"b\"\nm = \"m\"\nk = \"k\"\nn = \"n\"\nmedian_ms = \"t\"\n";
        let ok = mapping(&format!("{base}{cols}[defaults]\nheads = 1\n"));
        assert!(ok.is_ok(), "{:?}", ok.err());
        let err = |body: String| mapping(&body).unwrap_err().to_string();

        let e = err(format!("{base}{cols}[defaults]\nheads = 1\nstride = 1\n"));
        assert!(
            e.contains("unknown key `defaults.stride`") && e.contains("map.toml"),
            "{e}"
        );
        let e = err(format!("{base}{cols}"));
        assert!(e.contains("`heads`"), "{e}");
        let e = err(format!("{base}{cols}[defaults]\nheads = 1\nm = 4\n"));
        assert!(e.contains("`m` is given twice"), "{e}");
        let e = err(format!(
            "colour = \"red\"\n{base}{cols}[defaults]\nheads = 1\n"
        ));
        assert!(e.contains("colour") && e.contains("line 1"), "{e}");
        let e = err(format!(
            "{}{cols}[defaults]\nheads = 1\n",
            base.replace("\"ms\"", "\"minutes\"")
        ));
        assert!(e.contains("minutes"), "{e}");
        let e = err(format!(
            "{}{cols}[defaults]\nheads = 1\n",
            base.replace("phase = \"inference\"\n", "")
        ));
        assert!(e.contains("no phase"), "{e}");
    }
}

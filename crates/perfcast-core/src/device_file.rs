//! Device spec files: perfcast's own JSON (`perfcast devices --format json`, a dataset's
//! `device.json`) and NeuSight's `device_configs/*.json`, read by one function
//! ([`DeviceSpec::read_file`]) with one-line errors naming the field, the value and the file.

use std::path::Path;

use serde_json::{Map, Value};

use crate::device::{Caches, DeviceKind, DeviceSpec, SpecSource};
use crate::dtype::{DType, Links, TypePeaks};
use crate::error::{Error, Result};

macro_rules! fail {
    ($($t:tt)*) => { Error::DeviceFile(format!($($t)*)) };
}
macro_rules! bail {
    ($($t:tt)*) => { return Err(fail!($($t)*)) };
}
macro_rules! ensure {
    ($cond:expr, $($t:tt)*) => { if !$cond { bail!($($t)*); } };
}

impl DeviceSpec {
    /// Reads a device spec file: perfcast's own format or a NeuSight config (told apart by
    /// NeuSight's `Mem_Bw` / `Num_Sm` fields), checked against physical ranges.
    pub fn read_file(path: &Path) -> Result<DeviceSpec> {
        read_file(path)
    }
}

/// A number field: present, a number, finite and above `min` (or at least `min` with
/// `inclusive`). The error names the field, the value and the file.
fn number(
    obj: &Map<String, Value>,
    field: &str,
    path: &Path,
    min: f64,
    inclusive: bool,
) -> Result<f64> {
    let v = obj
        .get(field)
        .ok_or_else(|| fail!("`{}`: the device spec has no `{field}`", path.display()))?;
    let x = v
        .as_f64()
        .ok_or_else(|| fail!("`{}`: `{field}` must be a number, got {v}", path.display()))?;
    let ok = x.is_finite() && if inclusive { x >= min } else { x > min };
    ensure!(
        ok,
        "`{}`: `{field}` must be {} {min}, got {x}",
        path.display(),
        if inclusive {
            "at least"
        } else {
            "greater than"
        }
    );
    Ok(x)
}

/// A whole-number field, at least 1.
fn count(obj: &Map<String, Value>, field: &str, path: &Path) -> Result<u32> {
    let x = number(obj, field, path, 1.0, true)?;
    ensure!(
        x.fract() == 0.0 && x <= f64::from(u32::MAX),
        "`{}`: `{field}` must be a whole number, got {x}",
        path.display()
    );
    Ok(x as u32)
}

/// Reads a device spec file: perfcast's own format (`perfcast devices --format json`, or a
/// dataset's `device.json`) or a NeuSight `device_configs/*.json`.
///
/// perfcast format: `name`, `peak_gflops`, `mem_bandwidth_gbs`, `cores`, `clock_mhz`,
/// `memory_gb` required; `kind` (default gpu), `threads` (default `cores`), `cache_mb`
/// (default 0), `caches`, `source`, `software` (the library stack, e.g. `CUDA 12.4, cuDNN 9.1`),
/// `launch_us` (a trivial op's end-to-end time on the platform, microseconds) and `tdp_w`
/// (board power, W) optional. A NeuSight config may carry `launch_us` and `tdp_w` too.
pub(crate) fn read_file(path: &Path) -> Result<DeviceSpec> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail!("reading the device spec `{}`: {e}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| fail!("`{}` is not JSON: {e}", path.display()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| fail!("`{}`: a device spec is a JSON object", path.display()))?;
    let spec = if obj.contains_key("Mem_Bw") || obj.contains_key("Num_Sm") {
        neusight(obj, path)?
    } else {
        perfcast(obj, path)?
    };
    spec.validate()
        .map_err(|e| fail!("`{}`: {e}", path.display()))?;
    Ok(spec)
}

fn perfcast(obj: &Map<String, Value>, path: &Path) -> Result<DeviceSpec> {
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| fail!("`{}`: the device spec has no `name`", path.display()))?
        .to_string();
    let kind = match obj.get("kind").and_then(Value::as_str) {
        None | Some("gpu") => DeviceKind::Gpu,
        Some("cpu") => DeviceKind::Cpu,
        Some(other) => bail!(
            "`{}`: `kind` must be `cpu` or `gpu`, got `{other}`",
            path.display()
        ),
    };
    let cores = count(obj, "cores", path)?;
    let threads = if obj.contains_key("threads") {
        count(obj, "threads", path)?
    } else {
        cores
    };
    let cache_mb = if obj.contains_key("cache_mb") {
        number(obj, "cache_mb", path, 0.0, true)?
    } else {
        0.0
    };
    let caches: Caches = match obj.get("caches") {
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| fail!("`{}`: `caches`: {e}", path.display()))?,
        None => Caches::default(),
    };
    let source = match obj.get("source").and_then(Value::as_str) {
        Some("measured") => SpecSource::Measured,
        _ => SpecSource::Published,
    };
    Ok(DeviceSpec {
        name,
        kind,
        peak_gflops: number(obj, "peak_gflops", path, 0.0, false)?,
        mem_bandwidth_gbs: number(obj, "mem_bandwidth_gbs", path, 0.0, false)?,
        cores,
        threads,
        clock_mhz: number(obj, "clock_mhz", path, 0.0, false)?,
        memory_gb: number(obj, "memory_gb", path, 0.0, false)?,
        cache_mb,
        caches,
        source,
        software: match obj.get("software") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(other) => bail!(
                "`{}`: `software` must be a string such as `CUDA 12.4, cuDNN 9.1`, got {other}",
                path.display()
            ),
        },
        launch_us: optional(obj, "launch_us", path)?,
        tdp_w: optional(obj, "tdp_w", path)?,
        dtype: match obj.get("dtype") {
            None | Some(Value::Null) => DType::Fp32,
            Some(Value::String(s)) => s
                .parse()
                .map_err(|e| fail!("`{}`: `dtype`: {e}", path.display()))?,
            Some(other) => bail!(
                "`{}`: `dtype` must be a string such as `fp16`, got {other}",
                path.display()
            ),
        },
        peaks: nested(obj, "peaks", path)?,
        links: nested(obj, "links", path)?,
    })
}

/// An optional object field read as `T` (absent or null: `T::default()`); range checks are
/// [`DeviceSpec::validate`]'s.
fn nested<T: serde::de::DeserializeOwned + Default>(
    obj: &Map<String, Value>,
    field: &str,
    path: &Path,
) -> Result<T> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| fail!("`{}`: `{field}`: {e}", path.display())),
    }
}

fn neusight(obj: &Map<String, Value>, path: &Path) -> Result<DeviceSpec> {
    let name = obj
        .get("Device")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| fail!("`{}`: the device spec has no `Device`", path.display()))?
        .trim()
        .to_string();
    let peak_field = if obj.contains_key("SingleFLOPs") {
        "SingleFLOPs"
    } else {
        "SingleFLOPsVEC"
    };
    let sms = count(obj, "Num_Sm", path)?;
    let per_sm = count(obj, "Core_Per_SM", path)?;
    let l2 = number(obj, "L2Cache", path, 0.0, true)?;
    Ok(DeviceSpec {
        name,
        kind: DeviceKind::Gpu,
        peak_gflops: number(obj, peak_field, path, 0.0, false)?,
        mem_bandwidth_gbs: number(obj, "Mem_Bw", path, 0.0, false)?,
        cores: sms,
        threads: sms.saturating_mul(per_sm),
        clock_mhz: number(obj, "Freq", path, 0.0, false)?,
        memory_gb: number(obj, "Dev_Mem", path, 0.0, false)?,
        cache_mb: l2,
        caches: Caches {
            l1d_kb: None,
            l2_kb: Some(l2 * 1024.0),
            l3_kb: None,
            uncached_weights: None,
        },
        source: SpecSource::Published,
        software: None,
        launch_us: optional(obj, "launch_us", path)?,
        tdp_w: optional(obj, "tdp_w", path)?,
        dtype: DType::Fp32,
        peaks: TypePeaks::default(),
        links: Links::default(),
    })
}

/// An optional positive number (absent or null: `None`).
fn optional(obj: &Map<String, Value>, field: &str, path: &Path) -> Result<Option<f64>> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => number(obj, field, path, 0.0, false).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceKind;

    fn write(dir: &Path, text: &str) -> std::path::PathBuf {
        let p = dir.join("gpu.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn absurd_and_missing_fields_are_named_with_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let ok = r#"{"name": "X", "peak_gflops": 10000, "mem_bandwidth_gbs": 500, "cores": 40,
                     "clock_mhz": 1500, "memory_gb": 16}"#;
        let spec = read_file(&write(tmp.path(), ok)).unwrap();
        assert_eq!(
            (spec.cores, spec.threads, spec.kind, spec.software),
            (40, 40, DeviceKind::Gpu, None)
        );
        let with = ok.replace("\"name\"", r#""software": "CUDA 12.4, cuDNN 9.1", "name""#);
        let spec = read_file(&write(tmp.path(), &with)).unwrap();
        assert_eq!(spec.software.as_deref(), Some("CUDA 12.4, cuDNN 9.1"));
        let with = ok.replace("\"name\"", r#""launch_us": 16.5, "tdp_w": 300, "name""#);
        let spec = read_file(&write(tmp.path(), &with)).unwrap();
        assert_eq!((spec.launch_us, spec.tdp_w), (Some(16.5), Some(300.0)));
        for (text, expect) in [
            (
                ok.replace("\"name\"", r#""launch_us": 0, "name""#),
                "`launch_us` must be greater than 0",
            ),
            (
                ok.replace("\"name\"", r#""tdp_w": "70 W", "name""#),
                "`tdp_w` must be a number",
            ),
            (
                ok.replace("\"name\"", r#""software": " ", "name""#),
                "`software` is empty",
            ),
            (
                ok.replace("\"name\"", r#""software": 12, "name""#),
                "`software` must be a string",
            ),
            (
                ok.replace("500", "0"),
                "`mem_bandwidth_gbs` must be greater than 0, got 0",
            ),
            (
                ok.replace("\"cores\": 40", "\"cores\": -2"),
                "`cores` must be at least 1, got -2",
            ),
            (
                ok.replace("\"memory_gb\": 16", "\"x\": 1"),
                "has no `memory_gb`",
            ),
            (
                ok.replace("10000", "\"fast\""),
                "`peak_gflops` must be a number",
            ),
        ] {
            let err = format!("{:#}", read_file(&write(tmp.path(), &text)).unwrap_err());
            assert!(err.contains(expect), "{err}");
            assert!(err.contains("gpu.json"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn neusight_configs_read_as_specs() {
        let tmp = tempfile::tempdir().unwrap();
        let text = r#"{"Device":"NVIDIA L4","Dev_Mem":24,"Mem_Bw":300,"Num_Sm":60,
                       "Core_Per_SM":128,"Freq":2040,"SingleFLOPs":31334,"L2Cache":48}"#;
        let spec = read_file(&write(tmp.path(), text)).unwrap();
        assert_eq!(
            (
                spec.name.as_str(),
                spec.peak_gflops,
                spec.mem_bandwidth_gbs,
                spec.cores
            ),
            ("NVIDIA L4", 31334.0, 300.0, 60)
        );
        assert_eq!((spec.threads, spec.cache_mb), (60 * 128, 48.0));
        let err = format!(
            "{:#}",
            read_file(&write(
                tmp.path(),
                &text.replace("\"Num_Sm\":60", "\"Num_Sm\":-1")
            ))
            .unwrap_err()
        );
        assert!(err.contains("`Num_Sm` must be at least 1, got -1"), "{err}");
    }
}

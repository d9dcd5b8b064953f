//! `perfcast._perfcast`: the native half of the Python package (python/perfcast).
//!
//! Thin glue over the predictor: Python values become the same `ModuleSpec`, `Context` and
//! `Network` values the CLI and the server build, and answers come back as the same serde forms
//! (so `bundle.predict_network(...)` and `perfcast predict --format json` agree to the bit).
//! Every prediction runs with the GIL released. Errors are `perfcast.InputError` (a bad query,
//! naming the field) or `perfcast.BundleError` (a bundle or model file), both `perfcast.Error`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use perfcast_core::{Context, DeviceSpec, ModuleKind, ModuleQuery, ModuleSpec, Network, Phase};
use perfcast_predict::{Bundle as LoadedBundle, Predictor};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde::Deserialize;
use serde_json::Value;

#[cfg(feature = "train")]
mod train;

create_exception!(_perfcast, Error, PyException, "Any perfcast error.");
create_exception!(
    _perfcast,
    InputError,
    Error,
    "A bad query: a module, network, device or argument perfcast cannot use (the message names the field)."
);
create_exception!(
    _perfcast,
    BundleError,
    Error,
    "A bundle that cannot be loaded: missing, corrupt, or trained for another device or build."
);

fn input_err(message: impl std::fmt::Display) -> PyErr {
    InputError::new_err(message.to_string())
}

fn bundle_err(message: impl std::fmt::Display) -> PyErr {
    BundleError::new_err(message.to_string())
}

/// A Python value (dict, list, str, int, float, bool, None) as JSON.
fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = value.cast::<PyInt>() {
        // Past 64 bits pyo3 raises OverflowError, which is not the input error it is.
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = i.extract::<u64>() {
            return Ok(Value::from(n));
        }
        return Err(input_err(format!("{i} does not fit in 64 bits")));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return number(f.value());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| input_err(format!("dict keys must be strings, got `{k}`")))?;
            map.insert(key.to_cow()?.into_owned(), to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = value.cast::<PyList>() {
        return l
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    // numpy scalars and anything else with __index__ or __float__.
    if let Ok(n) = value.extract::<i64>() {
        return Ok(Value::from(n));
    }
    if let Ok(f) = value.extract::<f64>() {
        return number(f);
    }
    Err(input_err(format!(
        "cannot read a `{}` as a JSON value",
        value.get_type().name()?
    )))
}

/// A float as JSON: a whole number becomes an integer (sizes arrive as floats from numpy).
fn number(f: f64) -> PyResult<Value> {
    if !f.is_finite() {
        return Err(input_err(format!("{f} is not a finite number")));
    }
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Ok(Value::from(f as i64));
    }
    Ok(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
}

/// JSON as a Python value.
fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any(),
            None => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// Little-endian f64 bytes as numbers.
fn f64s(bytes: &[u8], what: &str) -> PyResult<Vec<f64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(input_err(format!(
            "{what}: {} bytes is not a whole number of f64",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// A per-row `batch` column of `rows` positive whole numbers (f64 bytes), if one was given;
/// `of` names what fixed the row count in the error.
fn batch_column(
    batches: Option<&Bound<'_, PyBytes>>,
    rows: usize,
    of: &str,
) -> PyResult<Option<Vec<usize>>> {
    let Some(b) = batches else {
        return Ok(None);
    };
    let v = f64s(b.as_bytes(), "`batch`")?;
    if v.len() != rows {
        return Err(input_err(format!(
            "`batch` has {} rows, {of} {rows}",
            v.len()
        )));
    }
    v.iter()
        .enumerate()
        .map(|(r, &b)| {
            ((1.0..=9.0e15).contains(&b) && b.fract() == 0.0)
                .then_some(b as usize)
                .ok_or_else(|| {
                    input_err(format!(
                        "row {r}: `batch` {b} is not a positive whole number"
                    ))
                })
        })
        .collect::<PyResult<Vec<usize>>>()
        .map(Some)
}

/// Numbers as little-endian f64 bytes (numpy reads them with `frombuffer`).
fn f64_bytes<'py>(py: Python<'py>, values: impl Iterator<Item = f64>) -> Bound<'py, PyBytes> {
    let bytes: Vec<u8> = values.flat_map(f64::to_le_bytes).collect();
    PyBytes::new(py, &bytes)
}

fn serialize<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, &serde_json::to_value(value).map_err(input_err)?)
}

fn phase(name: &str) -> PyResult<Phase> {
    name.parse::<Phase>()
        .map_err(|e| input_err(format!("`phase`: {e}")))
}

fn context(batch: usize, phase_name: &str, threads: usize, utilisation: f64) -> PyResult<Context> {
    let c = Context {
        batch,
        phase: phase(phase_name)?,
        threads,
        utilisation,
    };
    c.validate().map_err(input_err)?;
    Ok(c)
}

/// A module from a dict (`{"kind": "conv2d", ...}`, as in the CLI's `--modules-file`).
fn module(value: Value, what: &str) -> PyResult<ModuleQuery> {
    // serde's tagged-enum errors lose the field's name ("invalid value: integer `-3`"); no
    // field of a module or its context may be negative, so name such a field first.
    if let Value::Object(map) = &value {
        for (k, v) in map {
            let negative = |x: &Value| x.as_f64().is_some_and(|f| f < 0.0);
            if negative(v) || v.as_array().is_some_and(|a| a.iter().any(negative)) {
                return Err(input_err(format!(
                    "{what}: `{k}` must not be negative, got {v}"
                )));
            }
        }
    }
    // Without context fields the module is the whole object: read as a spec directly, which
    // skips the buffering a flattened field costs; anything it refuses takes the general path
    // below, whose error names the field.
    if let Value::Object(map) = &value
        && !["batch", "phase", "threads"]
            .iter()
            .any(|k| map.contains_key(*k))
        && let Ok(spec) = ModuleSpec::deserialize(&value)
    {
        spec.validate()
            .map_err(|e| input_err(format!("{what}: {e}")))?;
        return Ok(ModuleQuery {
            spec,
            batch: None,
            phase: None,
            threads: None,
        });
    }
    let q: ModuleQuery = serde_json::from_value(value).map_err(|e| {
        let e = e.to_string();
        if e.starts_with("unknown variant") {
            input_err(format!("{what}: `kind`: {e}"))
        } else {
            input_err(format!("{what}: {e}"))
        }
    })?;
    q.spec
        .validate()
        .map_err(|e| input_err(format!("{what}: {e}")))?;
    Ok(q)
}

/// A module dict's fields looked up by interned name, counting the ones found.
struct Fields<'a, 'py> {
    dict: &'a Bound<'py, PyDict>,
    found: usize,
}

impl<'py> Fields<'_, 'py> {
    fn get(&mut self, key: &Bound<'py, PyString>) -> Option<Option<Bound<'py, PyAny>>> {
        match self.dict.get_item(key) {
            Ok(Some(v)) => {
                self.found += 1;
                Some(Some(v))
            }
            Ok(None) => Some(None),
            Err(_) => None,
        }
    }

    /// A size: a plain int, or `default` when absent (None: not the plain form).
    fn int(&mut self, key: &Bound<'py, PyString>, default: Option<usize>) -> Option<usize> {
        match self.get(key)? {
            Some(v) => whole(&v),
            None => default,
        }
    }

    /// A pair field: an int for both, or a list or tuple of two ints.
    fn pair(
        &mut self,
        key: &Bound<'py, PyString>,
        default: Option<[usize; 2]>,
    ) -> Option<[usize; 2]> {
        match self.get(key)? {
            Some(v) => pair_of(&v),
            None => default,
        }
    }

    /// An optional pair field, None when absent.
    fn opt_pair(&mut self, key: &Bound<'py, PyString>) -> Option<Option<[usize; 2]>> {
        match self.get(key)? {
            Some(v) => pair_of(&v).map(Some),
            None => Some(None),
        }
    }

    fn flag(&mut self, key: &Bound<'py, PyString>, default: bool) -> Option<bool> {
        match self.get(key)? {
            Some(v) => v.cast_exact::<PyBool>().ok().map(|b| b.is_true()),
            None => Some(default),
        }
    }
}

/// A plain Python int (not a bool, not negative) as a size.
fn whole(v: &Bound<'_, PyAny>) -> Option<usize> {
    v.cast_exact::<PyInt>()
        .ok()?
        .extract::<u64>()
        .ok()?
        .try_into()
        .ok()
}

fn sizes<const N: usize>(v: &Bound<'_, PyAny>) -> Option<[usize; N]> {
    let mut out = [0; N];
    if let Ok(l) = v.cast::<PyList>() {
        if l.len() != N {
            return None;
        }
        for (o, x) in out.iter_mut().zip(l.iter()) {
            *o = whole(&x)?;
        }
    } else {
        let t = v.cast::<PyTuple>().ok()?;
        if t.len() != N {
            return None;
        }
        for (o, x) in out.iter_mut().zip(t.iter()) {
            *o = whole(&x)?;
        }
    }
    Some(out)
}

fn pair_of(v: &Bound<'_, PyAny>) -> Option<[usize; 2]> {
    whole(v).map(|x| [x, x]).or_else(|| sizes::<2>(v))
}

/// A module dict in its plain form (a known `kind`, only that kind's fields, plain ints, lists
/// or tuples of them and bools) read straight into the spec serde would make of it, without
/// building JSON; None for anything else, which the JSON path then reads or refuses by name.
/// The spec is not validated.
fn plain_spec(dict: &Bound<'_, PyDict>) -> Option<ModuleSpec> {
    use perfcast_core::{
        BatchNorm2d, Conv2d, Elementwise, Embedding, LayerNorm, Linear, Matmul, Pool2d,
    };
    let py = dict.py();
    let tag = dict.get_item(pyo3::intern!(py, "kind")).ok()??;
    let name = tag.cast_exact::<PyString>().ok()?.to_cow().ok()?;
    // The spec's own tag names (serde's), not the aliases `ModuleKind::from_str` takes.
    let kind = ModuleKind::deserialize(
        serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&name),
    )
    .ok()?;
    let mut f = Fields { dict, found: 1 };
    macro_rules! k {
        ($name:literal) => {
            pyo3::intern!(py, $name)
        };
    }
    let spec = match kind {
        ModuleKind::Conv2d => ModuleSpec::Conv2d(Conv2d {
            in_channels: f.int(k!("in_channels"), None)?,
            out_channels: f.int(k!("out_channels"), None)?,
            input_hw: f.pair(k!("input_hw"), None)?,
            kernel: f.pair(k!("kernel"), None)?,
            stride: f.pair(k!("stride"), Some([1, 1]))?,
            padding: f.pair(k!("padding"), Some([0, 0]))?,
            dilation: f.pair(k!("dilation"), Some([1, 1]))?,
            groups: f.int(k!("groups"), Some(1))?,
            bias: f.flag(k!("bias"), true)?,
        }),
        ModuleKind::Linear => ModuleSpec::Linear(Linear {
            tokens: f.int(k!("tokens"), Some(1))?,
            in_features: f.int(k!("in_features"), None)?,
            out_features: f.int(k!("out_features"), None)?,
            bias: f.flag(k!("bias"), true)?,
        }),
        ModuleKind::Matmul => ModuleSpec::Matmul(Matmul {
            heads: f.int(k!("heads"), Some(1))?,
            m: f.int(k!("m"), None)?,
            k: f.int(k!("k"), None)?,
            n: f.int(k!("n"), None)?,
            trans_a: f.flag(k!("trans_a"), false)?,
            trans_b: f.flag(k!("trans_b"), false)?,
        }),
        ModuleKind::MaxPool2d | ModuleKind::AvgPool2d => {
            let p = Pool2d {
                channels: f.int(k!("channels"), None)?,
                input_hw: f.pair(k!("input_hw"), None)?,
                kernel: f.pair(k!("kernel"), None)?,
                stride: f.opt_pair(k!("stride"))?,
                padding: f.pair(k!("padding"), Some([0, 0]))?,
            };
            if kind == ModuleKind::MaxPool2d {
                ModuleSpec::MaxPool2d(p)
            } else {
                ModuleSpec::AvgPool2d(p)
            }
        }
        ModuleKind::BatchNorm2d => ModuleSpec::BatchNorm2d(BatchNorm2d {
            channels: f.int(k!("channels"), None)?,
            input_hw: f.pair(k!("input_hw"), None)?,
        }),
        ModuleKind::LayerNorm | ModuleKind::RmsNorm => {
            let l = LayerNorm {
                tokens: f.int(k!("tokens"), Some(1))?,
                features: f.int(k!("features"), None)?,
            };
            if kind == ModuleKind::LayerNorm {
                ModuleSpec::LayerNorm(l)
            } else {
                ModuleSpec::RmsNorm(l)
            }
        }
        ModuleKind::Embedding => ModuleSpec::Embedding(Embedding {
            tokens: f.int(k!("tokens"), Some(1))?,
            vocab: f.int(k!("vocab"), None)?,
            features: f.int(k!("features"), None)?,
        }),
        other => {
            let shape = match f.get(k!("shape"))? {
                Some(v) => sizes::<3>(&v)?,
                None => return None,
            };
            ModuleSpec::elementwise(other, Elementwise { shape })?
        }
    };
    // Any other key (a context field, a typo) is the JSON path's to read or name.
    (f.found == dict.len()).then_some(spec)
}

/// A module query from a Python value: a plain dict read directly, anything else (and a plain
/// spec that is invalid, for the error naming its field) through JSON.
fn module_query(value: &Bound<'_, PyAny>, what: &str) -> PyResult<ModuleQuery> {
    if let Ok(d) = value.cast::<PyDict>()
        && let Some(spec) = plain_spec(d)
        && spec.validate().is_ok()
    {
        return Ok(ModuleQuery {
            spec,
            batch: None,
            phase: None,
            threads: None,
        });
    }
    module(to_json(value)?, what)
}

/// A device by known name (`"h100"`), spec dict, or spec file path.
fn device(value: &Bound<'_, PyAny>) -> PyResult<DeviceSpec> {
    if let Ok(d) = value.cast::<PyDict>() {
        let spec: DeviceSpec = serde_json::from_value(to_json(d.as_any())?)
            .map_err(|e| input_err(format!("`device`: {e}")))?;
        spec.validate()
            .map_err(|e| input_err(format!("`device`: {e}")))?;
        return Ok(spec);
    }
    let text: String = value
        .extract()
        .map_err(|_| input_err("`device` must be a known name, a spec dict or a spec file path"))?;
    let path = Path::new(&text);
    if text.ends_with(".json") || path.is_file() {
        return DeviceSpec::read_file(path).map_err(input_err);
    }
    perfcast_core::known::lookup(&text).map_err(|e| input_err(format!("`device`: {e}")))
}

/// A loaded bundle: predicts modules and networks; `device=` selects another target for a
/// cross-device bundle (each device's models are loaded once and kept).
#[pyclass(frozen, module = "perfcast._perfcast")]
struct Bundle {
    dir: PathBuf,
    default: Arc<Predictor>,
    by_device: Mutex<HashMap<String, Arc<Predictor>>>,
}

impl Bundle {
    /// One module's prediction, the GIL released while it runs.
    #[allow(clippy::too_many_arguments)]
    fn one(
        &self,
        py: Python<'_>,
        module: &Bound<'_, PyAny>,
        batch: usize,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<perfcast_predict::ModulePrediction> {
        // A plain dict skips the JSON form and a second validation: the prediction validates
        // the spec, and on an error the JSON path names the field as it always has.
        if let Ok(d) = module.cast::<PyDict>()
            && let Some(spec) = plain_spec(d)
        {
            let c = context(batch, phase, threads, utilisation)?;
            let p = self.predictor(device)?;
            return match py.detach(|| p.predict_module(&spec, &c)) {
                Ok(out) => Ok(out),
                Err(e) => {
                    self::module(to_json(module)?, "`module`")?;
                    Err(input_err(e))
                }
            };
        }
        let q = self::module(to_json(module)?, "`module`")?;
        let c = q.context(&context(batch, phase, threads, utilisation)?);
        c.validate().map_err(input_err)?;
        let p = self.predictor(device)?;
        py.detach(|| p.predict_module(&q.spec, &c))
            .map_err(input_err)
    }

    fn predictor(&self, target: Option<&Bound<'_, PyAny>>) -> PyResult<Arc<Predictor>> {
        let Some(target) = target.filter(|t| !t.is_none()) else {
            return Ok(Arc::clone(&self.default));
        };
        let spec = device(target)?;
        let key = serde_json::to_string(&spec).map_err(input_err)?;
        let mut cache = self.by_device.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(Arc::clone(p));
        }
        let loaded = LoadedBundle::load_for_device(&self.dir, &spec).map_err(bundle_err)?;
        let p = Arc::new(Predictor::new(loaded));
        cache.insert(key, Arc::clone(&p));
        Ok(p)
    }
}

#[pymethods]
impl Bundle {
    /// Loads `checkpoints/<name>/` (or any bundle directory), for `device` when given.
    #[new]
    #[pyo3(signature = (path, device=None))]
    fn new(path: PathBuf, device: Option<&Bound<'_, PyAny>>) -> PyResult<Bundle> {
        let loaded = match device.filter(|d| !d.is_none()) {
            Some(d) => LoadedBundle::load_for_device(&path, &self::device(d)?),
            None => LoadedBundle::load(&path),
        }
        .map_err(bundle_err)?;
        Ok(Bundle {
            dir: path,
            default: Arc::new(Predictor::new(loaded)),
            by_device: Mutex::new(HashMap::new()),
        })
    }

    /// The bundle's manifest (device, kinds, chosen models, trained ranges) as a dict.
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        serialize(py, &self.default.bundle().manifest)
    }

    /// One module's latency, ms, with the model that answered and any warnings.
    #[pyo3(signature = (module, batch=1, phase="inference", threads=1, utilisation=0.0, device=None))]
    #[allow(clippy::too_many_arguments)]
    fn predict_detail<'py>(
        &self,
        py: Python<'py>,
        module: &Bound<'py, PyAny>,
        batch: usize,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let out = self.one(py, module, batch, phase, threads, utilisation, device)?;
        serialize(py, &out)
    }

    /// One module's latency, ms.
    #[pyo3(signature = (module, batch=1, phase="inference", threads=1, utilisation=0.0, device=None))]
    #[allow(clippy::too_many_arguments)]
    fn predict(
        &self,
        py: Python<'_>,
        module: &Bound<'_, PyAny>,
        batch: usize,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        Ok(self
            .one(py, module, batch, phase, threads, utilisation, device)?
            .ms)
    }

    /// Many modules (dicts, each may carry its own `batch`, `phase`, `threads`), ms, in order.
    #[pyo3(signature = (modules, batch=1, phase="inference", threads=1, utilisation=0.0, device=None))]
    #[allow(clippy::too_many_arguments)]
    fn predict_many<'py>(
        &self,
        py: Python<'py>,
        modules: &Bound<'py, PyAny>,
        batch: usize,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let defaults = context(batch, phase, threads, utilisation)?;
        let mut queries = Vec::new();
        for (i, item) in modules.try_iter()?.enumerate() {
            let q = module_query(&item?, &format!("module {i}"))?;
            let c = q.context(&defaults);
            c.validate()
                .map_err(|e| input_err(format!("module {i}: {e}")))?;
            queries.push((q.spec, c));
        }
        let p = self.predictor(device)?;
        let out = py
            .detach(|| p.predict_modules(&queries))
            .map_err(input_err)?;
        Ok(f64_bytes(py, out.iter().map(|m| m.ms)))
    }

    /// Modules of one kind given as columns: `(field, rows, width, values)` with `values` the
    /// little-endian f64 bytes of a `rows` x `width` array (`width` 0: one number per row, else
    /// a list field such as `shape`); `batches` the bytes of one batch per row, else `batch`
    /// for all. Returns the latencies, ms, as little-endian f64 bytes (the Python wrapper turns
    /// numpy arrays into these and back without the numpy C API).
    #[pyo3(signature = (kind, columns, batch=1, batches=None, phase="inference", threads=1, utilisation=0.0, device=None))]
    #[allow(clippy::too_many_arguments)]
    fn predict_columns<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        columns: Vec<(String, usize, usize, Bound<'py, PyBytes>)>,
        batch: usize,
        batches: Option<Bound<'py, PyBytes>>,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut rows: Option<usize> = None;
        let mut fields = Vec::with_capacity(columns.len());
        for (name, n, width, bytes) in &columns {
            let values = f64s(bytes.as_bytes(), &format!("column `{name}`"))?;
            if values.len() != n * (*width).max(1) {
                return Err(input_err(format!(
                    "column `{name}`: {} values for {n} rows of width {width}",
                    values.len()
                )));
            }
            if let Some(m) = rows.filter(|m| m != n) {
                return Err(input_err(format!(
                    "column `{name}` has {n} rows, another has {m}"
                )));
            }
            rows = Some(*n);
            fields.push((name.as_str(), *width, values));
        }
        let rows = rows.unwrap_or(0);
        let batches = batch_column(batches.as_ref(), rows, "the columns")?;
        let defaults = context(batch, phase, threads, utilisation)?;
        let mut queries = Vec::with_capacity(rows);
        for r in 0..rows {
            let mut map = serde_json::Map::new();
            map.insert("kind".into(), Value::String(kind.to_string()));
            for (name, width, values) in &fields {
                let v = if *width > 0 {
                    values[r * width..(r + 1) * width]
                        .iter()
                        .map(|x| number(*x))
                        .collect::<PyResult<_>>()
                        .map(Value::Array)?
                } else {
                    number(values[r])?
                };
                map.insert((*name).to_string(), v);
            }
            let q = module(Value::Object(map), &format!("row {r}"))?;
            let mut c = q.context(&defaults);
            if let Some(b) = &batches {
                c.batch = b[r];
            }
            c.validate()
                .map_err(|e| input_err(format!("row {r}: {e}")))?;
            queries.push((q.spec, c));
        }
        let p = self.predictor(device)?;
        let out = py
            .detach(|| p.predict_modules(&queries))
            .map_err(input_err)?;
        Ok(f64_bytes(py, out.iter().map(|m| m.ms)))
    }

    /// Modules of one kind given as one array of their configurations: `config` the
    /// little-endian f64 bytes of a `rows` x `len(config_columns(kind))` array, each row the
    /// kind's configuration columns in order (whole numbers); `batches` the bytes of one batch
    /// per row, else `batch` for all. No dict is built or parsed per row: each row becomes a
    /// module directly and is checked as any module is. Returns the latencies, ms, as
    /// little-endian f64 bytes.
    #[pyo3(signature = (kind, rows, config, batch=1, batches=None, phase="inference", threads=1, utilisation=0.0, device=None))]
    #[allow(clippy::too_many_arguments)]
    fn predict_array<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        rows: usize,
        config: Bound<'py, PyBytes>,
        batch: usize,
        batches: Option<Bound<'py, PyBytes>>,
        phase: &str,
        threads: usize,
        utilisation: f64,
        device: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let kind: ModuleKind = kind
            .parse()
            .map_err(|e| input_err(format!("`kind`: {e}")))?;
        let columns = kind.config_columns();
        let values = f64s(config.as_bytes(), "`config`")?;
        if values.len() != rows * columns.len() {
            return Err(input_err(format!(
                "`config`: {} values for {rows} rows of the {} `{kind}` columns ({})",
                values.len(),
                columns.len(),
                columns.join(", ")
            )));
        }
        let batches = batch_column(batches.as_ref(), rows, "`config`")?;
        let defaults = context(batch, phase, threads, utilisation)?;
        let whole = |v: f64| ((0.0..=9.0e15).contains(&v) && v.fract() == 0.0).then_some(v as i64);
        let width = columns.len();
        let p = self.predictor(device)?;
        // Rows [range] as modules, predicted; errors name the first bad row of the range.
        let predict = |range: std::ops::Range<usize>| -> Result<Vec<f64>, String> {
            let mut ints = vec![0i64; width];
            let mut queries = Vec::with_capacity(range.len());
            for r in range.clone() {
                let row = &values[r * width..(r + 1) * width];
                for ((i, v), name) in ints.iter_mut().zip(row).zip(columns) {
                    *i = whole(*v).ok_or_else(|| {
                        format!("row {r}: `{name}` {v} is not a non-negative whole number")
                    })?;
                }
                // Spec and context are validated with the prediction, which derives the shape
                // once; an error is then named by its first row, as a check before would.
                let spec =
                    ModuleSpec::from_config(kind, &ints).map_err(|e| format!("row {r}: {e}"))?;
                let mut c = defaults.clone();
                if let Some(b) = &batches {
                    c.batch = b[r];
                }
                queries.push((spec, c));
            }
            match p.predict_modules_threads(&queries, 1) {
                Ok(out) => Ok(out.iter().map(|m| m.ms).collect()),
                Err(e) => Err(queries
                    .iter()
                    .enumerate()
                    .find_map(|(i, (s, c))| {
                        s.validate()
                            .and_then(|()| c.validate())
                            .err()
                            .map(|v| format!("row {}: {v}", range.start + i))
                    })
                    .unwrap_or_else(|| e.to_string())),
            }
        };
        // Building the modules is part of the work and needs no GIL: it runs in the shares too.
        let out = py
            .detach(|| -> Result<Vec<f64>, String> {
                let threads = perfcast_predict::predictor::parallel_threads(rows);
                let mut out = Vec::with_capacity(rows);
                for part in perfcast_predict::predictor::in_shares(rows, threads, predict) {
                    out.extend(part.ok_or("a prediction thread panicked")??);
                }
                Ok(out)
            })
            .map_err(input_err)?;
        Ok(f64_bytes(py, out.into_iter()))
    }

    /// A whole network (from [`network`] or a dict in perfcast's network JSON): every layer and
    /// the composed total, as the CLI's `predict --network --format json` gives them;
    /// `fusion` (none, epilogue, compile, engine, megatron) predicts the fused kernels.
    #[pyo3(signature = (network, batch=1, phase="inference", threads=1, device=None, fusion="none"))]
    #[allow(clippy::too_many_arguments)]
    fn predict_network<'py>(
        &self,
        py: Python<'py>,
        network: &Bound<'py, PyAny>,
        batch: usize,
        phase: &str,
        threads: usize,
        device: Option<&Bound<'py, PyAny>>,
        fusion: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fusion: perfcast_core::fusion::Fusion = fusion.parse().map_err(input_err)?;
        let net: Network = match network.cast::<NetworkGraph>() {
            Ok(g) => g.get().network.clone(),
            Err(_) => {
                let text = serde_json::to_string(&to_json(network)?).map_err(input_err)?;
                Network::from_json(&text).map_err(|e| input_err(format!("`network`: {e}")))?
            }
        };
        let c = context(batch, phase, threads, 0.0)?;
        let p = self.predictor(device)?;
        let out = py
            .detach(|| p.predict_network_fused(&net, &c, fusion))
            .map_err(input_err)?;
        serialize(py, &out)
    }

    fn __repr__(&self) -> String {
        let m = &self.default.bundle().manifest;
        format!(
            "Bundle('{}', device='{}', kinds={})",
            self.dir.display(),
            m.device.name,
            m.kinds.len()
        )
    }
}

/// A network built from a zoo name, network JSON, an ONNX file or bytes, or a transformer
/// config: the layers perfcast predicts.
#[pyclass(frozen, module = "perfcast._perfcast")]
struct NetworkGraph {
    network: Network,
    /// What an ONNX import folded, fused and left unmapped (None for other sources).
    import: Option<Value>,
}

#[pymethods]
impl NetworkGraph {
    /// The network's name.
    #[getter]
    fn name(&self) -> String {
        self.network.name.clone()
    }

    /// Number of layers.
    fn __len__(&self) -> usize {
        self.network.layers.len()
    }

    /// The network in perfcast's network JSON, as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        serialize(py, &self.network)
    }

    /// What the ONNX import folded, fused, approximated and left unmapped (None otherwise).
    #[getter]
    fn import_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.import {
            Some(v) => to_py(py, v),
            None => Ok(py.None().into_bound(py)),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "NetworkGraph('{}', layers={})",
            self.network.name,
            self.network.layers.len()
        )
    }
}

/// A zoo network (`resnet50`, `vgg16@112`: `@` gives the input resolution).
#[pyfunction]
#[pyo3(signature = (name, resolution=None))]
fn zoo(name: &str, resolution: Option<usize>) -> PyResult<NetworkGraph> {
    let (name, resolution) = match name.split_once('@') {
        Some((n, r)) => (
            n,
            Some(r.parse::<usize>().map_err(|_| {
                input_err(format!("`{name}`: `{r}` after `@` is not a resolution"))
            })?),
        ),
        None => (name, resolution),
    };
    Ok(NetworkGraph {
        network: perfcast_core::zoo::build(name, resolution).map_err(input_err)?,
        import: None,
    })
}

/// A network from perfcast's network JSON (a dict with `name`, `input` and `layers`).
#[pyfunction]
fn network_json(doc: &Bound<'_, PyAny>) -> PyResult<NetworkGraph> {
    let text = serde_json::to_string(&to_json(doc)?).map_err(input_err)?;
    Ok(NetworkGraph {
        network: Network::from_json(&text).map_err(|e| input_err(format!("`network`: {e}")))?,
        import: None,
    })
}

/// The zoo's network names.
#[pyfunction]
fn zoo_names() -> Vec<&'static str> {
    perfcast_core::zoo::names().to_vec()
}

/// A transformer from a Hugging Face style `config.json` (path or dict) at `seq` tokens.
#[pyfunction]
#[pyo3(signature = (config, seq, lm_head=None, training=false))]
fn transformer(
    config: &Bound<'_, PyAny>,
    seq: usize,
    lm_head: Option<bool>,
    training: bool,
) -> PyResult<NetworkGraph> {
    use perfcast_graph::transformer::{BuildOptions, TransformerConfig};
    let parsed = if let Ok(d) = config.cast::<PyDict>() {
        let text = serde_json::to_string(&to_json(d.as_any())?).map_err(input_err)?;
        TransformerConfig::from_json(&text, Path::new("<dict>"))
    } else {
        let path: PathBuf = config
            .extract()
            .map_err(|_| input_err("`config` must be a config.json path or a dict"))?;
        TransformerConfig::from_file(&path)
    }
    .map_err(input_err)?;
    let network = parsed
        .build(&BuildOptions {
            seq,
            lm_head,
            dropout: training,
        })
        .map_err(input_err)?;
    Ok(NetworkGraph {
        network,
        import: None,
    })
}

/// An ONNX model from a path or its bytes; `seq` fixes symbolic sequence axes, `inputs` full
/// input shapes by name.
#[pyfunction]
#[pyo3(signature = (model, seq=None, inputs=None, strict=false, fuse_conv_bn=false))]
fn onnx(
    model: &Bound<'_, PyAny>,
    seq: Option<usize>,
    inputs: Option<HashMap<String, Vec<usize>>>,
    strict: bool,
    fuse_conv_bn: bool,
) -> PyResult<NetworkGraph> {
    use perfcast_graph::onnx::{ImportOptions, import_bytes, import_file};
    let options = ImportOptions {
        seq,
        inputs: inputs.unwrap_or_default().into_iter().collect(),
        strict,
        fuse_conv_bn,
    };
    let imported = if let Ok(b) = model.cast::<PyBytes>() {
        import_bytes(b.as_bytes(), Path::new("<bytes>"), &options)
    } else {
        let path: PathBuf = model
            .extract()
            .map_err(|_| input_err("`model` must be an .onnx path or bytes"))?;
        import_file(&path, &options)
    }
    .map_err(input_err)?;
    let report = serde_json::json!({
        "nodes": imported.nodes,
        "layers": imported.network.layers.len(),
        "folded": imported.folded,
        "fused": imported.fused,
        "notes": imported.notes,
        "unmapped": imported.unmapped,
        "unmapped_flop_share": imported.unmapped_flop_share(),
        "unmapped_byte_share": imported.unmapped_byte_share(),
    });
    Ok(NetworkGraph {
        network: imported.network,
        import: Some(report),
    })
}

/// The known devices `device=` accepts by name, as dicts of their specs.
#[pyfunction]
fn devices<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let rows: Vec<Value> = perfcast_core::known::known()
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("id".into(), Value::String(s.slug()));
            }
            v
        })
        .collect();
    to_py(py, &Value::Array(rows))
}

/// The configuration columns of a module kind, in the order `Bundle.predict_array` reads them.
#[pyfunction]
fn config_columns(kind: &str) -> PyResult<Vec<&'static str>> {
    let kind: ModuleKind = kind
        .parse()
        .map_err(|e| input_err(format!("`kind`: {e}")))?;
    Ok(kind.config_columns().to_vec())
}

/// A module's derived quantities (FLOPs, bytes, parameters) for a batch.
#[pyfunction]
#[pyo3(signature = (module, batch=1))]
fn describe<'py>(
    py: Python<'py>,
    module: &Bound<'py, PyAny>,
    batch: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let q = module_query(module, "`module`")?;
    let spec: &ModuleSpec = &q.spec;
    let f = perfcast_core::features::derive(spec, batch);
    serialize(py, &f)
}

#[pymodule]
fn _perfcast(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("BundleError", py.get_type::<BundleError>())?;
    m.add("__version__", perfcast_core::VERSION)?;
    m.add_class::<Bundle>()?;
    m.add_class::<NetworkGraph>()?;
    m.add_function(wrap_pyfunction!(zoo, m)?)?;
    m.add_function(wrap_pyfunction!(zoo_names, m)?)?;
    m.add_function(wrap_pyfunction!(network_json, m)?)?;
    m.add_function(wrap_pyfunction!(transformer, m)?)?;
    m.add_function(wrap_pyfunction!(onnx, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(config_columns, m)?)?;
    #[cfg(feature = "train")]
    m.add_function(wrap_pyfunction!(train::quickstart, m)?)?;
    Ok(())
}

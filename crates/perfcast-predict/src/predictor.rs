//! Answers latency queries from a bundle: one module, many modules, or a whole network, in the
//! inference or training phase, with warnings where a query leaves the trained ranges.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use perfcast_core::canonical::{canonical, least_cpu_compute_time_s, least_time_s};
use perfcast_core::{Context, DeviceSpec, Dims, ModuleKind, ModuleSpec, Network, Phase, features};
use serde::{Deserialize, Serialize};

use crate::blend::Blend;
use crate::bundle::{Bundle, outside_range};
use crate::compose::RunShape;
use crate::error::{Error, Result};
use crate::features::{MAX_ROW, cpu_floor_ms_of_row, row, row_into, row_into_shaped};
use crate::medn::{Encoded, EncodedRows, FittedMedn};
use crate::regressor::Regressor;

/// Efficiencies of the spec-only roofline used for kinds a bundle has no model for.
const FALLBACK_COMPUTE_EFFICIENCY: f64 = 0.5;
const FALLBACK_MEMORY_EFFICIENCY: f64 = 0.6;
/// Fixed cost per call of the fallback, ms.
const FALLBACK_OVERHEAD_MS: f64 = 0.002;
/// How far (a factor on peak FLOP/s or bandwidth) beyond the GPUs a model has training-step
/// rows of it still answers a training step itself; further out the step is this GPU's forward
/// times the training/forward ratio on those GPUs ([`Predictor::predict_transferred`]). The
/// model's own answer was better for every DeepBench GPU left out, the ratio for the H100, 4x
/// beyond them (docs/accuracy.md).
const PHASE_REACH: f64 = 2.0;
/// [`Predictor::predict_modules`] splits batches at least this large over the cores.
const PARALLEL_MIN: usize = 4096;
/// Shares of a batch per thread in [`in_shares`].
const SHARES_PER_THREAD: usize = 4;

/// Threads worth splitting a batch of `len` queries over: every core from [`PARALLEL_MIN`]
/// queries up, else 1.
pub fn parallel_threads(len: usize) -> usize {
    if len >= PARALLEL_MIN {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        1
    }
}

/// `work` over `0..len` on `threads` threads, the caller's among them (1 runs there alone):
/// the range is cut into [`SHARES_PER_THREAD`] contiguous shares per thread, each taken by
/// whichever thread is free, so a core busy with other work slows the batch by its share only.
/// The results in share order; `None` for a share whose thread panicked.
pub fn in_shares<R: Send>(
    len: usize,
    threads: usize,
    work: impl Fn(Range<usize>) -> R + Sync,
) -> Vec<Option<R>> {
    let threads = threads.clamp(1, len.max(1));
    if threads == 1 {
        return vec![Some(work(0..len))];
    }
    let size = len.div_ceil(threads * SHARES_PER_THREAD).max(1);
    let shares: Vec<Range<usize>> = (0..len)
        .step_by(size)
        .map(|a| a..(a + size).min(len))
        .collect();
    let next = AtomicUsize::new(0);
    let take = || {
        let mut done = Vec::new();
        while let Some(share) = shares.get(next.fetch_add(1, Ordering::Relaxed)) {
            done.push((share.start / size, work(share.clone())));
        }
        done
    };
    let mut results: Vec<Option<R>> = (0..shares.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let take = &take;
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(take)).collect();
        let mine = take();
        for (i, r) in handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .flatten()
            .chain(mine)
        {
            results[i] = Some(r);
        }
    });
    results
}
/// Queries of one kind built into rows and predicted together: enough for the models' blocks,
/// few enough that the rows and the models' scratch stay in the core's cache.
const KIND_CHUNK: usize = 512;

/// One module's predicted latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModulePrediction {
    /// Module kind.
    pub kind: ModuleKind,
    /// Predicted latency, ms.
    pub ms: f64,
    /// Model that answered (`roofline-spec` for the fallback). Borrowed from the model's
    /// name, so a prediction allocates nothing for it (batches make thousands).
    pub model: Cow<'static, str>,
    /// Whether the bundle had no model for the kind and the spec roofline answered.
    pub fallback: bool,
    /// Features outside the ranges the model was trained on.
    pub warnings: Vec<String>,
}

/// The predictions of the linear layers among `layers`, in their order: what the
/// uncached-weights term compares its floor with. Layers here are the network's own (not
/// fused regions), so they line up with [`RunShape::of`]'s list.
pub fn linear_ms_of(layers: &[LayerPrediction]) -> Vec<f64> {
    layers
        .iter()
        .filter(|l| l.prediction.kind == ModuleKind::Linear)
        .map(|l| l.prediction.ms)
        .collect()
}

/// One layer of a network prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerPrediction {
    /// Layer name. Shared with the [`PreparedNetwork`] it came from, as is `module`: a
    /// prediction copies no text (strings in JSON, as a `String` would be).
    #[serde(with = "shared_str")]
    pub name: Arc<str>,
    /// The module, in words.
    #[serde(with = "shared_str")]
    pub module: Arc<str>,
    /// Its prediction.
    #[serde(flatten)]
    pub prediction: ModulePrediction,
    /// The network's layers this one kernel runs, when a fusion policy fused several
    /// ([`Predictor::predict_network_fused`]); empty for a layer run as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "shared_strs")]
    pub fused: Vec<Arc<str>>,
}

/// `Vec<Arc<str>>` fields as JSON lists of strings.
mod shared_strs {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(texts: &[Arc<str>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(texts.iter().map(|t| &**t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Arc<str>>, D::Error> {
        Ok(Vec::<String>::deserialize(d)?
            .into_iter()
            .map(Arc::from)
            .collect())
    }
}

/// `Arc<str>` fields as plain JSON strings (serde's own impls need its `rc` feature).
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}

/// The model name of a zero-cost kind's prediction ([`ModuleKind::is_zero_cost`]: views).
pub const ZERO_COST_MODEL: &str = "zero-cost";

/// The prediction of a zero-cost kind: 0 ms, marked by its model name and a note, never a
/// fallback (nothing was estimated).
fn zero_cost(kind: ModuleKind) -> ModulePrediction {
    ModulePrediction {
        kind,
        ms: 0.0,
        model: Cow::Borrowed(ZERO_COST_MODEL),
        fallback: false,
        warnings: Vec::new(),
    }
}

/// A network's predicted latency: per layer and the sum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkPrediction {
    /// Network name.
    pub network: String,
    /// Context of every layer.
    pub context: Context,
    /// Per layer, in order.
    pub layers: Vec<LayerPrediction>,
    /// The network's predicted time, ms: the bundle's composed total (layers plus its fitted
    /// host-cost terms, [`crate::compose::Composed`]) when the bundle is calibrated for the
    /// phase, else the sum of the layers. The one answer the CLI, the server and the library
    /// give.
    pub total_ms: f64,
    /// Sum of the layers, ms.
    #[serde(default)]
    pub layer_sum_ms: f64,
    /// The least time the device's spec allows for the same layers, ms: the sum of each
    /// layer's bound (the roofline of its least work and traffic on a GPU, its least compute
    /// on a CPU). No layer is predicted below its own, so neither is the network.
    #[serde(default)]
    pub roofline_ms: f64,
    /// The host-cost composition behind `total_ms`, when the bundle is calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composed: Option<crate::compose::Composed>,
    /// Layers answered by the fallback.
    pub fallback_layers: usize,
    /// The fusion policy the layers were grouped by and the eager prediction beside it;
    /// absent for the network as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<crate::fused::FusionReport>,
}

/// Predicts from a loaded bundle.
#[derive(Debug)]
pub struct Predictor {
    bundle: Bundle,
    /// Per kind: the feature columns users set (configuration, batch, threads, utilisation)
    /// with their trained range, so a query is range-checked without a name lookup.
    checks: BTreeMap<ModuleKind, Vec<(usize, f64, f64)>>,
    /// Per kind: what extrapolation clamps to, found once by name.
    clamps: BTreeMap<ModuleKind, Clamps>,
    /// GPU kinds whose model saw no training-step rows: their training steps are composed
    /// from forward kernels ([`backward_parts`]).
    forward_only: Vec<ModuleKind>,
    /// Per kind (index in `ModuleKind::ALL`): the group of kinds whose models are one shared
    /// MEDN ([`FittedMedn::same_network`]), whose rows a batch runs through the network
    /// together; `None` for other models.
    medn_group: Vec<Option<usize>>,
    /// Kind indices in the order a batch predicts them: `ModuleKind::ALL`'s, with the kinds of
    /// a MEDN group together at the first one's place.
    order: Vec<usize>,
    /// Per kind index: the name of its model (empty without one).
    names: Vec<&'static str>,
    /// Networks prepared by earlier queries ([`Predictor::prepared`]), so a repeated network
    /// skips its shape check.
    networks: RwLock<NetworkPlans>,
    /// This predictor among all in the process: a prepared network keeps its context plans
    /// per predictor, since rows depend on the bundle's device and models.
    id: u64,
}

/// Prepared networks by value, and how many layers they hold together.
#[derive(Debug, Default)]
struct NetworkPlans {
    by_network: HashMap<Network, Arc<PreparedNetwork>, BuildHasherDefault<FxHasher>>,
    layers: usize,
}

/// Networks a predictor keeps prepared; past either bound the cache starts again empty.
const NETWORK_PLANS: usize = 32;
const NETWORK_PLAN_LAYERS: usize = 100_000;
/// Contexts a prepared network keeps a plan of ([`ContextPlan`]); past it, they start again.
/// With [`PLAN_MAX_MODULES`] this bounds a network's plans to a few MiB of rows.
const CONTEXT_PLANS: usize = 8;
/// Distinct modules past which a network gets no plans (its rows are built per query).
const PLAN_MAX_MODULES: usize = 512;

/// The next [`Predictor`]'s `id`.
static PREDICTORS: AtomicU64 = AtomicU64::new(0);

/// A multiply-rotate hash (rustc's FxHash): a network's layers hash several times faster
/// than through SipHash, and the keys are compared in full on a hit.
#[derive(Clone, Copy, Default)]
struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The model of `kind` as a MEDN, when it is one or a blend holds one (the blend's other
/// parts are then predicted beside the MEDN's batch: [`blend_rest`]).
fn medn_of(bundle: &Bundle, kind: ModuleKind) -> Option<&FittedMedn> {
    let model: &dyn std::any::Any = bundle.model(kind)?;
    model.downcast_ref::<FittedMedn>().or_else(|| {
        let (_, medn, _) = model.downcast_ref::<Blend>()?.first_part::<FittedMedn>()?;
        Some(medn)
    })
}

/// For each query (its training-phase row in `rows`, asked for in `phases`) of a blend whose
/// first MEDN part ([`medn_of`]'s) runs in its group's batch: that part's weight and the sum
/// of the other parts' weighted log predictions.
fn blend_rest(blend: &Blend, rows: &[f64], phases: &[Phase]) -> Result<Vec<(f64, f64)>> {
    let (skip, w) = blend
        .first_part::<FittedMedn>()
        .map_or((None, 0.0), |(i, _, w)| (Some(i), w));
    let mut rest = vec![0.0; phases.len()];
    blend.add_part_logs(rows, phases, skip, &mut rest)?;
    Ok(rest.into_iter().map(|r| (w, r)).collect())
}

/// The buffers [`Predictor::predict_many_as_given`] fills, kept per thread between calls
/// (taken out while in use, so a nested call simply starts with empty ones).
#[derive(Default)]
struct Scratch {
    rows: Vec<f64>,
    phases: Vec<Phase>,
    index: Vec<usize>,
    out: Vec<f64>,
    batch: Encoded,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::new(Scratch::default());
}

/// Per query, the index of its kind in `ModuleKind::ALL`, and per kind index its queries.
fn by_kind(queries: &[(&ModuleSpec, &Context)]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut kind_of = Vec::with_capacity(queries.len());
    let mut by_kind: Vec<Vec<usize>> = vec![Vec::new(); ModuleKind::ALL.len()];
    for (i, (spec, _)) in queries.iter().enumerate() {
        let k = kind_index(spec.kind());
        by_kind[k].push(i);
        kind_of.push(k);
    }
    (kind_of, by_kind)
}

/// The index of `kind` in `ModuleKind::ALL`.
fn kind_index(kind: ModuleKind) -> usize {
    ModuleKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

/// Rare per-query extras of a batch, sized to it the first time a query needs one: range
/// warnings, the fallback's prediction, and for an extrapolated query the roofline of the
/// query and of its stand-in.
#[derive(Clone, Debug, Default)]
struct Extras {
    warnings: Vec<Vec<String>>,
    fallback: Vec<Option<ModulePrediction>>,
    scale: Vec<Option<(f64, f64)>>,
    /// Per query, the CPU compute floor read off its own row when `shapes` were given (NaN
    /// where none was read): the bound then derives no shapes.
    floors: Vec<f64>,
    /// The queries' validated output shapes, in order, when the caller has them: the rows
    /// take them instead of deriving them again, and the floors are read off the rows.
    shaped: bool,
}

/// `v[i]`, with `v` sized to `n` (filled with `empty`) on first use.
fn slot<T: Clone>(v: &mut Vec<T>, n: usize, i: usize, empty: T) -> &mut T {
    if v.is_empty() {
        v.resize(n, empty);
    }
    &mut v[i]
}

/// The models' answers to a batch as they come in ([`Predictor::eval_rows`]): rows of a
/// MEDN group encoded and waiting for one pass of its network, and blends whose MEDN part
/// runs there.
struct Eval<'s, 'm> {
    ms: Vec<f64>,
    /// The group waiting and the model that runs it.
    waiting: Option<(usize, &'m FittedMedn)>,
    /// The queries of the encoded rows waiting.
    pending: Vec<usize>,
    /// Per query of a blend whose MEDN runs in its group's batch: the MEDN part's weight and
    /// the other parts' weighted log predictions, combined once the batch has run.
    blended: Vec<Option<(f64, f64)>>,
    out: &'s mut Vec<f64>,
    batch: &'s mut Encoded,
}

impl<'s, 'm> Eval<'s, 'm> {
    fn new(n: usize, out: &'s mut Vec<f64>, batch: &'s mut Encoded) -> Self {
        batch.clear();
        Eval {
            ms: vec![f64::NAN; n],
            waiting: None,
            pending: Vec::new(),
            blended: Vec::new(),
            out,
            batch,
        }
    }

    /// Runs the waiting rows through `medn`.
    fn flush(&mut self, medn: &FittedMedn) {
        self.out.clear();
        self.out.resize(self.pending.len(), 0.0);
        medn.predict_encoded(self.batch, self.out);
        for (&i, v) in self.pending.iter().zip(self.out.iter()) {
            self.ms[i] = *v;
        }
        self.pending.clear();
        self.waiting = None;
    }

    /// Every answer, the waiting rows run and the blends combined.
    fn finish(mut self) -> Vec<f64> {
        if let Some((_, medn)) = self.waiting {
            self.flush(medn);
        }
        for (v, b) in self.ms.iter_mut().zip(&self.blended) {
            if let Some((w, rest)) = b {
                // The sum in the order `Blend::predict_row` adds (of two parts, exactly).
                *v = (w * v.ln() + rest).exp();
            }
        }
        self.ms
    }
}

/// The model of `kind` as a blend, when it is one.
fn blend_of(model: &dyn Regressor) -> Option<&Blend> {
    let model: &dyn std::any::Any = model;
    model.downcast_ref::<Blend>()
}

/// The trained range each input a user sets is clamped into when a query leaves it (`None`:
/// no usable range, the value stays), and where the roofline feature sits.
#[derive(Debug)]
struct Clamps {
    /// One per configuration column of the kind, in order.
    config: Vec<Option<(f64, f64)>>,
    batch: Option<(f64, f64)>,
    threads: Option<(f64, f64)>,
    utilisation: Option<(f64, f64)>,
    /// Index of `roofline_ms` in the model's schema.
    roofline: Option<usize>,
}

/// The warning of a prediction a model put below the device's least time for the query.
const RAISED: &str = "raised to the least time the device's spec allows (the model predicted less)";

/// Whether a prediction warning says the physical bound raised it.
pub fn is_raised(warning: &str) -> bool {
    warning == RAISED
}

/// The warning of a query predicted at its nearest trained configuration.
const EXTRAPOLATED: &str =
    "predicted at the nearest trained configuration and scaled by the roofline work ratio";

/// A query's stand-in inside the trained ranges, and the roofline times that scale the
/// stand-in's prediction to the query (`ms * roofline / near_roofline`).
struct Extrapolation {
    spec: ModuleSpec,
    context: Context,
    /// The stand-in's row in the query's phase.
    row: Vec<f64>,
    roofline: f64,
    near_roofline: f64,
}

/// Whether `x` leaves the range of one of `cols` (`(column, min, max)`).
fn outside_of(cols: &[(usize, f64, f64)], x: &[f64]) -> bool {
    cols.iter()
        .any(|&(i, lo, hi)| outside_range(lo, hi, x.get(i).copied().unwrap_or(f64::NAN)))
}

fn clamp(range: Option<(f64, f64)>, v: f64) -> f64 {
    match range {
        Some((lo, hi)) => v.clamp(lo, hi),
        None => v,
    }
}

impl Predictor {
    /// A predictor over `bundle`.
    pub fn new(bundle: Bundle) -> Predictor {
        let mut checks = BTreeMap::new();
        let mut clamps = BTreeMap::new();
        for kind in bundle.kinds() {
            let Some(entry) = bundle.manifest.kinds.get(kind.name()) else {
                continue;
            };
            let user: Vec<&str> = kind
                .config_columns()
                .iter()
                .copied()
                .chain(["batch", "threads", "utilisation"])
                .collect();
            let cols = entry
                .ranges
                .iter()
                .enumerate()
                .filter(|(_, r)| user.contains(&r.name.as_str()))
                .map(|(i, r)| (i, r.min, r.max))
                .collect();
            checks.insert(kind, cols);
            let range = |name: &str| {
                entry
                    .ranges
                    .iter()
                    .find(|r| r.name == name)
                    .filter(|r| r.min <= r.max)
                    .map(|r| (r.min, r.max))
            };
            clamps.insert(
                kind,
                Clamps {
                    config: kind.config_columns().iter().map(|n| range(n)).collect(),
                    batch: range("batch"),
                    threads: range("threads"),
                    utilisation: range("utilisation"),
                    roofline: bundle
                        .model(kind)
                        .and_then(|m| m.schema().index("roofline_ms")),
                },
            );
        }
        let forward_only = if bundle.manifest.device.kind == perfcast_core::DeviceKind::Gpu {
            bundle
                .kinds()
                .filter(|k| {
                    bundle.manifest.kinds.get(k.name()).is_some_and(|e| {
                        e.ranges.iter().any(|r| r.name == "training" && r.max < 0.5)
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        // Kinds whose MEDNs are one network, each group found once by its first kind.
        let mut medn_group: Vec<Option<usize>> = vec![None; ModuleKind::ALL.len()];
        let mut firsts: Vec<usize> = Vec::new();
        for (k, kind) in ModuleKind::ALL.iter().enumerate() {
            let Some(medn) = medn_of(&bundle, *kind).filter(|_| !kind.is_zero_cost()) else {
                continue;
            };
            let group = firsts.iter().position(|&f| {
                medn_of(&bundle, ModuleKind::ALL[f]).is_some_and(|m| m.same_network(medn))
            });
            medn_group[k] = Some(group.unwrap_or_else(|| {
                firsts.push(k);
                firsts.len() - 1
            }));
        }
        let mut order: Vec<usize> = Vec::with_capacity(ModuleKind::ALL.len());
        for k in 0..ModuleKind::ALL.len() {
            if order.contains(&k) {
                continue;
            }
            order.push(k);
            if let Some(g) = medn_group[k] {
                order.extend((k + 1..ModuleKind::ALL.len()).filter(|&j| medn_group[j] == Some(g)));
            }
        }
        let names = ModuleKind::ALL
            .iter()
            .map(|k| bundle.model(*k).map_or("", |m| m.name()))
            .collect();
        Predictor {
            bundle,
            checks,
            clamps,
            forward_only,
            medn_group,
            order,
            names,
            networks: RwLock::new(NetworkPlans::default()),
            id: PREDICTORS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The bundle behind it.
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// One module in one context.
    pub fn predict_module(&self, spec: &ModuleSpec, context: &Context) -> Result<ModulePrediction> {
        // Validating the spec is deriving its output shape; the feature row reuses it.
        let shape = spec.output_dims()?;
        context.validate()?;
        self.predict_one(spec, context, &shape)
    }

    /// [`Predictor::predict_module`] through the reference path: one feature row per query,
    /// each model's own `predict_row`, no batching. The fast paths are tested against it.
    #[doc(hidden)]
    pub fn predict_module_reference(
        &self,
        spec: &ModuleSpec,
        context: &Context,
    ) -> Result<ModulePrediction> {
        spec.validate()?;
        context.validate()?;
        self.predict_valid(spec, context)
    }

    /// Whether a feature row leaves the trained range of a column a user sets. Those columns
    /// (configuration, batch, threads, utilisation) are the same in both phases' rows.
    fn outside(&self, kind: ModuleKind, x: &[f64]) -> bool {
        self.checks
            .get(&kind)
            .is_some_and(|cols| outside_of(cols, x))
    }

    /// The feature row a model reads for a query, appended to `out`: multi-task models read
    /// the training-phase row whatever the phase (it carries the forward work and the backward
    /// shapes), others the query's own.
    fn row_for(
        model: &dyn Regressor,
        spec: &ModuleSpec,
        context: &Context,
        device: &perfcast_core::DeviceSpec,
        shape: Option<&Dims>,
        out: &mut Vec<f64>,
    ) {
        let row = |context: &Context, out: &mut Vec<f64>| match shape {
            Some(shape) => row_into_shaped(spec, context, device, shape, out),
            None => row_into(spec, context, device, out),
        };
        if model.multi_task() && context.phase != Phase::Training {
            let training = Context {
                phase: Phase::Training,
                ..context.clone()
            };
            row(&training, out);
        } else {
            row(context, out);
        }
    }

    /// One validated query on the fast path: [`Predictor::predict_many`] of one, with one
    /// allocation (the row) when the query is inside the trained ranges.
    fn predict_one_as_given(
        &self,
        spec: &ModuleSpec,
        context: &Context,
    ) -> Result<ModulePrediction> {
        if let Some((p, _)) = self.predict_inside(spec, context, None)? {
            return Ok(p);
        }
        let mut out = self.predict_many(&[(spec, context)])?;
        out.pop()
            .ok_or_else(|| Error::Query("no prediction for the query".into()))
    }

    /// A validated query inside its model's trained ranges, unbounded, with the CPU compute
    /// floor read off its feature row (ms); `None` when it has no model or leaves the ranges.
    fn predict_inside(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        shape: Option<&Dims>,
    ) -> Result<Option<(ModulePrediction, f64)>> {
        let kind = spec.kind();
        let Some(model) = self.bundle.model(kind) else {
            return Ok(None);
        };
        let device = &self.bundle.manifest.device;
        let mut x = Vec::with_capacity(MAX_ROW);
        Self::row_for(model, spec, context, device, shape, &mut x);
        if self.outside(kind, &x) {
            return Ok(None);
        }
        let ms = if model.multi_task() {
            let mut out = [0.0];
            model.predict_tasks(&x, &[context.phase], &mut out)?;
            out[0]
        } else {
            model.predict_row(&x)?
        };
        let p = ModulePrediction {
            kind,
            ms,
            model: model.name().into(),
            fallback: false,
            warnings: Vec::new(),
        };
        Ok(Some((
            p,
            cpu_floor_ms_of_row(spec, context.phase, &x, device),
        )))
    }

    /// Many validated queries on the fast path, in their order: grouped by kind, each kind's
    /// rows built into one buffer and predicted together, [`KIND_CHUNK`] at a time
    /// (multi-task models run their rows through the network in blocks, in the
    /// training-phase form they read, so no row is rewritten into another phase; trees walk
    /// several rows at once). Kinds sharing one MEDN fill one batch of encoded rows, each
    /// row encoded by its own kind's model, and the network runs once for all of them (a
    /// VGG-16's convolutions, ReLUs and linears: 18 rows in one pass, not 9 + 6 + 3 in
    /// three). A query outside the trained ranges gets its warnings and is
    /// predicted at its nearest trained configuration in the same batch, scaled as the
    /// reference path scales it; kinds without a model get the spec roofline. Results are
    /// identical to [`Predictor::predict_module_reference`]'s.
    fn predict_many_as_given(
        &self,
        queries: &[(&ModuleSpec, &Context)],
    ) -> Result<Vec<ModulePrediction>> {
        self.predict_many_shaped(queries, None).map(|(out, _)| out)
    }

    /// [`Predictor::predict_many_as_given`] of CPU queries whose output shapes (`shapes`, in
    /// order) validation derived: the rows take them, and each query's compute floor is read
    /// off its row (returned, NaN where none was read).
    fn predict_many_shaped(
        &self,
        queries: &[(&ModuleSpec, &Context)],
        shapes: Option<&[Dims]>,
    ) -> Result<(Vec<ModulePrediction>, Vec<f64>)> {
        let n = queries.len();
        let (kind_of, by_kind) = by_kind(queries);
        let mut extras = Extras {
            shaped: shapes.is_some_and(|s| s.len() == n),
            ..Extras::default()
        };
        // This thread's buffers of the last call, emptied: a batch's rows and encoded MEDN
        // inputs run to hundreds of KiB, which a fresh allocation maps and faults in on every
        // call (and two threads doing so wait on each other in the kernel).
        let mut scratch = SCRATCH.take();
        let Scratch {
            rows,
            phases,
            index,
            out,
            batch,
        } = &mut scratch;
        let mut eval = Eval::new(n, out, batch);
        for &k in &self.order {
            let list = &by_kind[k];
            if list.is_empty() {
                continue;
            }
            // A chunk's rows and scratch stay in cache between building and predicting.
            for chunk in list.chunks(KIND_CHUNK) {
                rows.clear();
                phases.clear();
                index.clear();
                let built =
                    self.build_rows(k, chunk, queries, shapes, rows, phases, index, &mut extras)?;
                if built {
                    self.eval_rows(&mut eval, k, rows, phases, index, None)?;
                }
            }
        }
        let ms = eval.finish();
        SCRATCH.set(scratch);
        let out = self.assemble(queries.iter().map(|(s, _)| s.kind()), &kind_of, ms, &extras);
        Ok((out, extras.floors))
    }

    /// The rows of `chunk` (queries of kind index `k`) appended to `rows`, their phases to
    /// `phases` and their query indices to `index`, each in the form the kind's model reads:
    /// a query outside the trained ranges gets its warnings and, unless the model
    /// extrapolates itself, the row of its nearest trained configuration (scale in `extras`).
    /// Returns false when the kind has no model (or costs nothing): its answers are then in
    /// `extras.fallback` and there is nothing to predict.
    #[allow(clippy::too_many_arguments)]
    fn build_rows(
        &self,
        k: usize,
        chunk: &[usize],
        queries: &[(&ModuleSpec, &Context)],
        shapes: Option<&[Dims]>,
        rows: &mut Vec<f64>,
        phases: &mut Vec<Phase>,
        index: &mut Vec<usize>,
        extras: &mut Extras,
    ) -> Result<bool> {
        let n = queries.len();
        let device = &self.bundle.manifest.device;
        let kind = ModuleKind::ALL[k];
        // Zero-cost kinds (views) are answered as such whatever the bundle holds.
        let Some(model) = self.bundle.model(kind).filter(|_| !kind.is_zero_cost()) else {
            for &i in chunk {
                let (spec, context) = queries[i];
                *slot(&mut extras.fallback, n, i, None) = Some(self.predict_valid(spec, context)?);
            }
            return Ok(false);
        };
        let multi = model.multi_task();
        let checks = self.checks.get(&kind).map_or(&[][..], Vec::as_slice);
        for &i in chunk {
            let (spec, context) = queries[i];
            let start = rows.len();
            let shape = shapes.filter(|_| extras.shaped).map(|s| &s[i]);
            Self::row_for(model, spec, context, device, shape, rows);
            if shape.is_some() {
                let floor = cpu_floor_ms_of_row(spec, context.phase, &rows[start..], device);
                *slot(&mut extras.floors, n, i, f64::NAN) = floor;
            }
            if outside_of(checks, &rows[start..]) {
                let warned = self.range_warnings(kind, &rows[start..]);
                *slot(&mut extras.warnings, n, i, Vec::new()) = warned;
                let phase_row;
                let x: &[f64] = if multi && context.phase != Phase::Training {
                    phase_row = row(spec, context, device);
                    &phase_row
                } else {
                    &rows[start..]
                };
                let e = if model.extrapolates() {
                    None
                } else {
                    self.extrapolation(spec, context, x)?
                };
                if let Some(e) = e {
                    *slot(&mut extras.scale, n, i, None) = Some((e.roofline, e.near_roofline));
                    rows.truncate(start);
                    if multi {
                        Self::row_for(model, &e.spec, &e.context, device, None, rows);
                    } else {
                        rows.extend_from_slice(&e.row);
                    }
                    slot(&mut extras.warnings, n, i, Vec::new()).push(EXTRAPOLATED.into());
                }
            }
            phases.push(context.phase);
            index.push(i);
        }
        Ok(true)
    }

    /// Predicts rows [`Predictor::build_rows`] built for kind index `k` into `eval`: a kind
    /// whose MEDN is shared encodes them into its group's batch (run when the group changes
    /// or the batch is full), any other model predicts them at once. `encoded`, when given,
    /// holds the rows as that MEDN encodes them ([`Predictor::encode_chunk`]).
    fn eval_rows<'a>(
        &'a self,
        eval: &mut Eval<'_, 'a>,
        k: usize,
        rows: &[f64],
        phases: &[Phase],
        index: &[usize],
        encoded: Option<&EncodedRows>,
    ) -> Result<()> {
        let group = self.medn_group[k];
        if let Some((g, medn)) = eval.waiting
            && Some(g) != group
        {
            eval.flush(medn);
        }
        if index.is_empty() {
            return Ok(());
        }
        let kind = ModuleKind::ALL[k];
        let Some(model) = self.bundle.model(kind) else {
            return Ok(());
        };
        let medn = group.and_then(|g| Some((g, medn_of(&self.bundle, kind)?)));
        if let Some((g, m)) = medn {
            // A blend whose MEDN part runs in its group's batch.
            if let Some(blend) = blend_of(model) {
                let logs = blend_rest(blend, rows, phases)?;
                for (&i, rest) in index.iter().zip(logs) {
                    *slot(&mut eval.blended, eval.ms.len(), i, None) = Some(rest);
                }
            }
            match encoded.filter(|e| e.len() == index.len()) {
                Some(e) => {
                    eval.batch.push_rows(e)?;
                    eval.pending.extend_from_slice(index);
                }
                None => {
                    let width = crate::regressor::check_tasks(
                        m.schema(),
                        rows.len(),
                        phases.len(),
                        index.len(),
                    )?;
                    for ((x, phase), &i) in rows.chunks_exact(width).zip(phases).zip(index) {
                        m.encode_row(x, *phase, eval.batch)?;
                        eval.pending.push(i);
                    }
                }
            }
            eval.waiting = Some((g, m));
            if eval.batch.len() >= KIND_CHUNK {
                eval.flush(m);
            }
        } else {
            let out = &mut *eval.out;
            out.clear();
            out.resize(index.len(), 0.0);
            if model.multi_task() {
                model.predict_tasks(rows, phases, out)?;
            } else {
                model.predict_rows(rows, out)?;
            }
            for (&i, v) in index.iter().zip(out.iter()) {
                eval.ms[i] = *v;
            }
        }
        Ok(())
    }

    /// The rows of a chunk of kind index `k` as the MEDN that runs them in its group's batch
    /// encodes them; `None` for any other model, or rows it cannot encode (predicting them
    /// then says why).
    fn encode_chunk(&self, k: usize, rows: &[f64], phases: &[Phase]) -> Option<EncodedRows> {
        self.medn_group[k]?;
        let m = medn_of(&self.bundle, ModuleKind::ALL[k])?;
        let width =
            crate::regressor::check_tasks(m.schema(), rows.len(), phases.len(), phases.len())
                .ok()?;
        let mut batch = Encoded::default();
        for (x, phase) in rows.chunks_exact(width).zip(phases) {
            m.encode_row(x, *phase, &mut batch).ok()?;
        }
        Some(batch.take_rows())
    }

    /// The predictions of queries of `kinds` (`kind_of`: each one's index in
    /// `ModuleKind::ALL`) from the models' answers `ms` and the rare extras, unbounded.
    fn assemble(
        &self,
        kinds: impl Iterator<Item = ModuleKind>,
        kind_of: &[usize],
        ms: Vec<f64>,
        extras: &Extras,
    ) -> Vec<ModulePrediction> {
        let mut predictions = Vec::with_capacity(ms.len());
        for (i, (kind, (ms, k))) in kinds.zip(ms.iter().zip(kind_of)).enumerate() {
            if let Some(p) = extras.fallback.get(i).and_then(Option::as_ref) {
                predictions.push(p.clone());
                continue;
            }
            predictions.push(ModulePrediction {
                kind,
                ms: match extras.scale.get(i).copied().flatten() {
                    Some((roof, near_roof)) => ms * roof / near_roof,
                    None => *ms,
                },
                model: Cow::Borrowed(self.names[*k]),
                fallback: false,
                warnings: extras.warnings.get(i).cloned().unwrap_or_default(),
            });
        }
        predictions
    }

    /// Whether queries are rewritten into their canonical GPU form and bounded by the spec
    /// roofline (a GPU bundle; CPU bundles answer the form their backend measured).
    pub(crate) fn gpu(&self) -> bool {
        self.bundle.manifest.device.kind == perfcast_core::DeviceKind::Gpu
    }

    /// The least time the device's spec allows for a query, ms: the roofline on a GPU, the
    /// compute floor of GEMM-like kinds at the measured GEMM peak on a CPU.
    pub(crate) fn least_ms(&self, spec: &ModuleSpec, context: &Context) -> f64 {
        let device = &self.bundle.manifest.device;
        if self.gpu() {
            least_time_s(spec, context, device) * 1e3
        } else {
            least_cpu_compute_time_s(spec, context, device) * 1e3
        }
    }

    /// Raises a prediction to the least time the device's spec allows for the query (a model
    /// can only be wrong upwards from there), saying so when it had to: the roofline on a GPU,
    /// the compute floor of GEMM-like kinds at the measured GEMM peak on a CPU. Refuses a
    /// prediction that is not a finite time (a corrupt model), naming the model and the query.
    fn bounded(
        &self,
        p: ModulePrediction,
        spec: &ModuleSpec,
        context: &Context,
    ) -> Result<ModulePrediction> {
        self.bounded_at(p, self.least_ms(spec, context), spec)
    }

    /// [`Predictor::bounded`] with the query's least time already known (`floor`).
    fn bounded_at(
        &self,
        mut p: ModulePrediction,
        floor: f64,
        spec: &ModuleSpec,
    ) -> Result<ModulePrediction> {
        // A NaN from a model is raised too.
        if p.ms.is_nan() || p.ms < floor {
            p.ms = floor;
            p.warnings.push(RAISED.into());
        }
        if !(p.ms.is_finite() && p.ms >= 0.0) {
            return Err(Error::Bundle {
                path: self.bundle.dir.clone(),
                message: format!(
                    "the `{}` model predicted {} ms for {}: the bundle is corrupt; retrain it",
                    p.model,
                    p.ms,
                    spec.describe()
                ),
            });
        }
        Ok(p)
    }

    /// A CPU query its backend runs as one call per sample ([`per_sample_calls`]), or whose
    /// time grows as its batch ([`direct_weight_gradient`]): the same module at batch 1 and
    /// the number of calls; `None` for every other query.
    fn per_sample(&self, spec: &ModuleSpec, context: &Context) -> Option<(Context, f64)> {
        if self.gpu() {
            return None;
        }
        let calls = per_sample_calls(spec, context.batch)
            .or_else(|| direct_weight_gradient(spec, context))?;
        let one = Context {
            batch: 1,
            ..context.clone()
        };
        Some((one, calls as f64))
    }

    /// Whether a query's training step is composed from forward kernels.
    fn composed(&self, spec: &ModuleSpec, context: &Context) -> bool {
        context.phase == Phase::Training && self.forward_only.contains(&spec.kind())
    }

    /// A training step of a kind the bundle only saw forward rows of, as NeuSight composes it:
    /// the forward kernel plus the backward's kernels, each predicted as a forward pass (a
    /// GEMM's backward is two GEMMs of the same sizes, dX = dY W^T and dW = X^T dY; an
    /// element-wise, softmax or LayerNorm backward one more pass of the same size), with a
    /// warning saying so.
    fn predict_composed(&self, spec: &ModuleSpec, context: &Context) -> Result<ModulePrediction> {
        // The parts are the canonical GEMM's: a batch of B x T rows reduces over all of them.
        let (spec, context) = canonical_or_given(spec, context);
        let (spec, context) = (spec.as_ref(), context.as_ref());
        let forward = forward_of(context);
        let mut p = self.predict_valid(spec, &forward)?;
        for (part, batch) in backward_parts(spec, context.batch) {
            let part_context = Context {
                batch,
                ..forward.clone()
            };
            p.ms += self.predict_valid(&part, &part_context)?.ms;
        }
        p.warnings.push(format!(
            "training step composed from forward kernels (the bundle has no `{}` training rows)",
            spec.kind()
        ));
        self.bounded(p, spec, context)
    }

    /// The devices whose training/forward ratio answers a training step on this GPU (see
    /// [`Regressor::phase_devices`]): none when the query is not a GPU training step, the
    /// kind's model learned no training rows, or this GPU's peak and bandwidth lie within
    /// [`PHASE_REACH`] of those it learned them on.
    fn phase_references(&self, spec: &ModuleSpec, context: &Context) -> &[DeviceSpec] {
        if !(self.gpu() && context.phase == Phase::Training) {
            return &[];
        }
        let Some(model) = self.bundle.model(spec.kind()) else {
            return &[];
        };
        let refs = model.phase_devices();
        let device = &self.bundle.manifest.device;
        let within = |of: fn(&DeviceSpec) -> f64| {
            let (lo, hi) = refs
                .iter()
                .map(of)
                .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
            let v = of(device);
            v >= lo / PHASE_REACH && v <= hi * PHASE_REACH
        };
        if refs.is_empty() || within(|d| d.peak_gflops) && within(|d| d.mem_bandwidth_gbs) {
            &[]
        } else {
            refs
        }
    }

    /// A training step on a GPU far beyond those the kind's model saw training rows of: the
    /// forward pass on this GPU times the median training/forward ratio the model predicts for the same query
    /// on the GPUs it has training rows of, bounded like any answer.
    fn predict_transferred(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        refs: &[DeviceSpec],
    ) -> Result<ModulePrediction> {
        let (spec, context) = canonical_or_given(spec, context);
        let (spec, context) = (spec.as_ref(), context.as_ref());
        let forward = forward_of(context);
        let mut p = self.predict_valid(spec, &forward)?;
        let model = self
            .bundle
            .model(spec.kind())
            .expect("phase references come from the kind's model");
        // Outside the trained ranges the ratio is taken at the nearest trained configuration:
        // the two phases' utilisations extrapolate independently, their ratio would not hold.
        let x = row(spec, context, &self.bundle.manifest.device);
        let near = if self.outside(spec.kind(), &x) {
            self.extrapolation(spec, context, &x)?
                .map(|e| (e.spec, e.context))
        } else {
            None
        };
        let (at, at_context) = near.as_ref().map_or((spec, context), |(s, c)| (s, c));
        let at_forward = forward_of(at_context);
        let mut ratios = Vec::with_capacity(refs.len());
        for d in refs {
            let step = model.predict_row(&row(at, at_context, d))?;
            let fwd = model.predict_row(&row(at, &at_forward, d))?;
            if step.is_finite() && fwd.is_finite() && fwd > 0.0 {
                ratios.push(step / fwd);
            }
        }
        if ratios.is_empty() {
            return self.bounded(self.predict_valid_as_given(spec, context)?, spec, context);
        }
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let ratio = if n % 2 == 1 {
            ratios[n / 2]
        } else {
            0.5 * (ratios[n / 2 - 1] + ratios[n / 2])
        };
        p.ms *= ratio.max(1.0);
        p.warnings.push(format!(
            "training step: this GPU's forward pass times the training/forward ratio {ratio:.2} \
             the `{}` model gives on the {n} GPUs it has training rows of",
            spec.kind()
        ));
        self.bounded(p, spec, context)
    }

    /// `as_given` (one of the paths below) on the query's canonical form, bounded; a training
    /// step of a forward-only kind composed, and one on a GPU without training rows of its
    /// kind transferred from the GPUs with them.
    fn answer(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        as_given: fn(&Self, &ModuleSpec, &Context) -> Result<ModulePrediction>,
    ) -> Result<ModulePrediction> {
        if spec.kind().is_zero_cost() {
            return Ok(zero_cost(spec.kind()));
        }
        if self.composed(spec, context) {
            return self.predict_composed(spec, context);
        }
        let refs = self.phase_references(spec, context);
        if !refs.is_empty() {
            return self.predict_transferred(spec, context, refs);
        }
        if let Some((one, calls)) = self.per_sample(spec, context) {
            let mut p = as_given(self, spec, &one)?;
            p.ms *= calls;
            return self.bounded(p, spec, context);
        }
        match self.gpu().then(|| canonical(spec, context)).flatten() {
            Some((s, c)) => self.bounded(as_given(self, &s, &c)?, &s, &c),
            None => self.bounded(as_given(self, spec, context)?, spec, context),
        }
    }

    /// [`Predictor::predict_valid_as_given`] through [`Predictor::answer`].
    fn predict_valid(&self, spec: &ModuleSpec, context: &Context) -> Result<ModulePrediction> {
        self.answer(spec, context, Self::predict_valid_as_given)
    }

    /// [`Predictor::predict_one_as_given`] through [`Predictor::answer`].
    fn predict_one(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        shape: &Dims,
    ) -> Result<ModulePrediction> {
        // A CPU query asked as given (no canonical form, no composition): its row gives the
        // compute floor too, so its shapes are derived once instead of again for the bound.
        if !self.gpu()
            && !spec.kind().is_zero_cost()
            && !self.composed(spec, context)
            && self.per_sample(spec, context).is_none()
            && let Some((p, floor)) = self.predict_inside(spec, context, Some(shape))?
        {
            return self.bounded_at(p, floor, spec);
        }
        self.answer(spec, context, Self::predict_one_as_given)
    }

    /// [`Predictor::predict_many_as_given`] on the queries' canonical forms, bounded.
    fn predict_many(&self, queries: &[(&ModuleSpec, &Context)]) -> Result<Vec<ModulePrediction>> {
        self.predict_many_valid(queries, None)
    }

    /// [`Predictor::predict_many`], given the queries' output shapes (`shapes`, in order) when
    /// validation derived them: a CPU query's row then takes its shape and gives its bound.
    fn predict_many_valid(
        &self,
        queries: &[(&ModuleSpec, &Context)],
        shapes: Option<&[Dims]>,
    ) -> Result<Vec<ModulePrediction>> {
        if !self.gpu() {
            let split: Vec<Option<(Context, f64)>> =
                queries.iter().map(|(s, c)| self.per_sample(s, c)).collect();
            let asked: Vec<(&ModuleSpec, &Context)> = queries
                .iter()
                .zip(&split)
                .map(|(&(s, c), one)| (s, one.as_ref().map_or(c, |(one, _)| one)))
                .collect();
            let (out, floors) = self.predict_many_shaped(&asked, shapes)?;
            return out
                .into_iter()
                .zip(queries)
                .zip(&split)
                .enumerate()
                .map(|(i, ((mut p, (s, c)), one))| {
                    if let Some((_, calls)) = one {
                        p.ms *= calls;
                        return self.bounded(p, s, c);
                    }
                    // A floor read off the query's own row is the one `bounded` derives.
                    match floors.get(i).filter(|f| !f.is_nan()) {
                        Some(&floor) => self.bounded_at(p, floor, s),
                        None => self.bounded(p, s, c),
                    }
                })
                .collect();
        }
        if queries
            .iter()
            .any(|(s, c)| self.composed(s, c) || !self.phase_references(s, c).is_empty())
        {
            // Composed and transferred training steps one at a time (each is several queries).
            return queries
                .iter()
                .map(|(s, c)| self.predict_valid(s, c))
                .collect();
        }
        let canon: Vec<Option<(ModuleSpec, Context)>> =
            queries.iter().map(|(s, c)| canonical(s, c)).collect();
        let queries: Vec<(&ModuleSpec, &Context)> = queries
            .iter()
            .zip(&canon)
            .map(|(q, k)| k.as_ref().map_or(*q, |(s, c)| (s, c)))
            .collect();
        let out = self.predict_many_as_given(&queries)?;
        out.into_iter()
            .zip(&queries)
            .map(|(p, (s, c))| self.bounded(p, s, c))
            .collect()
    }

    /// The warning of every user-set input of a row outside its trained range.
    fn range_warnings(&self, kind: ModuleKind, x: &[f64]) -> Vec<String> {
        let (Some(cols), Some(entry)) = (
            self.checks.get(&kind),
            self.bundle.manifest.kinds.get(kind.name()),
        ) else {
            return Vec::new();
        };
        cols.iter()
            .filter_map(|&(i, lo, hi)| {
                let v = x[i];
                (v < lo - 1e-9 * lo.abs() || v > hi + 1e-9 * hi.abs()).then(|| {
                    format!(
                        "`{}` = {v} is outside the trained range {lo}..{hi}",
                        entry.ranges[i].name
                    )
                })
            })
            .collect()
    }

    /// [`Predictor::predict_module`] for a spec and context already validated, through the
    /// reference path: the query's own feature row and the model's `predict_row`.
    fn predict_valid_as_given(
        &self,
        spec: &ModuleSpec,
        context: &Context,
    ) -> Result<ModulePrediction> {
        let kind = spec.kind();
        let device = &self.bundle.manifest.device;
        let Some(model) = self.bundle.model(kind) else {
            let d = features::derive(spec, context.batch);
            let training = context.phase == perfcast_core::Phase::Training;
            let flops = if training { d.train_flops } else { d.flops };
            let bytes = (d.bytes_read + d.bytes_written) * if training { 3.0 } else { 1.0 };
            let s = (flops / (FALLBACK_COMPUTE_EFFICIENCY * device.peak_gflops * 1e9))
                .max(bytes / (FALLBACK_MEMORY_EFFICIENCY * device.mem_bandwidth_gbs * 1e9));
            return Ok(ModulePrediction {
                kind,
                ms: s * 1e3 + FALLBACK_OVERHEAD_MS,
                model: Cow::Borrowed("roofline-spec"),
                fallback: true,
                warnings: vec![format!(
                    "the bundle has no `{kind}` model; a roofline from the device spec answered"
                )],
            });
        };
        let x = row(spec, context, device);
        let mut warnings = Vec::new();
        // Set when extrapolated; otherwise the model's own prediction of the row.
        let mut ms = None;
        // Inputs a user sets; derived features leave the range only through these.
        if self.outside(kind, &x) {
            warnings = self.range_warnings(kind, &x);
            let e = if model.extrapolates() {
                None
            } else {
                self.extrapolation(spec, context, &x)?
            };
            if let Some(e) = e {
                ms = Some(model.predict_row(&e.row)? * e.roofline / e.near_roofline);
                warnings.push(EXTRAPOLATED.into());
            }
        }
        let ms = match ms {
            Some(ms) => ms,
            None => model.predict_row(&x)?,
        };
        Ok(ModulePrediction {
            kind,
            ms,
            model: model.name().into(),
            fallback: false,
            warnings,
        })
    }

    /// Learned models do not extrapolate: ridge's squares grow without bound and trees stay
    /// flat. Outside the trained ranges, predict the nearest trained configuration (each
    /// input clamped into its range) and scale by how much more work the query is, as the
    /// roofline sees it. `None` when the clamped configuration is not a valid module.
    /// `x` is the query's row in its own phase.
    fn extrapolation(
        &self,
        spec: &ModuleSpec,
        context: &Context,
        x: &[f64],
    ) -> Result<Option<Extrapolation>> {
        let kind = spec.kind();
        let Some(c) = self.clamps.get(&kind) else {
            return Ok(None);
        };
        let values = spec.config();
        let config: Vec<i64> = values
            .iter()
            .enumerate()
            .map(|(i, v)| clamp(c.config.get(i).copied().flatten(), *v as f64).round() as i64)
            .collect();
        let Ok(near) = ModuleSpec::from_config(kind, &config) else {
            return Ok(None);
        };
        if near.validate().is_err() {
            return Ok(None);
        }
        let near_context = Context {
            batch: clamp(c.batch, context.batch as f64).round().max(1.0) as usize,
            threads: clamp(c.threads, context.threads as f64).round().max(1.0) as usize,
            utilisation: clamp(c.utilisation, context.utilisation),
            phase: context.phase,
        };
        let device = &self.bundle.manifest.device;
        let xn = row(&near, &near_context, device);
        let Some(roof) = c.roofline else {
            return Ok(None);
        };
        if !(xn[roof] > 0.0 && x[roof] > 0.0) {
            return Ok(None);
        }
        Ok(Some(Extrapolation {
            roofline: x[roof],
            near_roofline: xn[roof],
            spec: near,
            context: near_context,
            row: xn,
        }))
    }

    /// Many modules, each in its own context, in order. Rows of one kind are predicted
    /// together; batches of [`PARALLEL_MIN`] queries or more are split over the available
    /// cores (see [`Predictor::predict_modules_threads`]).
    pub fn predict_modules(
        &self,
        queries: &[(ModuleSpec, Context)],
    ) -> Result<Vec<ModulePrediction>> {
        self.predict_modules_threads(queries, parallel_threads(queries.len()))
    }

    /// [`Predictor::predict_modules`] on `threads` threads, the caller's among them, in shares
    /// ([`in_shares`]). An invalid query's error comes first, as if every query were checked
    /// before any is predicted.
    pub fn predict_modules_threads(
        &self,
        queries: &[(ModuleSpec, Context)],
        threads: usize,
    ) -> Result<Vec<ModulePrediction>> {
        type Share = (Result<()>, Result<Vec<ModulePrediction>>);
        // Checks then predicts one share.
        let work = |part: &[(ModuleSpec, Context)]| -> Share {
            // Validating a spec is deriving its output shape, which its row then reuses.
            let mut shapes = Vec::with_capacity(part.len());
            for (spec, context) in part {
                match spec
                    .output_dims()
                    .and_then(|d| context.validate().map(|()| d))
                {
                    Ok(d) => shapes.push(d),
                    Err(e) => return (Err(e.into()), Ok(Vec::new())),
                }
            }
            let refs: Vec<(&ModuleSpec, &Context)> = part.iter().map(|(s, c)| (s, c)).collect();
            (Ok(()), self.predict_many_valid(&refs, Some(&shapes)))
        };
        let results = in_shares(queries.len(), threads, |range| work(&queries[range]));
        let panicked = || Error::Query("a prediction thread panicked".into());
        let mut parts = Vec::with_capacity(results.len());
        for share in results {
            let (check, part) = share.unwrap_or_else(|| (Err(panicked()), Err(panicked())));
            check?;
            parts.push(part);
        }
        if parts.len() == 1 {
            return parts.pop().unwrap_or_else(|| Ok(Vec::new()));
        }
        let mut predictions = Vec::with_capacity(queries.len());
        for part in parts {
            predictions.extend(part?);
        }
        Ok(predictions)
    }

    /// Checks a network's shapes once and finds its distinct modules, so repeated queries
    /// (other batch sizes, phases) skip both: a VGG-16 has 36 layers but 22 distinct modules.
    pub fn prepare(&self, network: &Network) -> Result<PreparedNetwork> {
        network.validate()?;
        let mut unique: Vec<ModuleSpec> = Vec::new();
        // Hashed, so that a network of many distinct layers prepares in linear time.
        let mut index_of: HashMap<&ModuleSpec, usize> = HashMap::new();
        // Described once per distinct module: formatting is most of a preparation's cost.
        let mut described: Vec<Arc<str>> = Vec::new();
        let mut layers = Vec::with_capacity(network.layers.len());
        for layer in &network.layers {
            let spec = &layer.spec;
            let index = *index_of.entry(spec).or_insert_with(|| {
                unique.push(spec.clone());
                described.push(spec.describe().into());
                unique.len() - 1
            });
            layers.push((
                Arc::from(layer.name.as_str()),
                described[index].clone(),
                index,
            ));
        }
        // Layers whose training step in the network runs less backward than the module timed
        // alone, one entry per distinct module and trim.
        let mut trims = vec![None; layers.len()];
        let mut trimmed: Vec<Trimmed> = Vec::new();
        let mut trimmed_of: HashMap<(usize, Trim), usize> = HashMap::new();
        for (i, grads) in network.operand_gradients().into_iter().enumerate() {
            let unique_index = layers[i].2;
            let Some(trim) = Trim::of(&unique[unique_index], grads) else {
                continue;
            };
            let k = *trimmed_of
                .entry((unique_index, trim.clone()))
                .or_insert_with(|| {
                    trimmed.push(Trimmed {
                        unique: unique_index,
                        module: format!("{}; {}", described[unique_index], trim.describe()).into(),
                        trim,
                    });
                    trimmed.len() - 1
                });
            trims[i] = Some(k);
        }
        Ok(PreparedNetwork {
            name: network.name.clone(),
            layers,
            unique,
            trims,
            trimmed,
            shape: RunShape::of(network, 0.0),
            plans: Arc::default(),
        })
    }

    /// Every layer of a prepared network in `context`, and their sum.
    pub fn predict_prepared(
        &self,
        network: &PreparedNetwork,
        context: &Context,
    ) -> Result<NetworkPrediction> {
        context.validate()?;
        let plan = self.context_plan(network, context);
        let unique = match plan.as_ref() {
            Some(plan) => self.predict_planned(network, plan),
            None => {
                // `prepare` validated every spec.
                let queries: Vec<(&ModuleSpec, &Context)> =
                    network.unique.iter().map(|s| (s, context)).collect();
                self.predict_many(&queries)
            }
        };
        let unique = match unique {
            Ok(p) => p,
            // Find the layer at fault, one distinct module at a time.
            Err(_) => network
                .unique
                .iter()
                .map(|spec| {
                    self.predict_valid(spec, context).map_err(|e| {
                        let layer = network
                            .layers
                            .iter()
                            .find(|l| &network.unique[l.2] == spec)
                            .map_or("?", |l| &*l.0);
                        Error::Query(format!("network `{}`: layer `{layer}`: {e}", network.name))
                    })
                })
                .collect::<Result<_>>()?,
        };
        let trimmed_ms = self.predict_trimmed(network, context, &unique)?;
        let layers: Vec<LayerPrediction> = network
            .layers
            .iter()
            .zip(&network.trims)
            .map(|((name, module, i), trim)| {
                // A trimmed layer (training only) shows its trim and its own time.
                let (module, ms) = trim
                    .and_then(|k| Some((&network.trimmed[k].module, *trimmed_ms.get(k)?)))
                    .unwrap_or((module, unique[*i].ms));
                LayerPrediction {
                    name: name.clone(),
                    module: module.clone(),
                    prediction: ModulePrediction {
                        ms,
                        ..unique[*i].clone()
                    },
                    fused: Vec::new(),
                }
            })
            .collect();
        let layer_sum_ms: f64 = layers.iter().map(|l| l.prediction.ms).sum();
        let fallback_layers = layers.iter().filter(|l| l.prediction.fallback).count();
        let roofline_ms = match plan.as_ref() {
            Some(plan) => plan.roofline_ms,
            None => self.roofline_of(network, context),
        };
        let composed = self.composition(&network.shape, layer_sum_ms, context, || {
            linear_ms_of(&layers)
        });
        Ok(NetworkPrediction {
            network: network.name.clone(),
            context: context.clone(),
            layers,
            total_ms: composed.as_ref().map_or(layer_sum_ms, |c| c.total_ms),
            layer_sum_ms,
            roofline_ms,
            composed,
            fallback_layers,
            fusion: None,
        })
    }

    /// The sum of the least times the device's spec allows for `network`'s layers in
    /// `context`: a trimmed layer skips part of its backward, so its forward's bounds it.
    fn roofline_of(&self, network: &PreparedNetwork, context: &Context) -> f64 {
        let forward = forward_of(context);
        network
            .layers
            .iter()
            .zip(&network.trims)
            .map(|((_, _, i), trim)| {
                let at = if trim.is_some() { &forward } else { context };
                self.least_ms(&network.unique[*i], at)
            })
            .sum()
    }

    /// `network`'s plan for `context` on this predictor, made on first use and kept in the
    /// network; `None` inside when its distinct modules take the general path (a training
    /// step composed or transferred on a GPU, a query the rows cannot be built for).
    fn context_plan(
        &self,
        network: &PreparedNetwork,
        context: &Context,
    ) -> Arc<Option<ContextPlan>> {
        let key = |(id, c): &(u64, Context)| {
            *id == self.id
                && c.batch == context.batch
                && c.phase == context.phase
                && c.threads == context.threads
                && c.utilisation.to_bits() == context.utilisation.to_bits()
        };
        let lookup = |plans: &Vec<PlanEntry>| {
            plans
                .iter()
                .find(|(k, _)| key(k))
                .map(|(_, p)| Arc::clone(p))
        };
        if network.unique.len() > PLAN_MAX_MODULES {
            return Arc::new(None);
        }
        if let Some(plan) = network.plans.lock().ok().and_then(|p| lookup(&p)) {
            return plan;
        }
        let plan = Arc::new(self.build_plan(network, context));
        if let Ok(mut plans) = network.plans.lock() {
            if plans.len() >= CONTEXT_PLANS {
                plans.clear();
            }
            if lookup(&plans).is_none() {
                plans.push(((self.id, context.clone()), Arc::clone(&plan)));
            }
        }
        plan
    }

    /// What [`Predictor::predict_many`] works out for `network`'s distinct modules in
    /// `context` before any model runs: their canonical queries' feature rows (stand-ins for
    /// those outside the trained ranges), warnings, fallbacks and bounds.
    fn build_plan(&self, network: &PreparedNetwork, context: &Context) -> Option<ContextPlan> {
        let given: Vec<(&ModuleSpec, &Context)> =
            network.unique.iter().map(|s| (s, context)).collect();
        let gpu = self.gpu();
        if gpu
            && given
                .iter()
                .any(|(s, c)| self.composed(s, c) || !self.phase_references(s, c).is_empty())
        {
            return None;
        }
        let canon: Vec<Option<(ModuleSpec, Context)>> = given
            .iter()
            .map(|(s, c)| if gpu { canonical(s, c) } else { None })
            .collect();
        let split: Vec<Option<(Context, f64)>> =
            given.iter().map(|(s, c)| self.per_sample(s, c)).collect();
        let queries: Vec<(&ModuleSpec, &Context)> = given
            .iter()
            .zip(&canon)
            .zip(&split)
            .map(|((q, k), one)| match (k, one) {
                (Some((s, c)), _) => (s, c),
                (None, Some((one, _))) => (q.0, one),
                (None, None) => *q,
            })
            .collect();
        let (kind_of, by_kind) = by_kind(&queries);
        let mut extras = Extras::default();
        let (mut rows, mut phases, mut index, mut chunks) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &k in &self.order {
            for chunk in by_kind[k].chunks(KIND_CHUNK) {
                let (r, i) = (rows.len(), index.len());
                let built = self
                    .build_rows(
                        k,
                        chunk,
                        &queries,
                        None,
                        &mut rows,
                        &mut phases,
                        &mut index,
                        &mut extras,
                    )
                    .ok()?;
                if built {
                    chunks.push((k, r..rows.len(), i..index.len()));
                }
            }
        }
        let encoded = chunks
            .iter()
            .map(|(k, r, i)| self.encode_chunk(*k, &rows[r.clone()], &phases[i.clone()]))
            .collect();
        Some(ContextPlan {
            encoded,
            kinds: queries.iter().map(|(s, _)| s.kind()).collect(),
            // A query split per sample is bounded as asked, as the reference path bounds it.
            floors: queries
                .iter()
                .zip(&given)
                .zip(&split)
                .map(|((q, g), one)| match one {
                    Some(_) => self.least_ms(g.0, g.1),
                    None => self.least_ms(q.0, q.1),
                })
                .collect(),
            calls: split
                .iter()
                .map(|one| one.as_ref().map_or(1.0, |(_, calls)| *calls))
                .collect(),
            kind_of,
            rows,
            phases,
            index,
            chunks,
            extras,
            roofline_ms: self.roofline_of(network, context),
        })
    }

    /// `network`'s distinct modules predicted from their plan: the models run on the rows
    /// kept, answers bounded as [`Predictor::predict_many`] bounds them (the same results).
    fn predict_planned(
        &self,
        network: &PreparedNetwork,
        plan: &ContextPlan,
    ) -> Result<Vec<ModulePrediction>> {
        let mut scratch = SCRATCH.take();
        let Scratch { out, batch, .. } = &mut scratch;
        let mut eval = Eval::new(plan.kinds.len(), out, batch);
        for ((k, r, i), encoded) in plan.chunks.iter().zip(&plan.encoded) {
            self.eval_rows(
                &mut eval,
                *k,
                &plan.rows[r.clone()],
                &plan.phases[i.clone()],
                &plan.index[i.clone()],
                encoded.as_ref(),
            )?;
        }
        let ms = eval.finish();
        SCRATCH.set(scratch);
        self.assemble(plan.kinds.iter().copied(), &plan.kind_of, ms, &plan.extras)
            .into_iter()
            .zip(&plan.calls)
            .zip(&plan.floors)
            .zip(&network.unique)
            .map(|(((mut p, calls), floor), spec)| {
                p.ms *= calls;
                self.bounded_at(p, *floor, spec)
            })
            .collect()
    }

    /// What a run of `shape` in `context` pays for linear layers' weights read from memory
    /// rather than cache ([`crate::compose::uncached_weights_ms`]): inference runs on a device
    /// whose probe measured it; 0 otherwise. `linear_ms` gives the linear layers' predictions
    /// in the network's order, asked for only where the term applies.
    pub fn uncached_weights_ms(
        &self,
        shape: &RunShape,
        context: &Context,
        linear_ms: impl FnOnce() -> Vec<f64>,
    ) -> f64 {
        let device = &self.bundle.manifest.device;
        let cache_bytes = device.cache_mb * 1024.0 * 1024.0;
        let passes_cache = shape.params as f64 * perfcast_core::features::F32_BYTES > cache_bytes;
        match (context.phase, &device.caches.uncached_weights) {
            (Phase::Inference, Some(probe)) if passes_cache && !shape.linears.is_empty() => {
                crate::compose::uncached_weights_ms(
                    shape,
                    context.batch,
                    probe,
                    cache_bytes,
                    &linear_ms(),
                )
            }
            _ => 0.0,
        }
    }

    /// Whether a run of `shape` in `context` is a CPU training step with linear layers that
    /// run one GEMM per sample (whose weight gradients the step writes per sample).
    fn per_sample_steps(&self, shape: &RunShape, context: &Context) -> bool {
        !self.gpu()
            && context.phase == Phase::Training
            && context.batch > 1
            && shape
                .linears
                .iter()
                .any(|l| l.gemm_calls(context.batch) > 1)
    }

    /// The shape of a run of `network` whose layers sum to `layer_sum_ms`, as this
    /// predictor's backend runs it in `context` (with per-sample weight gradients in a CPU
    /// training step): what calibration composes.
    pub fn run_shape(&self, network: &Network, layer_sum_ms: f64, context: &Context) -> RunShape {
        let shape = RunShape::of(network, layer_sum_ms);
        if self.per_sample_steps(&shape, context) {
            shape.with_per_sample_grads(context.batch)
        } else {
            shape
        }
    }

    /// The bundle's host-cost composition of a run of `shape` whose kernels sum to
    /// `layer_sum_ms`, when the bundle is calibrated for the phase (or a GPU training step).
    pub(crate) fn composition(
        &self,
        shape: &RunShape,
        layer_sum_ms: f64,
        context: &Context,
        linear_ms: impl FnOnce() -> Vec<f64>,
    ) -> Option<crate::compose::Composed> {
        let calibrated = self
            .bundle
            .manifest
            .host_costs
            .as_ref()
            .and_then(|c| c.phase(context.phase));
        // A GPU training step never calibrated still pays its input copy and optimiser update.
        let defaults = (calibrated.is_none() && self.gpu() && context.phase == Phase::Training)
            .then(|| crate::compose::PhaseCosts::gpu_defaults(&self.bundle.manifest.device));
        let uncached = self.uncached_weights_ms(shape, context, linear_ms);
        let stepped;
        let shape = if self.per_sample_steps(shape, context) {
            stepped = shape.clone().with_per_sample_grads(context.batch);
            &stepped
        } else {
            shape
        };
        calibrated.or(defaults.as_ref()).map(|c| {
            c.compose_sum(shape, layer_sum_ms, context.batch)
                .with_uncached_weights(uncached)
        })
    }

    /// In a training step, the time of each of `network`'s trimmed layers ([`Trim`]): the
    /// module's training step (`unique`: the distinct modules' predictions) less the backward
    /// kernels the network does not run, each predicted as the forward kernel it is, and never
    /// below the layer's forward pass. Empty in inference and where nothing is trimmed.
    fn predict_trimmed(
        &self,
        network: &PreparedNetwork,
        context: &Context,
        unique: &[ModulePrediction],
    ) -> Result<Vec<f64>> {
        if context.phase != Phase::Training || network.trimmed.is_empty() {
            return Ok(Vec::new());
        }
        let forward = forward_of(context);
        let mut out = Vec::with_capacity(network.trimmed.len());
        for (k, t) in network.trimmed.iter().enumerate() {
            let at_layer = |e: Error| {
                let name = (network.layers.iter().zip(&network.trims))
                    .find(|(_, trim)| **trim == Some(k))
                    .map_or("?", |(l, _)| &*l.0);
                Error::Query(format!("network `{}`: layer `{name}`: {e}", network.name))
            };
            let fwd = self
                .predict_valid(&network.unique[t.unique], &forward)
                .map_err(at_layer)?
                .ms;
            out.push(match &t.trim {
                Trim::ForwardOnly => fwd,
                Trim::Without(parts) => {
                    let mut ms = unique[t.unique].ms;
                    for part in parts {
                        ms -= self.predict_valid(part, &forward).map_err(at_layer)?.ms;
                    }
                    ms.max(fwd)
                }
            });
        }
        Ok(out)
    }

    /// Every layer of `network` in `context`, and their sum ([`Predictor::prepare`] then
    /// [`Predictor::predict_prepared`]).
    pub fn predict_network(
        &self,
        network: &Network,
        context: &Context,
    ) -> Result<NetworkPrediction> {
        self.predict_prepared(&*self.prepared(network)?, context)
    }

    /// [`Predictor::prepare`] through this predictor's cache of networks: a network asked
    /// before (equal in every layer) is not checked again, and keeps its context plans.
    pub fn prepared(&self, network: &Network) -> Result<Arc<PreparedNetwork>> {
        let hit = self
            .networks
            .read()
            .ok()
            .and_then(|n| n.by_network.get(network).cloned());
        if let Some(p) = hit {
            return Ok(p);
        }
        let p = Arc::new(self.prepare(network)?);
        if let Ok(mut n) = self.networks.write() {
            if n.by_network.len() >= NETWORK_PLANS
                || n.layers + network.layers.len() > NETWORK_PLAN_LAYERS
            {
                *n = NetworkPlans::default();
            }
            if network.layers.len() <= NETWORK_PLAN_LAYERS
                && n.by_network
                    .insert(network.clone(), Arc::clone(&p))
                    .is_none()
            {
                n.layers += network.layers.len();
            }
        }
        Ok(p)
    }
}

/// What predicting a prepared network's distinct modules in one context needs before any
/// model runs ([`Predictor::build_plan`]): a repeated query only runs the models.
#[derive(Debug)]
struct ContextPlan {
    /// Per distinct module: the kind of its (canonical) query and its index in
    /// `ModuleKind::ALL`.
    kinds: Vec<ModuleKind>,
    kind_of: Vec<usize>,
    /// Per distinct module: the calls its answer is multiplied by (a CPU linear layer run
    /// once per sample, [`per_sample_calls`]; 1 otherwise).
    calls: Vec<f64>,
    /// Per distinct module: the least time the spec allows its (canonical) query.
    floors: Vec<f64>,
    /// The rows models read, their phases and distinct modules, one after another.
    rows: Vec<f64>,
    /// Per chunk whose kind's MEDN runs in its group's batch: its rows encoded for the
    /// network, so a repeat does not encode them again.
    encoded: Vec<Option<EncodedRows>>,
    phases: Vec<Phase>,
    index: Vec<usize>,
    /// Per run of one kind: its index in `ModuleKind::ALL`, its values in `rows` and its
    /// entries in `phases` and `index`, in the order the models take them.
    chunks: Vec<(usize, Range<usize>, Range<usize>)>,
    extras: Extras,
    /// The network's bound ([`Predictor::roofline_of`]).
    roofline_ms: f64,
}

/// A prepared network's plan for one predictor (its `id`) and context.
type PlanEntry = ((u64, Context), Arc<Option<ContextPlan>>);

/// Per predictor and context, a prepared network's plans.
type ContextPlans = Mutex<Vec<PlanEntry>>;

/// How many calls burn's CPU backends make for a module over `batch` samples where they run
/// one per sample, `None` where they run one for the whole batch: a linear layer whose
/// matmul policy keeps the samples apart ([`crate::compose::linear_gemm_rows`]). Its answer is
/// that many times the same layer's at batch 1: a model reading the whole batch as one GEMM's
/// rows would miss what every call repeats (the weights read and packed again).
pub fn per_sample_calls(spec: &ModuleSpec, batch: usize) -> Option<usize> {
    match spec {
        ModuleSpec::Linear(l)
            if batch > 1
                && crate::compose::linear_gemm_rows(batch, l.tokens, l.out_features)
                    == l.tokens =>
        {
            Some(batch)
        }
        _ => None,
    }
}

/// The samples of a CPU conv's training step when its weight gradient runs on flex's
/// small-channel direct path (a dense conv to at most 16 outputs at batch 2 to 4, the
/// `wgrad_small_channel` feature): that loop's work is the batch times one sample's and it
/// is most of the step, so the step is predicted as the batch-1 step that many times. A
/// model reading the batch as it reads a GEMM's rows grows the step less than the batch
/// (docs/accuracy.md, "SqueezeNet layer by layer").
pub fn direct_weight_gradient(spec: &ModuleSpec, context: &Context) -> Option<usize> {
    match spec {
        ModuleSpec::Conv2d(c)
            if context.phase == Phase::Training
                && c.groups == 1
                && context.batch >= 2
                && crate::features::wgrad_on_direct_path(c, context.batch) =>
        {
            Some(context.batch)
        }
        _ => None,
    }
}

/// The query's canonical form ([`canonical`]), or the query as given where it has none.
fn canonical_or_given<'a>(
    spec: &'a ModuleSpec,
    context: &'a Context,
) -> (Cow<'a, ModuleSpec>, Cow<'a, Context>) {
    canonical(spec, context).map_or((Cow::Borrowed(spec), Cow::Borrowed(context)), |(s, c)| {
        (Cow::Owned(s), Cow::Owned(c))
    })
}

/// `context` in the inference phase: the forward pass of the same query.
pub(crate) fn forward_of(context: &Context) -> Context {
    Context {
        phase: Phase::Inference,
        ..context.clone()
    }
}

/// The backward pass of `spec` at `batch` as forward kernels, each with the batch it runs at
/// (see [`Predictor::predict_composed`]).
fn backward_parts(spec: &ModuleSpec, batch: usize) -> Vec<(ModuleSpec, usize)> {
    let parts = match spec {
        // dX is a convolution of dY with the flipped kernel, channels swapped: over the
        // output's pixels at stride 1, the forward's multiply count. dW = dY^T im2col(X): per
        // group a GEMM of Cout/g x Cin/g*kh*kw reducing over every output pixel of the batch.
        ModuleSpec::Conv2d(c) => {
            let out_hw = match spec.output_shape() {
                Ok(s) if s.len() == 3 => [s[1], s[2]],
                _ => c.input_hw,
            };
            let g = c.groups.max(1);
            let dgrad = ModuleSpec::Conv2d(perfcast_core::Conv2d {
                in_channels: c.out_channels,
                out_channels: c.in_channels,
                input_hw: out_hw,
                kernel: c.kernel,
                stride: [1, 1],
                padding: [
                    c.dilation[0] * (c.kernel[0] - 1) / 2,
                    c.dilation[1] * (c.kernel[1] - 1) / 2,
                ],
                dilation: c.dilation,
                groups: g,
                bias: false,
            });
            let pixels = batch * out_hw[0] * out_hw[1];
            let patch = c.in_channels / g * c.kernel[0] * c.kernel[1];
            let wgrad = if g == 1 {
                ModuleSpec::Linear(perfcast_core::Linear {
                    tokens: c.out_channels,
                    in_features: pixels,
                    out_features: patch,
                    bias: false,
                })
            } else {
                ModuleSpec::Matmul(perfcast_core::Matmul {
                    heads: g,
                    m: c.out_channels / g,
                    k: pixels,
                    n: patch,
                    trans_a: false,
                    trans_b: true,
                })
            };
            return vec![(dgrad, batch), (wgrad, 1)];
        }
        // X: rows x in, W: in x out. dX = dY (rows x out) W^T (out x in); dW = X^T (in x rows)
        // dY (rows x out).
        ModuleSpec::Linear(l) => vec![
            ModuleSpec::Linear(perfcast_core::Linear {
                tokens: l.tokens,
                in_features: l.out_features,
                out_features: l.in_features,
                bias: false,
            }),
            ModuleSpec::Linear(perfcast_core::Linear {
                tokens: l.in_features,
                in_features: l.tokens,
                out_features: l.out_features,
                bias: false,
            }),
        ],
        // A: m x k, B: k x n. dA = dC (m x n) B^T (n x k); dB = A^T (k x m) dC (m x n).
        ModuleSpec::Matmul(m) => vec![
            ModuleSpec::Matmul(perfcast_core::Matmul {
                heads: m.heads,
                m: m.m,
                k: m.n,
                n: m.k,
                trans_a: false,
                trans_b: true,
            }),
            ModuleSpec::Matmul(perfcast_core::Matmul {
                heads: m.heads,
                m: m.k,
                k: m.m,
                n: m.n,
                trans_a: true,
                trans_b: false,
            }),
        ],
        other => vec![other.clone()],
    };
    parts.into_iter().map(|p| (p, batch)).collect()
}

/// What a network's backward pass leaves out of a layer's training step when an operand
/// carries no gradient ([`Network::operand_gradients`]: it is the network input, or only
/// parameter-free layers lie between it and the input). Modules are timed alone with every
/// operand a trainable leaf, so their training steps include these kernels.
///
/// Only what is known exactly is trimmed: a GEMM's operand gradient is one GEMM of the
/// forward's work (dX = dY W^T of a linear; dA, dB of a matmul), and a parameter-free layer
/// with no gradient to pass on runs no backward at all. A convolution's input gradient is
/// left in: its cost is not the forward's (a first conv on 3 channels unfolds far fewer
/// columns), and charging it as one forward pass made every CNN's training prediction worse
/// (docs/accuracy.md). BERT's block is where it matters: Q, K and V read the input, and the
/// three dX GEMMs are about 9% of its step on a CPU.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Trim {
    /// No backward: the step is the forward pass.
    ForwardOnly,
    /// The step less these backward kernels, each predicted as a forward pass.
    Without(Vec<ModuleSpec>),
}

impl Trim {
    /// The trim of `spec` whose operands carry gradients as `grads` says, if any.
    fn of(spec: &ModuleSpec, grads: [bool; 2]) -> Option<Trim> {
        if spec.kind().is_zero_cost() {
            return None;
        }
        // Parameters matter only where no gradient flows in (most layers skip the derive:
        // this runs for every layer a network is prepared with).
        if !grads[0] && !grads[1] && features::derive(spec, 1).params == 0.0 {
            return Some(Trim::ForwardOnly);
        }
        // `backward_parts`' batches are dropped: the parts are predicted at the query's batch,
        // as `predict_composed` predicts a linear's and a matmul's.
        let parts: Vec<ModuleSpec> = match spec {
            ModuleSpec::Linear(_) if !grads[0] => {
                vec![backward_parts(spec, 1).swap_remove(0).0]
            }
            ModuleSpec::Matmul(_) => backward_parts(spec, 1)
                .into_iter()
                .zip(grads)
                .filter(|(_, carries)| !carries)
                .map(|((part, _), _)| part)
                .collect(),
            _ => Vec::new(),
        };
        (!parts.is_empty()).then_some(Trim::Without(parts))
    }

    /// The trim in words, after the module's description.
    fn describe(&self) -> &'static str {
        match self {
            Trim::ForwardOnly => "no backward",
            Trim::Without(_) => "no input gradient",
        }
    }
}

/// A distinct module of a network, trimmed.
#[derive(Clone, Debug)]
struct Trimmed {
    /// Index into the prepared network's distinct modules.
    unique: usize,
    trim: Trim,
    /// The module's description with the trim's.
    module: Arc<str>,
}

/// A network checked once, with its distinct modules found ([`Predictor::prepare`]).
#[derive(Clone, Debug)]
pub struct PreparedNetwork {
    name: String,
    /// Per layer: name, description (shared by the layers of one module and by every
    /// prediction), index into `unique`.
    pub(crate) layers: Vec<(Arc<str>, Arc<str>, usize)>,
    pub(crate) unique: Vec<ModuleSpec>,
    /// Per layer: its index into `trimmed`, when its training step in the network runs less
    /// backward than the module timed alone.
    pub(crate) trims: Vec<Option<usize>>,
    /// The distinct trimmed modules.
    trimmed: Vec<Trimmed>,
    /// Layers and parameter tensors, for the host-cost composition.
    pub(crate) shape: RunShape,
    /// Plans per predictor and context, shared by clones.
    plans: Arc<ContextPlans>,
}

impl PreparedNetwork {
    /// Layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Distinct modules among the layers.
    pub fn distinct_modules(&self) -> usize {
        self.unique.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::Conv2d;

    #[test]
    fn a_conv_backward_is_two_passes_of_the_forward_work() {
        // dX and dW each multiply as often as the forward pass, whatever the stride and groups.
        for (stride, groups, kernel) in [(1, 1, 3), (2, 1, 3), (1, 32, 3), (2, 1, 1), (1, 1, 5)] {
            let spec = ModuleSpec::Conv2d(Conv2d {
                in_channels: 64,
                out_channels: 128,
                input_hw: [56, 56],
                kernel: [kernel, kernel],
                stride: [stride, stride],
                padding: [kernel / 2, kernel / 2],
                dilation: [1, 1],
                groups,
                bias: false,
            });
            let batch = 8;
            let forward = perfcast_core::features::derive(&spec, batch).flops;
            let parts = backward_parts(&spec, batch);
            assert_eq!(parts.len(), 2);
            for (part, b) in &parts {
                part.validate().unwrap();
                let flops = perfcast_core::features::derive(part, *b).flops;
                let ratio = flops / forward;
                assert!(
                    (0.98..=1.02).contains(&ratio),
                    "{}: {ratio}",
                    part.describe()
                );
            }
        }
    }

    #[test]
    fn the_predictor_is_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Predictor>();
        shareable::<PreparedNetwork>();
    }
}

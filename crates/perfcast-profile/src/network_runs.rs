//! Whole networks measured one run after another (`perfcast measure`, the runs behind
//! `calibrate` and `eval networks`), and network-aware profiling: the distinct layers of some
//! networks timed alone and stored in a module dataset, so the module models know exactly the
//! layers those networks use.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use perfcast_core::progress::Observer;
use perfcast_core::{Context, CpuTopology, Network, NetworkChoice, Phase};
use perfcast_data::networks::{NetworkRecord, append_networks};
use perfcast_data::{DatasetDir, Outcome, Record, Timing, measurement_key};

use crate::Backend;
use crate::canary::{Canary, CanaryConfig, CanaryReport, settle, slow_stretches};
use crate::error::{Error, Result};
use crate::network::{measure, measure_layers, network_timing};
use crate::timer::TimingConfig;

/// The progress stage of [`measure_networks`].
pub const MEASURE_STAGE: &str = "measure";

/// The progress stage of [`profile_layers`].
pub const LAYERS_STAGE: &str = "layers";

/// How to measure networks.
#[derive(Clone, Debug)]
pub struct MeasurePlan {
    /// Batch sizes.
    pub batch: Vec<usize>,
    /// Phases (a training step is forward, backward and the SGD update).
    pub phases: Vec<Phase>,
    /// Compute threads.
    pub threads: usize,
    /// Backend to run on.
    pub backend: Backend,
    /// Time cap per configuration after warm-up, seconds (at least 5 runs are timed).
    pub max_time_s: f64,
    /// Append every measurement to this JSON-lines file.
    pub save: Option<PathBuf>,
    /// Also time every distinct layer alone and record their sum.
    pub layers: bool,
    /// Append those per-layer timings to this module dataset (implies `layers`).
    pub layers_into: Option<PathBuf>,
}

impl MeasurePlan {
    /// What host-cost calibration measures: both phases at `batch`, one thread on flex, a
    /// second per configuration, nothing saved.
    pub fn calibration(batch: Vec<usize>) -> MeasurePlan {
        MeasurePlan {
            batch,
            phases: vec![Phase::Inference, Phase::Training],
            threads: 1,
            backend: Backend::Flex,
            max_time_s: 1.0,
            save: None,
            layers: false,
            layers_into: None,
        }
    }
}

/// The heap high-water mark, where the caller counts allocations (the `perfcast` binary's
/// global allocator); [`NoPeak`] elsewhere.
pub trait PeakMemory {
    /// Starts a new peak; returns the baseline that [`PeakMemory::peak_since`] counts above.
    fn reset(&self) -> usize;
    /// Most bytes live since the last [`PeakMemory::reset`] above `live_before`, or `None`
    /// when not counted.
    fn peak_since(&self, live_before: usize) -> Option<u64>;
}

/// No allocation counting.
pub struct NoPeak;

impl PeakMemory for NoPeak {
    fn reset(&self) -> usize {
        0
    }
    fn peak_since(&self, _: usize) -> Option<u64> {
        None
    }
}

/// One network run measured.
#[derive(Clone, Debug)]
pub struct MeasuredNetwork {
    /// The network's label (`vgg16@112`).
    pub label: String,
    /// The measurement, as stored.
    pub record: NetworkRecord,
    /// Most heap bytes live during the run above what was live before it: the network's
    /// weights, optimiser state, activations, gradients and the backend's buffers, over the
    /// warm-up and every timed run (`None` without allocation counting).
    pub peak_bytes: Option<u64>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Measures every (network, phase, batch) of `plan` end to end, saving each run as it
/// finishes; progress: stage [`MEASURE_STAGE`]; a warning goes to `observer` when other
/// processes keep the cores busy.
pub fn measure_networks(
    nets: &[NetworkChoice],
    plan: &MeasurePlan,
    peak: &dyn PeakMemory,
    observer: &dyn Observer,
) -> Result<Vec<MeasuredNetwork>> {
    if !plan.batch.iter().all(|&b| b >= 1) {
        return Err(Error::Input("`--batch` values must be at least 1".into()));
    }
    if plan.threads < 1 {
        return Err(Error::Input("`--threads` must be at least 1".into()));
    }
    if !(plan.max_time_s.is_finite() && plan.max_time_s > 0.0) {
        return Err(Error::Input(format!(
            "`--max-time-s` must be a positive number of seconds, got {}",
            plan.max_time_s
        )));
    }
    if !plan.backend.available() {
        plan.backend.device()?; // the backend's own error says how to get it
    }
    let timing = network_timing(plan.max_time_s);
    if let Some(warning) = crate::probe::busy_warning() {
        observer.note(&warning);
    }
    let module_timing = TimingConfig::default();
    let dataset = match &plan.layers_into {
        Some(dir) => Some(DatasetDir::open(dir)?),
        None => None,
    };
    let device = CpuTopology::detect().model;
    let total = nets.len() * plan.batch.len() * plan.phases.len();
    observer.begin(MEASURE_STAGE, total as u64);
    let mut out = Vec::with_capacity(total);
    for net in nets {
        for &phase in &plan.phases {
            for &batch in &plan.batch {
                observer.message(
                    MEASURE_STAGE,
                    &format!("{} batch {batch} {}", net.label, phase.name()),
                );
                let context = Context {
                    batch,
                    phase,
                    threads: plan.threads,
                    utilisation: 0.0,
                };
                context.validate()?;
                let before = peak.reset();
                let measured =
                    measure(&net.network, &context, plan.backend, &timing).map_err(|e| {
                        Error::Input(format!(
                            "measuring `{}` at batch {batch} ({phase}): {e}",
                            net.label
                        ))
                    })?;
                let peak_bytes = peak.peak_since(before);
                let layer_times = if plan.layers || dataset.is_some() {
                    observer.message(
                        MEASURE_STAGE,
                        &format!("{} batch {batch} {}: layers alone", net.label, phase.name()),
                    );
                    let t = measure_layers(&net.network, &context, plan.backend, &module_timing)
                        .map_err(|e| Error::Input(format!("measuring `{}`: {e}", net.label)))?;
                    if let Some(ds) = &dataset {
                        save_layers(ds, &net.network, &context, plan.backend, &t)?;
                    }
                    Some(t)
                } else {
                    None
                };
                let record = NetworkRecord {
                    network: net.network.clone(),
                    resolution: net.resolution,
                    batch,
                    phase,
                    threads: plan.threads,
                    backend: plan.backend.name().to_string(),
                    device: device.clone(),
                    layers: measured.counts.layers,
                    param_tensors: measured.counts.param_tensors,
                    params: measured.counts.params,
                    timing: measured.timing,
                    update_ms: measured.update_ms,
                    layer_sum_ms: layer_times
                        .as_ref()
                        .map(|ts| ts.iter().map(|t| t.median_ms).sum::<f64>()),
                    layer_ms: layer_times.map(|ts| ts.iter().map(|t| t.median_ms).collect()),
                    perfcast_version: perfcast_core::VERSION.to_string(),
                    timestamp: now(),
                };
                if let Some(path) = &plan.save {
                    append_networks(path, std::slice::from_ref(&record))?;
                }
                out.push(MeasuredNetwork {
                    label: net.label.clone(),
                    record,
                    peak_bytes,
                });
                observer.advance(MEASURE_STAGE, 1);
            }
        }
    }
    observer.end(MEASURE_STAGE);
    Ok(out)
}

/// Appends the distinct layers' timings to a module dataset, skipping rows it holds.
pub fn save_layers(
    dataset: &DatasetDir,
    network: &Network,
    context: &Context,
    backend: Backend,
    times: &[Timing],
) -> Result<()> {
    let mut by_kind: BTreeMap<_, Vec<Record>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for (layer, t) in network.layers.iter().zip(times) {
        let key = measurement_key(&layer.spec, context, backend.name());
        if !seen.insert(key) {
            continue;
        }
        by_kind.entry(layer.spec.kind()).or_default().push(Record {
            spec: layer.spec.clone(),
            context: context.clone(),
            backend: backend.name().to_string(),
            outcome: Outcome::Ok(t.clone()),
            perfcast_version: perfcast_core::VERSION.to_string(),
            timestamp: now(),
        });
    }
    for (kind, records) in by_kind {
        // Rows the dataset already holds are not stored again (append checks the keys).
        dataset.append(kind, &records)?;
    }
    Ok(())
}

/// What [`profile_layers`] did.
#[derive(Clone, Debug, Default)]
pub struct LayersProfiled {
    /// Layer configurations timed.
    pub timed: usize,
    /// What the interference canary saw between the blocks of layers and what was measured
    /// again.
    pub canary: CanaryReport,
}

/// One network's fresh layers at one batch and phase, with every visit of each layer.
struct LayerBlock {
    network: Network,
    context: Context,
    visits: Vec<Vec<(Timing, usize)>>,
}

/// Times every distinct layer of `nets` alone at each batch, in both phases, as `profile`
/// times modules, and appends the rows `dataset` does not hold yet (network-aware profiling:
/// the module models then know exactly the layers these networks use). The interference
/// canary is read between blocks (one network at one batch and phase): blocks it found
/// disturbed are timed again as `profile` re-measures rows, up to the canary's budget share
/// of the time spent and at most until `remeasure_until`, and their rows keep their fastest
/// clean visit ([`settle`]). Progress: stage [`LAYERS_STAGE`].
pub fn profile_layers(
    nets: &[NetworkChoice],
    batches: &[usize],
    threads: usize,
    dataset: &Path,
    remeasure_until: Option<Instant>,
    observer: &dyn Observer,
) -> Result<LayersProfiled> {
    let ds = DatasetDir::open(dataset)?;
    if let Some(warning) = crate::probe::busy_warning() {
        observer.note(&warning);
    }
    // Shorter than `profile`'s rules, because a network's layers are many and mostly large,
    // where a median of 3 samples is already as repeatable as big ops get.
    let timing = TimingConfig {
        min_samples: 3,
        max_time_s: 0.2,
        warmup_s: 0.02,
        ..TimingConfig::default()
    };
    let started = Instant::now();
    let config = CanaryConfig::default();
    let canary = Canary::new(Backend::Flex);
    let mut readings = vec![canary.read()];
    let mut blocks: Vec<LayerBlock> = Vec::new();
    let phases = [Phase::Inference, Phase::Training];
    observer.begin(
        LAYERS_STAGE,
        (nets.len() * batches.len() * phases.len()) as u64,
    );
    let mut timed = 0;
    for net in nets {
        for &batch in batches {
            for phase in phases {
                observer.message(
                    LAYERS_STAGE,
                    &format!("{} batch {batch} {}", net.label, phase.name()),
                );
                let context = Context {
                    batch,
                    phase,
                    threads,
                    utilisation: 0.0,
                };
                context.validate()?;
                // Skip layers already stored: a rerun (or a second network sharing layers)
                // measures only what is new.
                let mut stored = HashMap::new();
                let mut layers = Vec::new();
                for l in &net.network.layers {
                    let kind = l.spec.kind();
                    let keys = match stored.entry(kind) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(ds.measured_keys(kind)?)
                        }
                    };
                    let key = measurement_key(&l.spec, &context, Backend::Flex.name());
                    if !keys.contains(&key) {
                        layers.push(l.clone());
                    }
                }
                let fresh = Network {
                    layers,
                    ..net.network.clone()
                };
                if !fresh.layers.is_empty() {
                    let t = measure_block(&fresh, &context, &timing, &net.label)?;
                    timed += t.len();
                    save_layers(&ds, &fresh, &context, Backend::Flex, &t)?;
                    let stretch = readings.len() - 1;
                    readings.push(canary.read());
                    blocks.push(LayerBlock {
                        network: fresh,
                        context,
                        visits: t.into_iter().map(|t| vec![(t, stretch)]).collect(),
                    });
                }
                observer.advance(LAYERS_STAGE, 1);
            }
        }
    }
    // Blocks measured while the canary read slow, timed again (once per retry) in stretches
    // of their own.
    let budget_s = config.remeasure_budget_s(started.elapsed().as_secs_f64(), remeasure_until);
    let remeasuring = Instant::now();
    let slow_at_first = slow_stretches(&readings, config.tolerance);
    // Counted in layer rows, as `profile` counts rows.
    let disturbed = blocks
        .iter()
        .filter(|b| slow_at_first[b.visits[0][0].1])
        .map(|b| b.visits.len())
        .sum();
    let mut remeasured = HashSet::new();
    'retries: for _ in 0..config.retries {
        let slow = slow_stretches(&readings, config.tolerance);
        for (i, block) in blocks.iter_mut().enumerate() {
            if !block.visits[0].iter().all(|(_, s)| slow[*s]) {
                continue;
            }
            if remeasuring.elapsed().as_secs_f64() > budget_s {
                break 'retries;
            }
            observer.message(
                LAYERS_STAGE,
                &format!(
                    "{} batch {} {} again (disturbed)",
                    block.network.name,
                    block.context.batch,
                    block.context.phase.name()
                ),
            );
            let t = measure_block(&block.network, &block.context, &timing, &block.network.name)?;
            let stretch = readings.len() - 1;
            readings.push(canary.read());
            for (visits, t) in block.visits.iter_mut().zip(t) {
                visits.push((t, stretch));
            }
            remeasured.insert(i);
        }
    }
    let all: Vec<&[(Timing, usize)]> = blocks
        .iter()
        .flat_map(|b| b.visits.iter().map(Vec::as_slice))
        .collect();
    let settled = settle(&all, &readings, config.tolerance);
    let mut kept = settled.kept.iter();
    let mut replace: BTreeMap<_, HashMap<String, Timing>> = BTreeMap::new();
    for block in &blocks {
        for (layer, visits) in block.network.layers.iter().zip(&block.visits) {
            let Some(t) = kept.next().and_then(Option::as_ref) else {
                continue;
            };
            if visits.len() > 1 || *t != visits[0].0 {
                let key = measurement_key(&layer.spec, &block.context, Backend::Flex.name());
                replace
                    .entry(layer.spec.kind())
                    .or_default()
                    .insert(key, t.clone());
            }
        }
    }
    for (kind, timings) in replace {
        ds.replace_timings(kind, &timings)?;
    }
    observer.end(LAYERS_STAGE);
    Ok(LayersProfiled {
        timed,
        canary: CanaryReport::of(
            &readings,
            &settled,
            disturbed,
            remeasured.iter().map(|&i| blocks[i].visits.len()).sum(),
            false,
        ),
    })
}

/// One block of layers timed, a failure named by the network.
fn measure_block(
    network: &Network,
    context: &Context,
    timing: &TimingConfig,
    label: &str,
) -> Result<Vec<Timing>> {
    measure_layers(network, context, Backend::Flex, timing)
        .map_err(|e| Error::Input(format!("measuring `{label}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::ModuleKind;
    use perfcast_core::progress::Silent;

    #[test]
    fn a_networks_layers_are_stored_once_with_the_canary_read_between_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let device = perfcast_core::testing::cpu_device();
        let ds = DatasetDir::create_or_open(tmp.path(), &device).unwrap();
        let nets = [NetworkChoice::zoo("lenet5@28", None).unwrap()];
        let done = profile_layers(&nets, &[1, 2], 1, tmp.path(), None, &Silent).unwrap();
        // LeNet-5's layers at two batches in two phases: four blocks, a reading around each
        // (and one more per block measured again, if the machine was busy meanwhile).
        assert!(done.timed > 0);
        let c = &done.canary;
        assert!(c.readings_ms.len() >= 5, "{c:?}");
        assert!(
            c.remeasured <= c.disturbed && c.still_disturbed <= c.disturbed,
            "{c:?}"
        );
        let convs = ds.read(ModuleKind::Conv2d).unwrap();
        let distinct: HashSet<_> = nets[0]
            .network
            .layers
            .iter()
            .filter(|l| l.spec.kind() == ModuleKind::Conv2d)
            .map(|l| &l.spec)
            .collect();
        assert_eq!(convs.len(), distinct.len() * 4);
        assert!(
            convs
                .iter()
                .all(|r| r.timing().is_some_and(|t| t.median_ms > 0.0))
        );
        // Every row is stored once: a second run times nothing, so reads no canary between
        // blocks either.
        let again = profile_layers(&nets, &[1, 2], 1, tmp.path(), None, &Silent).unwrap();
        assert_eq!(again.timed, 0);
        assert_eq!(again.canary.readings_ms.len(), 1);
        assert_eq!(ds.read(ModuleKind::Conv2d).unwrap().len(), convs.len());
    }
}

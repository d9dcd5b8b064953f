//! Planning a training job: for every device, GPU count and parallel layout (data x tensor x
//! pipeline = GPUs), the step time with its breakdown, the peak memory per GPU, whether it
//! fits, throughput and cost.
//!
//! A layout `dp x tp x pp` on `g = dp tp pp` GPUs of one kind:
//!
//! - Each of `dp` replicas takes `ceil(B / dp)` of the global batch `B`, in `m` micro-batches
//!   of `ceil(B / (dp m))` (gradient accumulation without a pipeline; the pipeline's
//!   micro-batches with one).
//! - The network is split `tp` ways ([`crate::parallel::tensor_parallel`]); the compute of
//!   every layer of the split network at the micro-batch comes from a [`LayerTimes`] source
//!   (the CLI plugs in a bundle's predictor for the device), and the TP all-reduces are added
//!   per micro-batch over the link inside a node.
//! - The split network is cut into `pp` stages balanced by those times; a stage's time per
//!   micro-batch is its compute plus its TP communication plus sending its activation forward
//!   and its gradient backward. A micro-batch passes through every stage once and the slowest
//!   stage paces the other `m - 1`: the step takes the sum of the stage times plus `m - 1`
//!   times the slowest, which is `(m + pp - 1)` slots of it when the stages are balanced; `m`
//!   slots of the slowest stage are compute (and TP/PP communication), the rest the bubble.
//!   One micro-batch is the serial schedule: forward through every stage, then backward.
//! - The gradients of the slowest stage are all-reduced over the `dp` replicas in buckets that
//!   overlap the last micro-batch's backward pass (as [`crate::analytic`] does), and the
//!   optimiser update streams the device's parameters and state through its memory.
//! - Peak memory per GPU ([`crate::memory`]) is the worst stage's: its weights, gradients and
//!   optimiser state, and the activations of the micro-batches it holds (1 without a pipeline,
//!   `m` under GPipe, up to `pp` under 1F1B), plus a runtime reserve; a plan fits when that is
//!   at most `max_memory_fraction` of the device's memory.
//!
//! For each layout and schedule the planner tries the micro-batch counts (powers of two up to
//! the replica's batch, or only the count given) and, unless told, recomputation (none, selective, full), and keeps the
//! fastest combination that fits, or the smallest one when none does. Plans are sorted by time
//! or cost; the fitting plans not beaten on both time and cost by another form the Pareto front.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use perfcast_core::fusion::Fusion;
use perfcast_core::{DeviceSpec, Network, slugify};
use serde::{Deserialize, Serialize};

use crate::analytic::{LayerCost, Optimizer, Overlap, buckets};
use crate::collective::ring_allreduce_s;
use crate::collective::{InterNode, Strategy};
use crate::error::{Error, Result};
use crate::link::{Link, PRESETS};
use crate::measured::Collectives;
use crate::memory::{GIB, Graph, MemoryConfig, MemoryEstimate, Recompute, Tensor, stage_peak};
use crate::parallel::{Schedule, TensorParallel, partition, tensor_parallel};

/// Per-layer compute of a network on one device.
pub trait LayerTimes {
    /// Per layer of `network`, in order: (forward seconds, backward seconds) at `batch`
    /// samples.
    fn layer_times(&self, network: &Network, batch: usize) -> Result<Vec<(f64, f64)>>;
}

impl<F> LayerTimes for F
where
    F: Fn(&Network, usize) -> Result<Vec<(f64, f64)>>,
{
    fn layer_times(&self, network: &Network, batch: usize) -> Result<Vec<(f64, f64)>> {
        self(network, batch)
    }
}

/// The links a device is planned over, as reports name them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceLinks {
    /// The device as the user named it.
    pub device: String,
    /// The link between GPUs inside a node.
    pub link: Link,
    /// The link of a plan on two GPUs, where a bridge joins pairs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_link: Option<Link>,
}

/// One kind of device to plan on.
pub struct DeviceOption<'a> {
    /// The name the user gave (`a100`), for tables and price look-ups.
    pub label: String,
    /// Its spec (memory, bandwidth).
    pub spec: DeviceSpec,
    /// The link between GPUs inside a node.
    pub link: Link,
    /// A faster link that joins only pairs of GPUs (an NVLink bridge): a plan on two GPUs
    /// runs over it, larger ones over `link`.
    pub pair_link: Option<Link>,
    /// On-demand price per GPU-hour, where known.
    pub price_per_gpu_hour: Option<f64>,
    /// Per-layer compute on it.
    pub compute: &'a dyn LayerTimes,
}

/// How plans are sorted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// Fastest step first.
    #[default]
    Time,
    /// Cheapest 1,000 steps first (plans without a price last).
    Cost,
}

/// What to plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanConfig {
    /// Samples per step over all GPUs.
    pub global_batch: usize,
    /// GPU counts to try.
    pub gpus: Vec<usize>,
    /// Optimiser: its state in memory and its update's traffic.
    pub optimizer: Optimizer,
    /// Bytes per activation element and per parameter (4: fp32, what the bundles predict).
    pub activation_bytes: f64,
    /// Share of a GPU's memory a plan may use.
    pub max_memory_fraction: f64,
    /// Recomputation; `None` tries none, selective and full and keeps the best that fits.
    pub recompute: Option<Recompute>,
    /// Sequence parallelism with tensor parallelism (memory only; same traffic).
    pub sequence_parallel: bool,
    /// GPUs per node: TP and PP groups stay inside one; DP beyond it crosses `inter_link`.
    pub gpus_per_node: usize,
    /// The link between nodes.
    pub inter_link: Link,
    /// Overlap of the gradient all-reduce with the backward pass.
    pub overlap: Overlap,
    /// Runtime reserve per GPU, bytes.
    pub reserve_bytes: f64,
    /// Sort order.
    pub sort: SortBy,
    /// Micro-batches per replica per step; `None` tries powers of two and keeps the best.
    #[serde(default)]
    pub micro_batches: Option<usize>,
    /// Collectives fitted to measured timings: they price the all-reduces and sends inside a
    /// node they cover; `None` (default) prices every collective by the link formula.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<Collectives>,
    /// How the framework fuses the network's layers into kernels (default none: eager). The
    /// compute source predicts the fused kernels; under a policy that runs attention as one
    /// kernel no score matrix is kept for the backward pass (it is recomputed inside it).
    #[serde(default)]
    pub fusion: Fusion,
    /// The framework's host work per GPU, which the GPUs run behind: a floor on the step
    /// (`None`: no floor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostDispatch>,
}

/// A framework's host work in a training step on one GPU: launching its layers' kernels for
/// every micro-batch, the loss, the optimiser. The GPU runs behind the host, so a step takes at
/// least this long whatever its kernels take.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostDispatch {
    /// Per step, seconds.
    pub per_step_s: f64,
    /// Per layer and micro-batch, seconds.
    pub per_layer_s: f64,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            global_batch: 256,
            gpus: vec![1, 2, 4, 8],
            optimizer: Optimizer::Adam,
            activation_bytes: 4.0,
            max_memory_fraction: 0.9,
            recompute: None,
            sequence_parallel: false,
            gpus_per_node: 8,
            inter_link: Link::preset("infiniband").unwrap_or_else(|| Link {
                name: "infiniband".into(),
                bandwidth_gbs: 25.0,
                latency_us: 9.6,
            }),
            overlap: Overlap::default(),
            reserve_bytes: crate::memory::GPU_RESERVE_BYTES,
            sort: SortBy::Time,
            micro_batches: None,
            collectives: None,
            fusion: Fusion::None,
            host: None,
        }
    }
}

/// A parallel layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Data-parallel replicas.
    pub dp: usize,
    /// Tensor-parallel degree.
    pub tp: usize,
    /// Pipeline stages.
    pub pp: usize,
    /// Pipeline schedule (`None` without a pipeline).
    pub schedule: Option<Schedule>,
    /// Micro-batches per replica per step.
    pub micro_batches: usize,
    /// Samples per micro-batch.
    pub micro_batch: usize,
}

impl Layout {
    /// `dp2 tp2 pp2 1f1b m8` style.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, v) in [("dp", self.dp), ("tp", self.tp), ("pp", self.pp)] {
            if v > 1 {
                parts.push(format!("{name}{v}"));
            }
        }
        if parts.is_empty() {
            parts.push("single".into());
        }
        // With one micro-batch every schedule is the same serial one.
        match self.schedule {
            Some(_) if self.micro_batches == 1 => parts.push("serial".into()),
            Some(s) => parts.push(s.name().into()),
            None => {}
        }
        // A pipeline names even one micro-batch: that is its serial schedule.
        if self.micro_batches > 1 || self.pp > 1 {
            parts.push(format!("m{}x{}", self.micro_batches, self.micro_batch));
        }
        parts.join(" ")
    }
}

/// One plan: a device, a GPU count and a layout, predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanRow {
    /// The device as the user named it.
    pub device: String,
    /// Its full name.
    pub device_name: String,
    /// GPUs.
    pub gpus: usize,
    /// The layout.
    pub layout: Layout,
    /// `dp2 tp2 ...`.
    pub layout_name: String,
    /// Recomputation chosen.
    pub recompute: Recompute,
    /// Seconds per step.
    pub step_s: f64,
    /// Compute on the critical path (the slowest stage's `m` micro-batches, recomputation
    /// included).
    pub compute_s: f64,
    /// Communication not hidden: TP all-reduces, PP sends, the exposed DP all-reduce.
    pub exposed_comm_s: f64,
    /// Pipeline bubble.
    pub bubble_s: f64,
    /// Optimiser update.
    pub update_s: f64,
    /// The host's work on the busiest GPU ([`HostDispatch`]), seconds; 0 without one.
    #[serde(default)]
    pub host_s: f64,
    /// What the step waits on the host beyond the GPUs' own work, seconds (in `step_s`).
    #[serde(default)]
    pub host_bound_s: f64,
    /// TP all-reduces on the critical path.
    pub tp_comm_s: f64,
    /// PP activation and gradient sends on the critical path.
    pub pp_comm_s: f64,
    /// Seconds the DP all-reduce keeps the link busy (hidden or not).
    pub dp_comm_s: f64,
    /// The share of the pipelined part the GPUs idle: `(pp-1)/(m+pp-1)` with balanced
    /// stages.
    pub bubble_fraction: f64,
    /// Peak memory per GPU (the worst stage).
    pub memory: MemoryEstimate,
    /// What a GPU offers a plan: its memory times the allowed fraction, bytes.
    pub capacity_bytes: f64,
    /// Whether the peak is within the capacity.
    pub fits: bool,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Dollars per 1,000 steps at the price table's rate (`None` without a price).
    pub cost_per_1000_steps: Option<f64>,
    /// On the time-cost Pareto front of the fitting plans.
    pub pareto: bool,
}

/// A layout the planner could not evaluate, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// Device label.
    pub device: String,
    /// GPUs.
    pub gpus: usize,
    /// `dp x tp x pp`.
    pub layout: String,
    /// Why.
    pub reason: String,
}

/// Every plan, sorted, and what fits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Network name.
    pub network: String,
    /// Its parameters.
    pub parameters: f64,
    /// What was planned.
    pub config: PlanConfig,
    /// Plans, sorted (fitting ones first).
    pub rows: Vec<PlanRow>,
    /// Layouts not evaluated.
    pub skipped: Vec<Skipped>,
    /// Whether any plan fits.
    pub fits_anywhere: bool,
    /// Where none fits: the plan with the smallest peak per GPU.
    pub smallest: Option<PlanRow>,
}

impl PlanReport {
    /// Where no plan fits: one line naming the smallest memory a GPU would need.
    pub fn no_fit_message(&self) -> Option<String> {
        if self.fits_anywhere {
            return None;
        }
        let s = self.smallest.as_ref()?;
        Some(format!(
            "no plan fits: the smallest peak is {:.1} GiB per GPU ({} x {}, {}, recompute {}), \
             above the {:.1} GiB allowed there; a GPU with at least {:.1} GiB at {:.0}% use would \
             fit it",
            s.memory.total / GIB,
            s.gpus,
            s.device,
            s.layout_name,
            s.recompute.name(),
            s.capacity_bytes / GIB,
            s.memory.total / GIB / self.config.max_memory_fraction,
            100.0 * self.config.max_memory_fraction
        ))
    }
}

/// A link of `gbs` GB/s of a family (`nvlink`, `xgmi`, `pcie`): the preset of that family and
/// figure where there is one, else one named by both, with `latency_us` per step.
fn published_link(family: &str, gbs: f64, latency_us: f64) -> Link {
    let preset = PRESETS
        .iter()
        .find(|p| p.0.starts_with(family) && (p.1 - gbs).abs() <= 0.02 * gbs);
    match preset {
        Some(&(n, bw, lat, _)) => Link {
            name: n.into(),
            bandwidth_gbs: bw,
            latency_us: lat,
        },
        None => Link {
            name: format!("{family} {gbs} GB/s"),
            bandwidth_gbs: gbs,
            latency_us,
        },
    }
}

/// The peer link's family: xGMI on AMD's GPUs, NVLink on the others.
fn peer_family(spec: &DeviceSpec) -> &'static str {
    match perfcast_core::arch::vendor(&spec.name) {
        "amd" => "xgmi",
        _ => "nvlink",
    }
}

/// Per-step latency of NCCL's NVLink and PCI paths (hwLat, Ring/Simple), us.
const PEER_LATENCY_US: f64 = 3.4;
const PCIE_LATENCY_US: f64 = 5.7;

/// The link inside a node a device usually has. From the spec's published links where it has
/// them: its NVLink or xGMI where that joins every GPU of the node, else its host link (a
/// bridged pair of PCIe boards rings over PCIe beyond two GPUs: [`default_pair_link`]); the
/// preset of the same figure where there is one. Without published links, from the name:
/// NVLink on SXM parts, PCIe otherwise.
pub fn default_link(spec: &DeviceSpec) -> Link {
    if let Some(gbs) = spec.links.node_peer_gbs() {
        return published_link(peer_family(spec), gbs, PEER_LATENCY_US);
    }
    if let Some(gbs) = spec.links.pcie_gbs {
        return published_link("pcie", gbs, PCIE_LATENCY_US);
    }
    let name = spec.name.to_ascii_lowercase();
    let preset = if name.contains("h100") && (name.contains("sxm") || name.contains("hbm3")) {
        "nvlink4"
    } else if name.contains("a100") && name.contains("sxm") {
        "nvlink"
    } else if name.contains("v100") && name.contains("sxm") {
        "nvlink2"
    } else if ["a100", "h100", "l4", "l40", "a10"]
        .iter()
        .any(|n| name.contains(n))
    {
        "pcie4"
    } else {
        "pcie3"
    };
    Link::preset(preset).unwrap_or_else(|| Link {
        name: preset.into(),
        bandwidth_gbs: 15.75,
        latency_us: PCIE_LATENCY_US,
    })
}

/// The bridge of a device whose NVLink joins pairs of boards only: what a plan on two GPUs
/// runs over; `None` for every other device.
pub fn default_pair_link(spec: &DeviceSpec) -> Option<Link> {
    match (spec.links.peer_gpus, spec.links.peer_gbs) {
        (Some(1), Some(gbs)) => Some(published_link(peer_family(spec), gbs, PEER_LATENCY_US)),
        _ => None,
    }
}

/// On-demand prices per GPU-hour, from a TOML table:
///
/// ```toml
/// date = "2026-11"
/// currency = "USD"
/// [per_gpu_hour]
/// a100 = 3.67
/// "NVIDIA L4" = 0.71
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// When the prices were taken.
    #[serde(default)]
    pub date: Option<String>,
    /// Currency of the prices.
    #[serde(default)]
    pub currency: Option<String>,
    /// Where they come from.
    #[serde(default)]
    pub source: Option<String>,
    /// Device name or alias -> price per GPU-hour.
    pub per_gpu_hour: std::collections::BTreeMap<String, f64>,
}

/// The highest price per GPU-hour a table may hold: far above any rental, below the figures
/// that print as hundreds of digits.
pub const MAX_PRICE_PER_GPU_HOUR: f64 = 1e6;

impl PriceTable {
    /// Reads and checks a price table; errors name the file and the entry.
    pub fn from_file(path: &Path) -> Result<PriceTable> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        PriceTable::parse(&text).map_err(|message| Error::Invalid {
            what: "price file",
            message: format!("`{}`: {message}", path.display()),
        })
    }

    /// Parses a price table from TOML text.
    pub fn parse(text: &str) -> std::result::Result<PriceTable, String> {
        let table: PriceTable = toml::from_str(text)
            .map_err(|e| e.message().lines().next().unwrap_or("not TOML").to_string())?;
        for (name, &price) in &table.per_gpu_hour {
            if !(price.is_finite() && (0.0..=MAX_PRICE_PER_GPU_HOUR).contains(&price)) {
                return Err(format!(
                    "`per_gpu_hour.{name}` must be a price between 0 and \
                     {MAX_PRICE_PER_GPU_HOUR} per GPU-hour, got {}",
                    crate::link::short(price)
                ));
            }
        }
        Ok(table)
    }

    /// The price of a device the user named `label` with spec `spec`: by the label, then by
    /// the spec's name (both compared as slugs, without a `:dtype` suffix: a GPU costs the
    /// same whatever type it computes in).
    pub fn price(&self, label: &str, spec: &DeviceSpec) -> Option<f64> {
        let bare = label.rsplit_once(':').map_or(label, |(name, _)| name);
        let want = [slugify(bare), slugify(&spec.name)];
        want.iter().find_map(|w| {
            self.per_gpu_hour
                .iter()
                .find(|(k, _)| slugify(k) == *w)
                .map(|(_, &p)| p)
        })
    }
}

/// Stage peaks by (tp, first layer, end, micro-batch, recomputation): one micro-batch's
/// estimate and what each further micro-batch in flight holds.
type PeakCache = HashMap<(usize, usize, usize, usize, Recompute), (MemoryEstimate, f64)>;

/// Everything about one tensor-parallel degree that does not depend on the device.
struct Split {
    tp: TensorParallel,
    graph: Graph,
    /// The split graph with the attention core dropped (selective recomputation's forward).
    core: Vec<usize>,
    cuts: Vec<usize>,
}

/// Whether `fusion` runs attention as one FlashAttention-style kernel.
pub fn fuses_attention(fusion: Fusion) -> bool {
    matches!(fusion, Fusion::Compile | Fusion::Engine)
}

/// Plans `network` on every device, GPU count and layout.
pub fn plan(
    network: &Network,
    devices: &[DeviceOption<'_>],
    config: &PlanConfig,
) -> Result<PlanReport> {
    validate(config)?;
    if devices.is_empty() {
        return Err(Error::invalid("devices", "at least one device is needed"));
    }
    let base = Graph::new(network)?;
    let parameters = base.params(0..base.nodes.len());
    let mut splits: HashMap<usize, std::result::Result<Split, String>> = HashMap::new();
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for device in devices {
        let mut times: HashMap<(usize, usize), Vec<(f64, f64)>> = HashMap::new();
        let mut peaks: PeakCache = HashMap::new();
        for &g in &config.gpus {
            for (dp, tp, pp) in layouts(g) {
                let skip = |reason: String| Skipped {
                    device: device.label.clone(),
                    gpus: g,
                    layout: format!("dp{dp} tp{tp} pp{pp}"),
                    reason,
                };
                if dp > config.global_batch {
                    skipped.push(skip(format!(
                        "{dp} replicas cannot split a global batch of {}",
                        config.global_batch
                    )));
                    continue;
                }
                if tp * pp > config.gpus_per_node && (tp > 1 || pp > 1) {
                    skipped.push(skip(format!(
                        "tensor and pipeline groups stay inside a node of {} GPUs",
                        config.gpus_per_node
                    )));
                    continue;
                }
                let split = splits.entry(tp).or_insert_with(|| {
                    let tp_net = tensor_parallel(network, tp).map_err(|e| e.to_string())?;
                    let mut graph = tp_net
                        .graph(config.sequence_parallel)
                        .map_err(|e| e.to_string())?;
                    let core = if fuses_attention(config.fusion) {
                        // The fused kernel keeps no score matrix: nothing left to recompute.
                        graph.drop_attention_core();
                        let regions = perfcast_core::fusion::fuse(&tp_net.network, config.fusion)
                            .map_err(|e| e.to_string())?;
                        graph.recompute_fused_chains(&regions);
                        Vec::new()
                    } else {
                        graph.clone().drop_attention_core()
                    };
                    let cuts = graph.cut_points();
                    Ok(Split {
                        tp: tp_net,
                        graph,
                        core,
                        cuts,
                    })
                });
                let split = match split {
                    Ok(s) => &*s,
                    Err(e) => {
                        skipped.push(skip(e.clone()));
                        continue;
                    }
                };
                // One micro-batch runs forward then backward through the stages whatever the
                // schedule: one row, not two of the same.
                let schedules: Vec<Option<Schedule>> = match (pp, config.micro_batches) {
                    (1, _) => vec![None],
                    (_, Some(1)) => vec![Some(Schedule::OneFOneB)],
                    _ => vec![Some(Schedule::OneFOneB), Some(Schedule::GPipe)],
                };
                for schedule in schedules {
                    let mut best: Option<PlanRow> = None;
                    let replica = config.global_batch.div_ceil(dp);
                    let counts = match config.micro_batches {
                        None => micro_batch_counts(replica),
                        Some(n) if n <= replica => vec![n],
                        Some(n) => {
                            skipped.push(skip(format!(
                                "{n} micro-batches cannot split a replica batch of {replica}"
                            )));
                            break;
                        }
                    };
                    for m in counts {
                        let mb = replica.div_ceil(m);
                        let key = (tp, mb);
                        let t = match times.entry(key) {
                            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                            std::collections::hash_map::Entry::Vacant(e) => {
                                let t = device.compute.layer_times(&split.tp.network, mb)?;
                                if t.len() != split.graph.nodes.len() {
                                    return Err(Error::Compute {
                                        batch: mb,
                                        message: format!(
                                            "{} layer times for {} layers",
                                            t.len(),
                                            split.graph.nodes.len()
                                        ),
                                    });
                                }
                                e.insert(t)
                            }
                        };
                        let t = &*t;
                        let costs: Vec<f64> = t.iter().map(|(f, b)| f + b).collect();
                        let Some(stages) = partition(&costs, &split.cuts, pp) else {
                            skipped.push(skip(format!(
                                "the network has fewer than {pp} places to cut it into stages"
                            )));
                            break;
                        };
                        let recomputes: Vec<Recompute> = match config.recompute {
                            Some(r) => vec![r],
                            None if split.core.is_empty() => {
                                vec![Recompute::None, Recompute::Full]
                            }
                            None => vec![Recompute::None, Recompute::Selective, Recompute::Full],
                        };
                        for recompute in recomputes {
                            let row = evaluate(
                                device,
                                config,
                                split,
                                t,
                                &stages,
                                Layout {
                                    dp,
                                    tp,
                                    pp,
                                    schedule,
                                    micro_batches: m,
                                    micro_batch: mb,
                                },
                                recompute,
                                &mut peaks,
                            )?;
                            let fits = row.fits;
                            let better = match &best {
                                None => true,
                                Some(b) => match (row.fits, b.fits) {
                                    (true, false) => true,
                                    (false, true) => false,
                                    (true, true) => row.step_s < b.step_s,
                                    (false, false) => row.memory.total < b.memory.total,
                                },
                            };
                            if better {
                                best = Some(row);
                            }
                            // Recomputation only adds time at the same micro-batch: the
                            // first that fits is the fastest.
                            if fits {
                                break;
                            }
                        }
                    }
                    if let Some(b) = best {
                        rows.push(b);
                    }
                }
            }
        }
    }
    mark_pareto(&mut rows);
    sort(&mut rows, config.sort);
    let fits_anywhere = rows.iter().any(|r| r.fits);
    let smallest = (!fits_anywhere)
        .then(|| {
            rows.iter()
                .min_by(|a, b| a.memory.total.total_cmp(&b.memory.total))
                .cloned()
        })
        .flatten();
    Ok(PlanReport {
        network: network.name.clone(),
        parameters,
        config: config.clone(),
        rows,
        skipped,
        fits_anywhere,
        smallest,
    })
}

fn validate(config: &PlanConfig) -> Result<()> {
    if config.global_batch == 0 || config.global_batch > perfcast_core::MAX_BATCH {
        return Err(Error::invalid(
            "global batch",
            format!(
                "must be 1 to {} (2^24), got {}",
                perfcast_core::MAX_BATCH,
                config.global_batch
            ),
        ));
    }
    if config.gpus.is_empty() {
        return Err(Error::invalid("gpus", "at least one GPU count is needed"));
    }
    if let Some(&g) = config
        .gpus
        .iter()
        .find(|&&g| g == 0 || g > crate::analytic::MAX_DEVICES)
    {
        return Err(Error::invalid(
            "gpus",
            format!(
                "a GPU count must be 1 to {}, got {g}",
                crate::analytic::MAX_DEVICES
            ),
        ));
    }
    if !(config.max_memory_fraction > 0.0 && config.max_memory_fraction <= 1.0) {
        return Err(Error::invalid(
            "max memory fraction",
            format!("must be in (0, 1], got {}", config.max_memory_fraction),
        ));
    }
    if !(config.activation_bytes > 0.0 && config.activation_bytes.is_finite()) {
        return Err(Error::invalid(
            "activation bytes",
            format!("must be positive, got {}", config.activation_bytes),
        ));
    }
    if config.gpus_per_node == 0 {
        return Err(Error::invalid("gpus per node", "must be at least 1, got 0"));
    }
    if let Some(n) = config.micro_batches
        && (n == 0 || n > perfcast_core::MAX_BATCH)
    {
        return Err(Error::invalid(
            "micro-batches",
            format!("must be 1 to {}, got {n}", perfcast_core::MAX_BATCH),
        ));
    }
    config.inter_link.validate()
}

/// Every (dp, tp, pp) with dp tp pp = g.
pub fn layouts(g: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for tp in (1..=g).filter(|t| g.is_multiple_of(*t)) {
        for pp in (1..=g / tp).filter(|p| (g / tp).is_multiple_of(*p)) {
            out.push((g / tp / pp, tp, pp));
        }
    }
    out
}

/// Micro-batch counts to try for a replica batch: powers of two below it, and itself.
fn micro_batch_counts(replica: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |m| m.checked_mul(2))
        .take_while(|&m| m < replica)
        .collect();
    out.push(replica);
    // Counts that give the same micro-batch are the same plan with more steps; keep the first.
    let mut seen = std::collections::HashSet::new();
    out.retain(|&m| seen.insert(replica.div_ceil(m)));
    out
}

#[allow(clippy::too_many_arguments)]
fn evaluate(
    device: &DeviceOption<'_>,
    config: &PlanConfig,
    split: &Split,
    times: &[(f64, f64)],
    stages: &[Range<usize>],
    layout: Layout,
    recompute: Recompute,
    peaks: &mut PeakCache,
) -> Result<PlanRow> {
    let Layout {
        dp,
        tp,
        pp,
        schedule,
        micro_batches: m,
        micro_batch: mb,
    } = layout;
    let link = match &device.pair_link {
        Some(pair) if dp * tp * pp == 2 => pair,
        _ => &device.link,
    };
    let fits = config.collectives.as_ref();
    // Inside a node: the fits where they cover a collective, the link formula otherwise.
    let allreduce = |p: usize, bytes: f64| {
        fits.and_then(|f| f.allreduce_s(p, bytes))
            .unwrap_or_else(|| ring_allreduce_s(p, bytes, link))
    };
    let send = |bytes: f64| {
        fits.and_then(|f| f.send_s(bytes))
            .unwrap_or_else(|| link.transfer_s(bytes))
    };
    // A device seen in half precision trains in mixed precision: half-width activations
    // and gradients on the wire, fp32 masters in memory.
    let elem = device.spec.dtype.bytes();
    let act = if elem < 4.0 {
        elem
    } else {
        config.activation_bytes
    };
    let b = mb as f64;
    // Per stage and micro-batch: compute (with recomputation), TP and PP communication.
    let mut worst = (0usize, 0.0, 0.0, 0.0, f64::NEG_INFINITY);
    let mut stages_sum = 0.0;
    for (s, r) in stages.iter().enumerate() {
        let mut compute: f64 = times[r.clone()].iter().map(|(f, b)| f + b).sum();
        compute += match recompute {
            Recompute::None => 0.0,
            Recompute::Selective => split
                .core
                .iter()
                .filter(|i| r.contains(i))
                .map(|&i| times[i].0)
                .sum(),
            Recompute::Full => times[r.clone()].iter().map(|(f, _)| f).sum(),
        };
        let tp_s: f64 = split.tp.comm[r.clone()]
            .iter()
            .map(|c| c.seconds_by(tp, b, act, &allreduce))
            .sum();
        let mut pp_s = 0.0;
        if s + 1 < stages.len() {
            pp_s += send(split.graph.elems(Tensor::Layer(r.end - 1)) * b * act);
        }
        if s > 0 {
            pp_s += send(split.graph.elems(Tensor::Layer(r.start - 1)) * b * act);
        }
        let total = compute + tp_s + pp_s;
        stages_sum += total;
        if total > worst.4 {
            worst = (s, compute, tp_s, pp_s, total);
        }
    }
    let (slow, compute, tp_s, pp_s, stage_s) = worst;
    // A micro-batch passes every stage once, and the slowest stage paces the other m - 1:
    // with balanced stages this is (m + pp - 1) slots, with m = 1 the serial sum.
    let pipeline = stages_sum + (m - 1) as f64 * stage_s;
    let bubble_s = stages_sum - stage_s;
    // Gradients of the slowest stage, all-reduced over the replicas while the last
    // micro-batch's backward pass runs.
    let r = stages[slow].clone();
    let layers: Vec<LayerCost> = r
        .clone()
        .map(|i| LayerCost {
            name: split.graph.nodes[i].name.clone(),
            forward_s: times[i].0,
            backward_s: times[i].1,
            grad_bytes: split.graph.nodes[i].params * act,
        })
        .collect();
    let backward: f64 = layers.iter().map(|l| l.backward_s).sum();
    let strategy = if dp * tp * pp <= config.gpus_per_node {
        Strategy::Ring
    } else {
        Strategy::Hierarchical {
            gpus_per_node: (config.gpus_per_node / (tp * pp)).max(1),
            inter_link: config.inter_link.clone(),
            inter: InterNode::Ring,
        }
    };
    // Fits price the DP all-reduce only where it stays inside a node.
    let strategy = match &config.collectives {
        Some(fits) if strategy == Strategy::Ring => Strategy::Fitted {
            fits: Box::new(fits.clone()),
            beyond: Box::new(strategy),
        },
        _ => strategy,
    };
    let total_bytes: f64 = layers.iter().map(|l| l.grad_bytes).sum();
    let (dp_comm_s, dp_exposed) = if dp == 1 || total_bytes == 0.0 {
        (0.0, 0.0)
    } else {
        match config.overlap {
            Overlap::None => {
                let c = strategy.allreduce_s(dp, total_bytes, link)?;
                (c, c)
            }
            Overlap::Full => {
                let c = strategy.allreduce_s(dp, total_bytes, link)?;
                (c, (c - backward).max(0.0))
            }
            Overlap::Bucketed { bucket_bytes } => {
                let (mut free, mut busy) = (0.0f64, 0.0);
                for (ready, bytes) in buckets(&layers, bucket_bytes) {
                    let c = strategy.allreduce_s(dp, bytes, link)?;
                    free = free.max(ready) + c;
                    busy += c;
                }
                (busy, (free - backward).max(0.0))
            }
        }
    };
    // Memory: the worst stage, with its micro-batches in flight.
    let memory_config = MemoryConfig {
        optimizer: config.optimizer,
        activation_bytes: act,
        param_bytes: 4.0,
        master_bytes: 0.0,
        recompute,
        reserve_bytes: config.reserve_bytes,
        framework: crate::memory::Framework::Reference,
    }
    .mixed(elem);
    let mut memory = MemoryEstimate::default();
    let mut params_max: f64 = 0.0;
    for (s, r) in stages.iter().enumerate() {
        let key = (tp, r.start, r.end, mb, recompute);
        let (one, held) = match peaks.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => *e.get(),
            std::collections::hash_map::Entry::Vacant(e) => {
                *e.insert(stage_peak(&split.graph, r.clone(), mb, &memory_config)?)
            }
        };
        let in_flight = schedule.map_or(1, |sc| sc.in_flight(pp, m, s));
        let est = one.with_in_flight(in_flight, held);
        if est.total > memory.total {
            memory = est;
        }
        params_max = params_max.max(split.graph.params(r.clone()));
    }
    let update_s = config
        .optimizer
        .update_s(params_max, device.spec.mem_bandwidth_gbs);
    let busy_s = pipeline + dp_exposed + update_s;
    // Every GPU of a stage launches the stage's layers for each of its micro-batches.
    let widest = stages.iter().map(|r| r.len()).max().unwrap_or(0);
    let host_s = config
        .host
        .map_or(0.0, |h| h.per_step_s + h.per_layer_s * (m * widest) as f64);
    let host_bound_s = (host_s - busy_s).max(0.0);
    let step_s = busy_s + host_bound_s;
    let capacity_bytes = device.spec.memory_gb * GIB * config.max_memory_fraction;
    let gpus = dp * tp * pp;
    Ok(PlanRow {
        device: device.label.clone(),
        device_name: device.spec.name.clone(),
        gpus,
        layout,
        layout_name: layout.describe(),
        recompute,
        step_s,
        compute_s: m as f64 * compute,
        exposed_comm_s: m as f64 * (tp_s + pp_s) + dp_exposed,
        bubble_s,
        update_s,
        host_s,
        host_bound_s,
        tp_comm_s: m as f64 * tp_s,
        pp_comm_s: m as f64 * pp_s,
        dp_comm_s,
        bubble_fraction: if pipeline > 0.0 {
            bubble_s / pipeline
        } else {
            0.0
        },
        memory,
        capacity_bytes,
        fits: memory.total <= capacity_bytes,
        samples_per_s: config.global_batch as f64 / step_s,
        cost_per_1000_steps: device
            .price_per_gpu_hour
            .map(|p| step_s * 1000.0 / 3600.0 * gpus as f64 * p),
        pareto: false,
    })
}

/// Marks the fitting plans no other fitting plan beats on both time and cost.
fn mark_pareto(rows: &mut [PlanRow]) {
    let points: Vec<Option<(f64, f64)>> = rows
        .iter()
        .map(|r| {
            r.fits
                .then_some(())
                .and(r.cost_per_1000_steps.map(|c| (r.step_s, c)))
        })
        .collect();
    for (i, row) in rows.iter_mut().enumerate() {
        let Some((t, c)) = points[i] else { continue };
        row.pareto = !points.iter().enumerate().any(|(j, p)| {
            j != i && p.is_some_and(|(t2, c2)| t2 <= t && c2 <= c && (t2 < t || c2 < c))
        });
    }
}

/// Fitting plans first, then by time or cost.
fn sort(rows: &mut [PlanRow], by: SortBy) {
    rows.sort_by(|a, b| {
        b.fits.cmp(&a.fits).then_with(|| match by {
            SortBy::Time => a.step_s.total_cmp(&b.step_s),
            SortBy::Cost => {
                let ca = a.cost_per_1000_steps.unwrap_or(f64::INFINITY);
                let cb = b.cost_per_1000_steps.unwrap_or(f64::INFINITY);
                ca.total_cmp(&cb).then(a.step_s.total_cmp(&b.step_s))
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::gpt_block;
    use crate::parallel::bubble_fraction;
    use perfcast_core::network::Layer;

    fn link_of(device: &str) -> Link {
        let spec = perfcast_core::known::target_device(None, Some(device))
            .unwrap()
            .unwrap();
        default_link(&spec)
    }

    #[test]
    fn a_device_rings_over_its_published_link_where_it_joins_the_node() {
        // Switched NVLink, named by the preset of the same figure.
        for (device, name, gbs) in [
            ("b200", "nvlink5", 900.0),
            ("h100-sxm", "nvlink4", 450.0),
            ("h200", "nvlink4", 450.0),
            ("a100-sxm4-80gb", "nvlink", 300.0),
        ] {
            let link = link_of(device);
            assert_eq!(
                (link.name.as_str(), link.bandwidth_gbs),
                (name, gbs),
                "{device}"
            );
        }
        // A bridge joins a pair only: a node's ring runs at the host link's pace.
        assert_eq!(link_of("h100-pcie").name, "pcie5");
        assert_eq!(link_of("a40").name, "pcie4");
        // No peer link: the board's PCIe.
        assert_eq!(link_of("l40s").name, "pcie4");
        // AMD's Infinity Fabric at its published figure.
        let mi300x = link_of("mi300x");
        assert!(mi300x.name.starts_with("xgmi"), "{}", mi300x.name);
        assert_eq!(mi300x.bandwidth_gbs, 448.0);
        // A spec without published links still gets one from its name.
        let mut v100 = perfcast_core::known::target_device(None, Some("v100-sxm2"))
            .unwrap()
            .unwrap();
        v100.links = perfcast_core::Links::default();
        assert_eq!(default_link(&v100).name, "nvlink2");
    }

    /// Compute proportional to FLOPs at 10 TFLOP/s, backward twice the forward.
    fn flops_time(network: &Network, batch: usize) -> Result<Vec<(f64, f64)>> {
        Ok(network
            .modules()
            .iter()
            .map(|(_, s)| {
                let f = perfcast_core::features::derive(s, batch).flops / 1e13 + 5e-6;
                (f, 2.0 * f)
            })
            .collect())
    }

    fn device(memory_gb: f64) -> DeviceSpec {
        DeviceSpec {
            name: "test gpu".into(),
            kind: perfcast_core::DeviceKind::Gpu,
            peak_gflops: 10_000.0,
            mem_bandwidth_gbs: 1000.0,
            memory_gb,
            ..perfcast_core::testing::cpu_device()
        }
    }

    /// GPT blocks in a row.
    fn gpt(blocks: usize, s: usize, h: usize, a: usize) -> Network {
        let one = gpt_block(s, h, a);
        let mut layers = Vec::new();
        for bi in 0..blocks {
            let prefix = |n: &str| format!("h{bi}.{n}");
            let prev_out = if bi == 0 {
                "input".to_string()
            } else {
                format!("h{}.add2", bi - 1)
            };
            for (i, l) in one.layers.iter().enumerate() {
                let rename = |n: &Option<String>| {
                    n.as_ref().map(|n| {
                        if n == "input" {
                            prev_out.clone()
                        } else {
                            prefix(n)
                        }
                    })
                };
                let mut l2 = Layer {
                    name: prefix(&l.name),
                    input_from: rename(&l.input_from),
                    second_from: rename(&l.second_from),
                    parts_from: l
                        .parts_from
                        .iter()
                        .filter_map(|n| rename(&Some(n.clone())))
                        .collect(),
                    ..l.clone()
                };
                if i == 0 && bi > 0 {
                    l2.input_from = Some(prev_out.clone());
                }
                layers.push(l2);
            }
        }
        Network {
            name: "gpt".into(),
            input: vec![s, h],
            layers,
        }
    }

    fn plan_on(net: &Network, memory_gb: f64, config: &PlanConfig) -> PlanReport {
        let compute = flops_time;
        let devices = [DeviceOption {
            label: "x".into(),
            spec: device(memory_gb),
            link: Link::preset("nvlink").unwrap(),
            pair_link: None,
            price_per_gpu_hour: Some(2.0),
            compute: &compute,
        }];
        plan(net, &devices, config).unwrap()
    }

    #[test]
    fn a_bridged_pair_plans_two_gpus_over_its_bridge_and_more_over_pcie() {
        let net = gpt(2, 128, 256, 4);
        let compute = flops_time;
        let pcie = Link::preset("pcie4").unwrap();
        let bridge = Link::preset("nvlink").unwrap();
        let run = |pair_link: Option<Link>| {
            let devices = [DeviceOption {
                label: "x".into(),
                spec: device(80.0),
                link: pcie.clone(),
                pair_link,
                price_per_gpu_hour: None,
                compute: &compute,
            }];
            let config = PlanConfig {
                global_batch: 8,
                gpus: vec![2, 4],
                recompute: Some(Recompute::None),
                micro_batches: Some(1),
                ..PlanConfig::default()
            };
            plan(&net, &devices, &config).unwrap()
        };
        let dp = |r: &PlanReport, gpus: usize| {
            r.rows
                .iter()
                .find(|row| row.gpus == gpus && row.layout.dp == gpus)
                .expect("a data-parallel row")
                .dp_comm_s
        };
        let (with, without) = (run(Some(bridge)), run(None));
        assert!(dp(&with, 2) < dp(&without, 2), "two GPUs ride the bridge");
        assert_eq!(dp(&with, 4), dp(&without, 4), "four ring over PCIe");
        // The published bridges: a pair of H100 PCIe boards, none on a switched B200.
        let spec = |name: &str| {
            perfcast_core::known::target_device(None, Some(name))
                .unwrap()
                .unwrap()
        };
        let pair = default_pair_link(&spec("h100-pcie")).expect("a bridge");
        assert_eq!((pair.name.as_str(), pair.bandwidth_gbs), ("nvlink", 300.0));
        assert_eq!(default_pair_link(&spec("b200")), None);
    }

    #[test]
    fn fused_attention_keeps_no_score_matrix_and_leaves_nothing_to_recompute() {
        let net = gpt(2, 512, 256, 8);
        let at = |fusion: Fusion| {
            let config = PlanConfig {
                global_batch: 8,
                gpus: vec![1],
                recompute: Some(Recompute::None),
                micro_batches: Some(1),
                fusion,
                ..PlanConfig::default()
            };
            plan_on(&net, 80.0, &config).rows[0].memory.total
        };
        let eager = at(Fusion::None);
        assert_eq!(eager, at(Fusion::Epilogue));
        let fused = at(Fusion::Compile);
        // 8 heads of 512 x 512 scores per sample, softmax and dropout outputs among them.
        assert!(
            fused < eager - 8.0 * 8.0 * 512.0 * 512.0 * 4.0,
            "{fused} vs {eager}"
        );
        let auto = PlanConfig {
            global_batch: 8,
            gpus: vec![1],
            micro_batches: Some(1),
            fusion: Fusion::Compile,
            ..PlanConfig::default()
        };
        let r = plan_on(&net, 80.0, &auto);
        assert!(
            r.rows
                .iter()
                .all(|row| row.recompute != Recompute::Selective)
        );
    }

    #[test]
    fn every_layout_of_every_count_is_planned_and_sorted() {
        let net = gpt(4, 128, 256, 4);
        let config = PlanConfig {
            global_batch: 16,
            gpus: vec![1, 2, 4],
            ..PlanConfig::default()
        };
        let r = plan_on(&net, 80.0, &config);
        // 1 + 3 + 6 layouts, pipelines twice (two schedules): 1 + (2 + 1) + (3 + 3).
        assert_eq!(layouts(4).len(), 6);
        assert_eq!(r.rows.len(), 1 + 3 + 6 + 1 + 3, "{:#?}", r.skipped);
        assert!(r.rows.windows(2).all(|w| w[0].step_s <= w[1].step_s));
        for row in &r.rows {
            let l = row.layout;
            assert_eq!(l.dp * l.tp * l.pp, row.gpus);
            let parts = row.compute_s + row.exposed_comm_s + row.bubble_s + row.update_s;
            assert!((parts - row.step_s).abs() < 1e-12 * row.step_s, "{row:?}");
            assert!(row.fits);
            // Cost: step x 1000 / 3600 x GPUs x $2.
            let cost = row.step_s * 1000.0 / 3600.0 * row.gpus as f64 * 2.0;
            assert!((row.cost_per_1000_steps.unwrap() - cost).abs() < 1e-12);
            let pipelined =
                row.step_s - row.update_s - (row.exposed_comm_s - row.pp_comm_s - row.tp_comm_s);
            assert!((row.bubble_fraction - row.bubble_s / pipelined).abs() < 1e-12);
        }
        // Free of memory pressure, a single GPU takes no recomputation.
        let single = r.rows.iter().find(|r| r.gpus == 1).unwrap();
        assert_eq!(single.recompute, Recompute::None);
        // The Pareto front is non-empty and nothing on it is dominated.
        let front: Vec<&PlanRow> = r.rows.iter().filter(|r| r.pareto).collect();
        assert!(!front.is_empty());
        for p in &front {
            assert!(
                !r.rows
                    .iter()
                    .any(|q| q.step_s < p.step_s && q.cost_per_1000_steps < p.cost_per_1000_steps)
            );
        }
    }

    #[test]
    fn a_step_waits_on_the_host_only_when_its_dispatch_outlasts_the_gpus() {
        let net = gpt(4, 128, 256, 4);
        let base = PlanConfig {
            global_batch: 16,
            gpus: vec![1, 2],
            ..PlanConfig::default()
        };
        let without = plan_on(&net, 80.0, &base);
        assert!(
            without
                .rows
                .iter()
                .all(|r| r.host_s == 0.0 && r.host_bound_s == 0.0)
        );
        // A host far slower than the kernels paces every plan; a negligible one none.
        for (per_step_s, per_layer_s, binds) in [(0.5, 1.0, true), (0.0, 1e-12, false)] {
            let config = PlanConfig {
                host: Some(HostDispatch {
                    per_step_s,
                    per_layer_s,
                }),
                ..base.clone()
            };
            let with = plan_on(&net, 80.0, &config);
            assert_eq!(with.rows.len(), without.rows.len());
            for row in &with.rows {
                // The busiest stage's layers, for each of its micro-batches.
                let m = row.layout.micro_batches as f64;
                let most = per_step_s + per_layer_s * m * net.layers.len() as f64;
                let least = per_step_s + per_layer_s * m;
                assert!(row.host_s >= least && row.host_s <= most, "{row:?}");
                if binds {
                    assert!(row.host_bound_s > 0.0, "{row:?}");
                    assert!(
                        (row.step_s - row.host_s).abs() < 1e-12 * row.step_s,
                        "{row:?}"
                    );
                } else {
                    assert_eq!(row.host_bound_s, 0.0, "{row:?}");
                }
            }
        }
    }

    #[test]
    fn pipeline_time_is_slots_of_the_slowest_stage() {
        let net = gpt(4, 128, 256, 4);
        let config = PlanConfig {
            global_batch: 8,
            gpus: vec![4],
            recompute: Some(Recompute::None),
            ..PlanConfig::default()
        };
        let r = plan_on(&net, 80.0, &config);
        let pp4 = r
            .rows
            .iter()
            .find(|r| r.layout.pp == 4 && r.layout.schedule == Some(Schedule::OneFOneB))
            .unwrap();
        let m = pp4.layout.micro_batches as f64;
        // Equal blocks, four stages: one block each, and a block's activation crosses each
        // boundary forward and its gradient backward: a middle stage sends 2 per micro-batch.
        let link = Link::preset("nvlink").unwrap();
        let mb = pp4.layout.micro_batch as f64;
        let send = link.transfer_s(128.0 * 256.0 * mb * 4.0);
        assert!((pp4.pp_comm_s - m * 2.0 * send).abs() < 1e-12, "{pp4:?}");
        // m slots of the slowest (a middle) stage; the bubble is the other three stages, the
        // two end ones a send shorter.
        let slot = (pp4.compute_s + pp4.tp_comm_s + pp4.pp_comm_s) / m;
        assert!(
            (pp4.bubble_s - (3.0 * slot - 2.0 * send)).abs() < 1e-12,
            "{pp4:?}"
        );
        assert!((pp4.bubble_s / (pp4.bubble_s + m * slot) - pp4.bubble_fraction).abs() < 1e-12);
    }

    /// The pipeline-parallel row of a 4-GPU plan with `m` micro-batches, 1F1B.
    fn pp4_row(net: &Network, link: &Link, global_batch: usize, m: usize) -> PlanRow {
        let compute = flops_time;
        let devices = [DeviceOption {
            label: "x".into(),
            spec: device(80.0),
            link: link.clone(),
            pair_link: None,
            price_per_gpu_hour: None,
            compute: &compute,
        }];
        let config = PlanConfig {
            global_batch,
            gpus: vec![4],
            recompute: Some(Recompute::None),
            micro_batches: Some(m),
            ..PlanConfig::default()
        };
        let r = plan(net, &devices, &config).unwrap();
        // One micro-batch: one serial row per layout, not a 1F1B and a GPipe row alike.
        let gpipe = r
            .rows
            .iter()
            .any(|r| r.layout.schedule == Some(Schedule::GPipe));
        assert_eq!(gpipe, m > 1, "m = {m}");
        r.rows
            .into_iter()
            .find(|r| r.layout.pp == 4 && r.layout.schedule == Some(Schedule::OneFOneB))
            .unwrap()
    }

    #[test]
    fn one_micro_batch_is_the_serial_sum_of_stages_and_sends() {
        // Five blocks over four stages: unbalanced, so the serial sum is not 4 slowest stages.
        let net = gpt(5, 128, 256, 4);
        let link = Link::preset("nvlink").unwrap();
        let row = pp4_row(&net, &link, 4, 1);
        assert_eq!((row.layout.micro_batches, row.layout.micro_batch), (1, 4));
        assert_eq!(row.layout.describe(), "pp4 serial m1x4");
        let times = flops_time(&net, 4).unwrap();
        let graph = Graph::new(&net).unwrap();
        let costs: Vec<f64> = times.iter().map(|(f, b)| f + b).collect();
        let stages = partition(&costs, &graph.cut_points(), 4).unwrap();
        let compute: f64 = costs.iter().sum();
        // Each of the three boundaries: the activation forward, its gradient backward.
        let sends: f64 = stages[..3]
            .iter()
            .map(|r| 2.0 * link.transfer_s(graph.elems(Tensor::Layer(r.end - 1)) * 4.0 * 4.0))
            .sum();
        let pipelined = row.compute_s + row.pp_comm_s + row.bubble_s;
        assert!(
            (pipelined - (compute + sends)).abs() < 1e-12 * pipelined,
            "{row:?}"
        );
        assert!((row.step_s - row.update_s - (compute + sends)).abs() < 1e-12 * row.step_s);
        let slowest = stages
            .iter()
            .map(|r| costs[r.clone()].iter().sum::<f64>())
            .fold(0.0, f64::max);
        assert!(row.step_s - row.update_s < 4.0 * slowest);
    }

    #[test]
    fn more_micro_batches_shrink_the_bubble_as_the_formula_says() {
        // Balanced stages and sends that cost next to nothing: the bubble is (p-1)/(m+p-1).
        let net = gpt(4, 128, 256, 4);
        let link = Link::custom(1e5, 0.0).unwrap();
        let mut last = 1.0;
        for m in [1usize, 2, 4, 8, 16] {
            let row = pp4_row(&net, &link, 16, m);
            assert_eq!(row.layout.micro_batches, m);
            let want = bubble_fraction(4, m);
            assert!((row.bubble_fraction - want).abs() < 1e-4, "m={m}: {row:?}");
            assert!(row.bubble_fraction < last);
            last = row.bubble_fraction;
        }
        // A count the replica batch cannot take is skipped with the reason.
        let compute = flops_time;
        let devices = [DeviceOption {
            label: "x".into(),
            spec: device(80.0),
            link,
            pair_link: None,
            price_per_gpu_hour: None,
            compute: &compute,
        }];
        let config = PlanConfig {
            global_batch: 4,
            gpus: vec![4],
            micro_batches: Some(8),
            ..PlanConfig::default()
        };
        let r = plan(&net, &devices, &config).unwrap();
        assert!(r.rows.is_empty());
        assert!(r.skipped[0].reason.contains("8 micro-batches"), "{r:?}");
        let config = PlanConfig {
            micro_batches: Some(0),
            ..config
        };
        let e = plan(&net, &devices, &config).unwrap_err().to_string();
        assert!(e.contains("got 0"), "{e}");
    }

    #[test]
    fn fitted_collectives_price_tp_pp_and_dp_inside_a_node() {
        use crate::measured::{Collective, Sample};
        // Timings of a link unlike the device's, fitted: plans with the fits must come out as
        // plans over that link.
        let measured = Link::custom(40.0, 7.0).unwrap();
        let mut samples = Vec::new();
        for e in 0..50 {
            let bytes = 4096.0 * 1.3f64.powi(e);
            for p in [2usize, 4, 8] {
                samples.push(Sample {
                    collective: Collective::AllReduce,
                    workers: p,
                    devices_per_node: p,
                    bytes,
                    time_s: ring_allreduce_s(p, bytes, &measured),
                });
            }
            samples.push(Sample {
                collective: Collective::SendRecv,
                workers: 2,
                devices_per_node: 2,
                bytes,
                time_s: measured.transfer_s(bytes),
            });
        }
        let fits = Collectives::fit("test", vec![], &samples).unwrap();
        let net = gpt(4, 128, 256, 4);
        let config = PlanConfig {
            global_batch: 8,
            gpus: vec![4],
            recompute: Some(Recompute::None),
            ..PlanConfig::default()
        };
        let run = |link: &Link, collectives: Option<Collectives>| {
            let compute = flops_time;
            let devices = [DeviceOption {
                label: "x".into(),
                spec: device(80.0),
                link: link.clone(),
                pair_link: None,
                price_per_gpu_hour: None,
                compute: &compute,
            }];
            let config = PlanConfig {
                collectives,
                ..config.clone()
            };
            plan(&net, &devices, &config).unwrap().rows
        };
        let nvlink = Link::preset("nvlink").unwrap();
        let with_fits = run(&nvlink, Some(fits));
        let over_measured = run(&measured, None);
        let formula = run(&nvlink, None);
        let key = |r: &PlanRow| (r.layout_name.clone(), r.recompute);
        for row in &with_fits {
            let twin = over_measured.iter().find(|r| key(r) == key(row)).unwrap();
            for (a, b) in [
                (row.tp_comm_s, twin.tp_comm_s),
                (row.pp_comm_s, twin.pp_comm_s),
                (row.dp_comm_s, twin.dp_comm_s),
            ] {
                assert!((a - b).abs() <= 1e-6 * b.max(1e-12), "{row:?} vs {twin:?}");
            }
        }
        // And the slower measured link makes every communicating plan slower than the formula.
        let tp4 = |rows: &[PlanRow]| rows.iter().find(|r| r.layout.tp == 4).unwrap().tp_comm_s;
        assert!(tp4(&with_fits) > tp4(&formula));
    }

    #[test]
    fn a_plan_that_fits_nowhere_names_the_memory_it_needs() {
        let net = gpt(2, 512, 512, 8);
        let config = PlanConfig {
            global_batch: 8,
            gpus: vec![1, 2],
            ..PlanConfig::default()
        };
        let r = plan_on(&net, 0.5, &config);
        assert!(!r.fits_anywhere);
        let msg = r.no_fit_message().unwrap();
        let s = r.smallest.as_ref().unwrap();
        assert!(
            msg.starts_with("no plan fits: the smallest peak is"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("{:.1} GiB", s.memory.total / GIB)),
            "{msg}"
        );
        assert!(r.rows.iter().all(|row| row.memory.total >= s.memory.total));
        assert!(r.rows.iter().all(|row| !row.pareto));
    }

    #[test]
    fn prices_parse_and_bad_ones_are_named() {
        let t = PriceTable::parse(
            "date = \"2026-11\"\n[per_gpu_hour]\na100 = 3.5\n\"Tesla T4\" = 0.5\n",
        )
        .unwrap();
        let spec = device(40.0);
        assert_eq!(t.price("a100", &spec), Some(3.5));
        let t4 = DeviceSpec {
            name: "Tesla T4".into(),
            ..spec.clone()
        };
        assert_eq!(t.price("t4", &t4), Some(0.5));
        // A GPU seen in another data type costs what the GPU costs.
        let t4_half = DeviceSpec {
            dtype: perfcast_core::DType::Fp16,
            ..t4.clone()
        };
        assert_eq!(t.price("t4:fp16", &t4_half), Some(0.5));
        assert_eq!(t.price("h100", &spec), None);
        let e = PriceTable::parse("[per_gpu_hour]\na100 = -1\n").unwrap_err();
        assert!(e.contains("`per_gpu_hour.a100`") && e.contains("-1"), "{e}");
        let e = PriceTable::parse("[per_gpu_hour]\na100 = 1e308\n").unwrap_err();
        assert!(
            e.contains("between 0 and 1000000") && e.contains("1e308"),
            "{e}"
        );
        assert!(PriceTable::parse("per_gpu_hour = 3").is_err());
    }

    #[test]
    fn layouts_multiply_to_the_count() {
        assert_eq!(layouts(1), vec![(1, 1, 1)]);
        let l8 = layouts(8);
        assert_eq!(l8.len(), 10);
        assert!(l8.iter().all(|(d, t, p)| d * t * p == 8));
        assert_eq!(micro_batch_counts(4), vec![1, 2, 4]);
        assert_eq!(micro_batch_counts(6), vec![1, 2, 4, 6]);
        assert_eq!(micro_batch_counts(1), vec![1]);
    }
}

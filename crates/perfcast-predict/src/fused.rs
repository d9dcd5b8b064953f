//! Networks predicted as a compiler or inference engine runs them: the layers grouped into
//! kernels by a [`Fusion`] policy ([`perfcast_core::fusion`]), each kernel predicted by a rule
//! built on the bundle's own models and kept between the fused region's roofline and the sum
//! of its layers' predictions.
//!
//! The rules, per [`RegionKind`]:
//! - epilogue: the GEMM's prediction plus the bytes the epilogue adds (a residual or mask
//!   read, an extra output) at the device's bandwidth;
//! - memory-bound: the bundle's `add` model for one kernel moving the region's boundary bytes
//!   (an add of `E` elements reads `2E` and writes `E`, so `E` is a third of those bytes);
//!   under [`Fusion::Engine`] in half precision, at most [`ENGINE_ELEMS_PER_SM_CYCLE`]
//!   elements moved per SM per cycle besides;
//! - attention: the two matmuls' predictions, with no scale, mask, softmax or dropout kernel
//!   (in a training step plus the scores matmul's forward again, which the fused backward
//!   recomputes);
//! - merged GEMM: the bundle's prediction for the one linear layer of the summed width.

use std::borrow::Cow;

use perfcast_core::features::{self, F32_BYTES};
use perfcast_core::fusion::{Fusion, Region, RegionKind, fuse};
use perfcast_core::{Context, Elementwise, ModuleKind, ModuleSpec, Network, Phase};

use crate::error::Result;
// The report is its own file because the predictor's network answer carries it.
pub use crate::fusion_report::FusionReport;
use crate::predictor::{LayerPrediction, ModulePrediction, NetworkPrediction, Predictor};

/// Elements (read plus written) a half-precision memory-bound kernel of an inference engine
/// moves per SM per clock cycle at most. Engines' hand-written fused kernels (SiLU-and-multiply,
/// rotary embeddings) load one 2-byte element per thread, so the loads an SM keeps in flight,
/// not DRAM, pace them on a GPU with much bandwidth per SM; fitted on Vidur's fused kernels by
/// `bench/gpu/vidur/fused.py` (docs/accuracy.md, "Fused kernels").
pub const ENGINE_ELEMS_PER_SM_CYCLE: f64 = 3.0;

/// The warning on a fused kernel raised to its region's roofline.
pub const RAISED_TO_REGION: &str = "raised to the fused region's roofline";
/// The warning on a fused kernel whose rule answered more than its layers' sum.
pub const CAPPED_AT_PARTS: &str = "capped at the sum of its layers' predictions";

/// One fused region's prediction before it is bounded: ms, the model that answered, and the
/// module in words.
struct Rule {
    ms: f64,
    model: Cow<'static, str>,
    /// Whether the spec roofline answered in place of a model.
    fallback: bool,
    module: String,
    warnings: Vec<String>,
}

impl Predictor {
    /// Every kernel of `network` in `context` as `policy` groups its layers, and their sum.
    /// [`Fusion::None`] is [`Predictor::predict_network`] itself.
    ///
    /// A fused region's time is its rule's answer (see the [module docs](self)) raised to the
    /// region's roofline and capped at the sum of its layers' eager predictions: fusing never
    /// makes a kernel slower than running its layers apart, nor faster than the device's
    /// peak and bandwidth allow for its FLOPs and boundary bytes. The network's
    /// `roofline_ms` is the sum of the regions' bounds.
    pub fn predict_network_fused(
        &self,
        network: &Network,
        context: &Context,
        policy: Fusion,
    ) -> Result<NetworkPrediction> {
        let prepared = self.prepared(network)?;
        let eager = self.predict_prepared(&prepared, context)?;
        if policy == Fusion::None {
            return Ok(eager);
        }
        let regions = fuse(network, policy)?;
        let forward = crate::predictor::forward_of(context);
        // Each layer's own bound, as the eager roofline counts it.
        let floors: Vec<f64> = prepared
            .layers
            .iter()
            .zip(&prepared.trims)
            .map(|((_, _, i), trim)| {
                let at = if trim.is_some() { &forward } else { context };
                self.least_ms(&prepared.unique[*i], at)
            })
            .collect();
        let mut layers = Vec::with_capacity(regions.len());
        let mut roofline_ms = 0.0;
        for region in &regions {
            if !region.is_fused() {
                let i = region.members[0];
                layers.push(eager.layers[i].clone());
                roofline_ms += floors[i];
                continue;
            }
            let parts_ms: f64 = region
                .members
                .iter()
                .map(|&i| eager.layers[i].prediction.ms)
                .sum();
            let floor_ms = self.region_floor_ms(network, region, context, &floors);
            let rule = self.rule(network, region, context, &eager, policy)?;
            let mut warnings = rule.warnings;
            let (ms, note) = bound(rule.ms, floor_ms, parts_ms);
            warnings.extend(note.map(String::from));
            let anchor = &network.layers[region.members[0]];
            layers.push(LayerPrediction {
                name: region.name(network).into(),
                module: rule.module.into(),
                prediction: ModulePrediction {
                    kind: anchor.spec.kind(),
                    ms,
                    model: rule.model,
                    fallback: rule.fallback,
                    warnings,
                },
                fused: region
                    .members
                    .iter()
                    .map(|&i| eager.layers[i].name.clone())
                    .collect(),
            });
            roofline_ms += floor_ms;
        }
        let layer_sum_ms: f64 = layers.iter().map(|l| l.prediction.ms).sum();
        let fallback_layers = layers.iter().filter(|l| l.prediction.fallback).count();
        let mut shape = prepared.shape.clone();
        shape.layers -= network.layers.len() - regions.len();
        let composed = self.composition(&shape, layer_sum_ms, context, || {
            crate::predictor::linear_ms_of(&eager.layers)
        });
        Ok(NetworkPrediction {
            network: network.name.clone(),
            context: context.clone(),
            total_ms: composed.as_ref().map_or(layer_sum_ms, |c| c.total_ms),
            layers,
            layer_sum_ms,
            roofline_ms,
            composed,
            fallback_layers,
            fusion: Some(FusionReport {
                policy,
                graph: policy.graph_style().to_string(),
                eager_layers: network.layers.len(),
                kernels: regions.len(),
                eager_total_ms: eager.total_ms,
                eager_roofline_ms: eager.roofline_ms,
            }),
        })
    }

    /// The least time a fused region allows, ms: its roofline on a GPU (never above the sum
    /// of its layers' own bounds, which a training step's trimmed backward can undercut), the
    /// layers' compute floors on a CPU (fusion saves traffic, which a CPU floor does not count).
    fn region_floor_ms(
        &self,
        network: &Network,
        region: &Region,
        context: &Context,
        floors: &[f64],
    ) -> f64 {
        let parts: f64 = region.members.iter().map(|&i| floors[i]).sum();
        if !self.gpu() {
            return parts;
        }
        let device = &self.bundle().manifest.device;
        (region.least_time_s(network, context, device) * 1e3).min(parts)
    }

    /// A fused region's time by its kind's rule, before bounds.
    fn rule(
        &self,
        network: &Network,
        region: &Region,
        context: &Context,
        eager: &NetworkPrediction,
        policy: Fusion,
    ) -> Result<Rule> {
        let device = &self.bundle().manifest.device;
        let anchor = region.members[0];
        let of = |i: usize| &eager.layers[i].prediction;
        let others = region.members.len() - 1;
        Ok(match region.kind {
            RegionKind::Epilogue => {
                let d = features::derive(&network.layers[anchor].spec, context.batch);
                let (read, written) = region.bytes(context.batch);
                let extra = (read + written - d.bytes_read - d.bytes_written).max(0.0);
                // A training step reads the extra operand again in the backward pass.
                let passes = if context.phase == Phase::Training {
                    2.0
                } else {
                    1.0
                };
                let extra_ms = passes * extra * device.element_scale()
                    / (device.mem_bandwidth_gbs * 1e9)
                    * 1e3;
                Rule {
                    ms: of(anchor).ms + extra_ms,
                    model: of(anchor).model.clone(),
                    fallback: of(anchor).fallback,
                    module: format!(
                        "{} + {others} op{} in its epilogue",
                        eager.layers[anchor].module,
                        if others == 1 { "" } else { "s" }
                    ),
                    warnings: Vec::new(),
                }
            }
            RegionKind::Memory => {
                let (read, written) = region.bytes(context.batch);
                let spec = equivalent_add(read + written, context.batch);
                let p = self.predict_module(&spec, context)?;
                let paced = if policy == Fusion::Engine {
                    engine_paced_ms((read + written) / F32_BYTES, device)
                } else {
                    0.0
                };
                Rule {
                    ms: p.ms.max(paced),
                    model: p.model,
                    fallback: p.fallback,
                    module: format!(
                        "{} ops as one memory-bound kernel, {:.1} MB{}",
                        region.members.len(),
                        (read + written) * device.element_scale() / 1e6,
                        if paced > p.ms {
                            ", paced by its SMs' loads"
                        } else {
                            ""
                        }
                    ),
                    warnings: p.warnings,
                }
            }
            RegionKind::Attention => {
                let matmuls: Vec<usize> = region
                    .members
                    .iter()
                    .copied()
                    .filter(|&i| network.layers[i].spec.kind() == ModuleKind::Matmul)
                    .collect();
                // The fused backward keeps no scores, so it recomputes them: one more
                // forward pass of the scores matmul.
                let recompute = if context.phase == Phase::Training {
                    let forward = crate::predictor::forward_of(context);
                    self.predict_module(&network.layers[anchor].spec, &forward)?
                        .ms
                } else {
                    0.0
                };
                Rule {
                    ms: matmuls.iter().map(|&i| of(i).ms).sum::<f64>() + recompute,
                    model: of(anchor).model.clone(),
                    fallback: matmuls.iter().any(|&i| of(i).fallback),
                    module: format!(
                        "attention as one kernel: {}; no score matrix in memory",
                        matmuls
                            .iter()
                            .map(|&i| &*eager.layers[i].module)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    warnings: Vec::new(),
                }
            }
            RegionKind::Merged => {
                let spec = region
                    .merged_linear(network)
                    .unwrap_or_else(|| network.layers[anchor].spec.clone());
                let p = self.predict_module(&spec, context)?;
                Rule {
                    ms: p.ms,
                    model: p.model,
                    fallback: p.fallback,
                    module: format!("{} (merged GEMM)", spec.describe()),
                    warnings: p.warnings,
                }
            }
            RegionKind::Single => Rule {
                ms: of(anchor).ms,
                model: of(anchor).model.clone(),
                fallback: of(anchor).fallback,
                module: eager.layers[anchor].module.to_string(),
                warnings: Vec::new(),
            },
        })
    }
}

/// A fused kernel's time: the rule's `ms` raised to the region's `floor` (a NaN too) and
/// capped at its layers' sum `parts`, with the warning saying which, if either, applied.
fn bound(ms: f64, floor: f64, parts: f64) -> (f64, Option<&'static str>) {
    if ms.is_nan() || ms < floor {
        (floor, Some(RAISED_TO_REGION))
    } else if ms > parts {
        (parts, Some(CAPPED_AT_PARTS))
    } else {
        (ms, None)
    }
}

/// The least time, ms, an inference engine's half-precision memory-bound kernel takes to move
/// `elems` elements at [`ENGINE_ELEMS_PER_SM_CYCLE`] over the device's SMs at its clock, its
/// launch included; 0 for 4-byte types (twice the bytes per load keep DRAM the limit) and on
/// a spec without SMs or clock.
fn engine_paced_ms(elems: f64, device: &perfcast_core::DeviceSpec) -> f64 {
    if device.dtype.bytes() >= F32_BYTES || device.cores == 0 || device.clock_mhz <= 0.0 {
        return 0.0;
    }
    let per_ms = ENGINE_ELEMS_PER_SM_CYCLE * f64::from(device.cores) * device.clock_mhz * 1e3;
    device.launch_us.unwrap_or(0.0) / 1e3 + elems / per_ms
}

/// An element-wise add moving `bytes` (fp32) over `batch` samples: `E` elements read twice
/// and written once per sample, laid out as rows of 1024 (and past 16384 rows, planes of
/// 1024 rows, so no axis leaves the ranges the bundle's add model learned).
fn equivalent_add(bytes: f64, batch: usize) -> ModuleSpec {
    const ROW: usize = 1024;
    const ROWS: usize = 16384;
    let elems = (bytes / (3.0 * F32_BYTES * batch as f64)).ceil().max(1.0) as usize;
    let rows = elems.div_ceil(ROW);
    let shape = if elems <= ROW {
        [1, 1, elems]
    } else if rows <= ROWS {
        [1, rows, ROW]
    } else {
        [rows.div_ceil(ROW), ROW, ROW]
    };
    ModuleSpec::Add(Elementwise { shape })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fused_kernel_is_kept_between_its_roofline_and_its_parts() {
        assert_eq!(bound(2.0, 1.0, 3.0), (2.0, None));
        assert_eq!(bound(0.5, 1.0, 3.0), (1.0, Some(RAISED_TO_REGION)));
        assert_eq!(bound(f64::NAN, 1.0, 3.0), (1.0, Some(RAISED_TO_REGION)));
        assert_eq!(bound(4.0, 1.0, 3.0), (3.0, Some(CAPPED_AT_PARTS)));
        // At the edges nothing is said.
        assert_eq!(bound(1.0, 1.0, 3.0), (1.0, None));
        assert_eq!(bound(3.0, 1.0, 3.0), (3.0, None));
    }

    #[test]
    fn an_engines_pace_counts_half_precision_elements_over_the_sms() {
        let fp32 = perfcast_core::known::lookup("nvidia-a100-sxm4-80gb").unwrap();
        assert_eq!(engine_paced_ms(1e8, &fp32), 0.0);
        let mut half = fp32.at_dtype(perfcast_core::DType::Fp16).unwrap();
        half.launch_us = None;
        let one = engine_paced_ms(1e8, &half);
        let per_ms = ENGINE_ELEMS_PER_SM_CYCLE * f64::from(half.cores) * half.clock_mhz * 1e3;
        assert!((one - 1e8 / per_ms).abs() < 1e-12, "{one}");
        half.cores *= 2;
        assert!((engine_paced_ms(1e8, &half) - one / 2.0).abs() < 1e-12);
        half.launch_us = Some(5.0);
        assert!((engine_paced_ms(1e8, &half) - one / 2.0 - 0.005).abs() < 1e-12);
    }

    #[test]
    fn the_equivalent_add_moves_at_least_the_region_bytes() {
        for (bytes, batch) in [(12.0 * 100.0, 1), (12.0 * 8.0 * 5000.0, 8), (1.0, 4)] {
            let spec = equivalent_add(bytes, batch);
            let d = features::derive(&spec, batch);
            let moved = d.bytes_read + d.bytes_written;
            assert!(moved >= bytes, "{moved} < {bytes}");
            // Rounded up to a row of 1024 at most below 16384 rows.
            assert!(moved <= bytes + 12.0 * 1024.0 * batch as f64, "{moved}");
        }
        // 20 x 1024 x 1024 scores per sample: planes of 1024 rows, no row count past 16384.
        assert_eq!(
            equivalent_add(12.0 * 20.0 * 1024.0 * 1024.0, 1),
            ModuleSpec::Add(Elementwise {
                shape: [20, 1024, 1024]
            })
        );
        assert_eq!(
            equivalent_add(12.0 * 100.0, 1),
            ModuleSpec::Add(Elementwise { shape: [1, 1, 100] })
        );
    }
}

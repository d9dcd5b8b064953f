//! A whole step timed on one GPU (the anchor) carried to others with a bundle, PROFET's use:
//! the measured time times the bundle's target/anchor ratio for the same network, beside the
//! plain ratio of peak FLOP/s (`perfcast map --measured-ms`).

use std::path::Path;

use perfcast_core::{Context, DeviceSpec, Network};
use serde::Serialize;

use crate::error::Result;
use crate::{Bundle, Predictor};

/// One target of a mapped network step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MappedStep {
    /// The target (its slug).
    pub device: String,
    /// The bundle's prediction for the target, ms.
    pub predicted_ms: f64,
    /// The measured step times the bundle's target/anchor ratio, ms.
    pub bundle_ratio_ms: f64,
    /// The measured step times the anchor's over the target's peak FLOP/s, ms.
    pub flop_ratio_ms: f64,
    /// What `map` answers: the bundle ratio on a device the bundle was trained on (or in another
    /// data type than the anchor's); on another, the geometric mean of the two ratios, which
    /// scored better than either with the target left out of training (docs/accuracy.md,
    /// "Anchor mapping on DeepBench").
    pub mapped_ms: f64,
    /// How `mapped_ms` was formed.
    pub method: &'static str,
    /// The spec roofline of the step on the target, ms (no answer is below it).
    pub roofline_ms: f64,
}

/// `network` at `context` measured `measured_ms` on `anchor`, mapped to each of `targets` with
/// the bundle at `bundle`; returns the bundle's prediction on the anchor too, ms.
pub fn map_step(
    bundle: &Path,
    network: &Network,
    context: &Context,
    measured_ms: f64,
    anchor: &DeviceSpec,
    targets: &[DeviceSpec],
) -> Result<(f64, Vec<MappedStep>)> {
    let predict = |device: &DeviceSpec| -> Result<_> {
        let bundle = Bundle::load_for_device(bundle, device)?;
        let trained = bundle
            .manifest
            .trained_devices
            .iter()
            .any(|d| d.name == device.name && d.dtype == device.dtype);
        let p = Predictor::new(bundle).predict_network(network, context)?;
        Ok((p.total_ms, p.roofline_ms, trained))
    };
    let (anchor_ms, _, _) = predict(anchor)?;
    let mut out = Vec::with_capacity(targets.len());
    for target in targets {
        let (predicted_ms, roofline_ms, trained) = predict(target)?;
        let bundle_ratio_ms = measured_ms * predicted_ms / anchor_ms;
        let flop_ratio_ms = measured_ms * anchor.peak_gflops / target.peak_gflops;
        let (mapped_ms, method) = if trained {
            (
                bundle_ratio_ms,
                "bundle ratio (a training device of the bundle)",
            )
        } else if target.dtype != anchor.dtype {
            // Peaks of two data types do not compare the way the same kernels do.
            (
                bundle_ratio_ms,
                "bundle ratio (another data type than the anchor's)",
            )
        } else {
            (
                (bundle_ratio_ms * flop_ratio_ms).sqrt(),
                "geometric mean of the bundle and FLOP ratios (target not trained on)",
            )
        };
        out.push(MappedStep {
            device: target.slug(),
            predicted_ms,
            bundle_ratio_ms,
            flop_ratio_ms,
            mapped_ms: mapped_ms.max(roofline_ms),
            method,
            roofline_ms,
        });
    }
    Ok((anchor_ms, out))
}

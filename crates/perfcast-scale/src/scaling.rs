//! Data-parallel scaling of one network (`perfcast scale predict`): the analytical model over
//! device counts with the compute time from a bundle or a measurement, the optimiser update
//! from an explicit time or the device's memory bandwidth, and the report that says where
//! each number came from.

use std::path::PathBuf;

use perfcast_core::progress::Observer;
use perfcast_core::{DeviceSpec, Network};
use serde::Serialize;

use crate::analytic::{
    ComputeModel, DataParallelModel, IterationEstimate, LayerCost, Optimizer, Overlap, Parallelism,
    layer_params, layers_from_measurement,
};
use crate::collective::Strategy;
use crate::error::{Error, Result};
use crate::link::Link;
use perfcast_core::fmt::sig3;

/// One device count, in milliseconds, for output.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRow {
    /// Devices.
    pub gpus: usize,
    /// Samples per device.
    pub per_device_batch: usize,
    /// Forward pass, ms.
    pub forward_ms: f64,
    /// Backward pass, ms.
    pub backward_ms: f64,
    /// Link busy with gradients, ms.
    pub comm_ms: f64,
    /// The part of it not hidden behind the backward pass, ms.
    pub exposed_comm_ms: f64,
    /// Optimiser update, ms.
    pub update_ms: f64,
    /// One iteration, ms.
    pub iteration_ms: f64,
    /// Samples per second.
    pub throughput: f64,
    /// Against one device.
    pub speedup: f64,
    /// Speedup over devices.
    pub efficiency: f64,
    /// Messages per iteration.
    pub messages: usize,
}

impl From<&IterationEstimate> for ScalingRow {
    fn from(it: &IterationEstimate) -> ScalingRow {
        ScalingRow {
            gpus: it.devices,
            per_device_batch: it.per_device_batch,
            forward_ms: it.forward_s * 1e3,
            backward_ms: it.backward_s * 1e3,
            comm_ms: it.comm_s * 1e3,
            exposed_comm_ms: it.exposed_comm_s * 1e3,
            update_ms: it.update_s * 1e3,
            iteration_ms: it.iteration_s * 1e3,
            throughput: it.throughput,
            speedup: it.speedup,
            efficiency: it.efficiency,
            messages: it.messages,
        }
    }
}

/// What `scale predict` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingReport {
    /// Network name.
    pub network: String,
    /// Parameters.
    pub parameters: f64,
    /// fp32 gradient bytes.
    pub gradient_bytes: f64,
    /// Samples per iteration over all devices.
    pub global_batch: usize,
    /// `bundle` or `measured`.
    pub compute_source: String,
    /// The bundle, where it gave the compute time.
    pub bundle: Option<PathBuf>,
    /// The device the compute time is for (the bundle's), where known.
    pub compute_device: Option<String>,
    /// The spec given for the devices.
    pub device_spec: Option<DeviceSpec>,
    /// How work is split.
    pub parallelism: Parallelism,
    /// Gradient exchange.
    pub strategy: Strategy,
    /// Link between devices.
    pub link: Link,
    /// Overlap of communication with the backward pass.
    pub overlap: Overlap,
    /// Optimiser.
    pub optimizer: Optimizer,
    /// How the update time was obtained.
    pub update_source: String,
    /// Per device count.
    pub rows: Vec<ScalingRow>,
}

/// Where the compute time comes from.
// One value per command: the size difference between the variants (the device spec) costs
// nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Compute<'a> {
    /// A measured step of the whole global batch on one device, ms, scaled per sample to the
    /// per-device batch and spread over the layers by FLOPs; `backward_share` of it is the
    /// backward pass.
    Measured {
        /// Milliseconds of one training step of the global batch.
        compute_ms: f64,
        /// The backward pass's share of the step, in [0, 1).
        backward_share: f64,
    },
    /// A bundle's per-layer predictions.
    Bundle {
        /// The bundle.
        path: PathBuf,
        /// The device it predicts.
        device: DeviceSpec,
        /// Its per-layer forward and backward times at a per-device batch.
        layers: &'a dyn ComputeModel,
    },
}

/// Checks that `global_batch` can be split over each of `gpus` devices.
pub fn check_split(global_batch: usize, gpus: &[usize]) -> Result<()> {
    if global_batch < 1 {
        return Err(Error::Input("`--batch` must be at least 1, got 0".into()));
    }
    if gpus.is_empty() {
        return Err(Error::Input(
            "`--gpus` needs at least one device count".into(),
        ));
    }
    if let Some(&bad) = gpus.iter().find(|&&p| p == 0 || p > global_batch) {
        return Err(Error::Input(format!(
            "`--gpus {bad}`: the global batch {global_batch} cannot be split over {bad} devices"
        )));
    }
    Ok(())
}

/// Bucketed overlap with buckets of `bucket_mb` MiB (PyTorch DDP's default is 25).
pub fn bucketed(bucket_mb: f64) -> Result<Overlap> {
    if !(bucket_mb.is_finite() && bucket_mb > 0.0) {
        return Err(Error::Input(format!(
            "`--bucket-mb` must be positive, got {bucket_mb}"
        )));
    }
    Ok(Overlap::Bucketed {
        bucket_bytes: bucket_mb * 1024.0 * 1024.0,
    })
}

/// Checks an optimiser update time given in ms.
pub fn check_update_ms(update_ms: Option<f64>) -> Result<()> {
    match update_ms {
        Some(ms) if !(ms.is_finite() && ms >= 0.0) => Err(Error::Input(format!(
            "`--update-ms` must not be negative, got {ms}"
        ))),
        _ => Ok(()),
    }
}

/// Checks a measured compute time and returns per-layer costs at any per-device batch:
/// `compute_ms` (a step of `global_batch` samples on one device) scaled per sample and spread
/// over the layers by FLOPs.
pub fn measured_compute(
    network: &Network,
    global_batch: usize,
    compute_ms: f64,
    backward_share: f64,
) -> Result<impl Fn(usize) -> Result<Vec<LayerCost>> + use<>> {
    if !(compute_ms.is_finite() && compute_ms > 0.0) {
        return Err(Error::Input(format!(
            "`--compute-ms` must be a positive number of milliseconds, got {compute_ms}"
        )));
    }
    if !(backward_share.is_finite() && (0.0..1.0).contains(&backward_share)) {
        return Err(Error::Input(format!(
            "`--backward-share` must be in [0, 1), got {backward_share}"
        )));
    }
    let per_sample_s = compute_ms * 1e-3 / global_batch.max(1) as f64;
    let network = network.clone();
    Ok(move |b: usize| {
        let step = per_sample_s * b as f64;
        Ok(layers_from_measurement(
            &network,
            step * (1.0 - backward_share),
            step * backward_share,
        ))
    })
}

/// Predicts an iteration of `network` at each of `gpus` devices for `global_batch` samples
/// under `model` (its `update_s` is filled in here: `update_ms` when given, else `optimizer`'s
/// bytes per parameter over the memory bandwidth of `device_spec` or the bundle's device).
/// Notes go to `observer`: no update time without a device, and an efficiency above 100%.
#[allow(clippy::too_many_arguments)]
pub fn predict_scaling(
    network: &Network,
    global_batch: usize,
    gpus: &[usize],
    mut model: DataParallelModel,
    optimizer: Optimizer,
    update_ms: Option<f64>,
    device_spec: Option<DeviceSpec>,
    compute: Compute<'_>,
    observer: &dyn Observer,
) -> Result<(ScalingReport, Vec<IterationEstimate>)> {
    check_split(global_batch, gpus)?;
    check_update_ms(update_ms)?;
    let parameters: f64 = layer_params(network).iter().map(|(_, p)| p).sum();
    let measured;
    let (bundle, bundle_device, layers): (Option<PathBuf>, Option<DeviceSpec>, &dyn ComputeModel) =
        match &compute {
            Compute::Measured {
                compute_ms,
                backward_share,
            } => {
                measured = measured_compute(network, global_batch, *compute_ms, *backward_share)?;
                (None, None, &measured)
            }
            Compute::Bundle {
                path,
                device,
                layers,
            } => (Some(path.clone()), Some(device.clone()), *layers),
        };
    // The update streams the optimiser state through device memory: the spec given, else
    // the bundle's device (the one the compute time is for).
    let memory = device_spec.as_ref().or(bundle_device.as_ref());
    let (update_s, update_source) = match (update_ms, memory) {
        (Some(ms), _) => (ms * 1e-3, "`--update-ms`".to_string()),
        (None, Some(d)) => (
            optimizer.update_s(parameters, d.mem_bandwidth_gbs),
            format!(
                "{} bytes per parameter over the {} GB/s of `{}`",
                optimizer.bytes_per_param(),
                sig3(d.mem_bandwidth_gbs),
                d.name
            ),
        ),
        (None, None) => {
            observer.note(
                "note: no optimiser update time without a device spec (pass `--device-spec` \
                 or `--update-ms`)",
            );
            (0.0, "none: no device spec".to_string())
        }
    };
    model.update_s = update_s;
    let rows = model.scaling(gpus, global_batch, layers)?;
    if let Some(r) = rows.iter().find(|r| r.efficiency > 1.0 + 1e-6) {
        observer.note(&format!(
            "warning: efficiency above 100% at {} devices: the compute time at per-device batch \
             {} is less than 1/{} of that at batch {}; per-sample compute should not fall with \
             smaller batches (are the predictions outside the bundle's trained ranges?)",
            r.devices, r.per_device_batch, r.devices, global_batch
        ));
    }
    let report = ScalingReport {
        network: network.name.clone(),
        parameters,
        gradient_bytes: parameters * 4.0,
        global_batch,
        compute_source: if bundle.is_some() {
            "bundle".into()
        } else {
            "measured".into()
        },
        bundle,
        compute_device: bundle_device.map(|d| d.name),
        device_spec,
        parallelism: model.parallelism,
        strategy: model.strategy.clone(),
        link: model.link.clone(),
        overlap: model.overlap,
        optimizer,
        update_source,
        rows: rows.iter().map(ScalingRow::from).collect(),
    };
    Ok((report, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;
    use perfcast_core::zoo;

    fn model() -> DataParallelModel {
        DataParallelModel {
            parallelism: Parallelism::Data,
            strategy: Strategy::Ring,
            link: Link::parse("nvlink").expect("link"),
            overlap: Overlap::None,
            update_s: 0.0,
        }
    }

    #[test]
    fn a_measured_step_scales_and_the_update_comes_from_the_spec() {
        let net = zoo::build("lenet5", None).expect("lenet5");
        let spec = DeviceSpec {
            mem_bandwidth_gbs: 100.0,
            ..perfcast_core::testing::cpu_device()
        };
        let (report, rows) = predict_scaling(
            &net,
            64,
            &[1, 2],
            model(),
            Optimizer::Sgd,
            None,
            Some(spec),
            Compute::Measured {
                compute_ms: 64.0,
                backward_share: 0.5,
            },
            &Silent,
        )
        .expect("scaling");
        assert_eq!(report.compute_source, "measured");
        assert_eq!(report.bundle, None);
        // 1 ms per sample: 64 ms on one device, 32 on each of two, half of it forward.
        assert!((report.rows[0].forward_ms - 32.0).abs() < 1e-9);
        assert!((report.rows[1].forward_ms - 16.0).abs() < 1e-9);
        // SGD streams 12 bytes per parameter at 100 GB/s.
        let update_ms = report.parameters * 12.0 / 100e9 * 1e3;
        assert!((rows[0].update_s * 1e3 - update_ms).abs() < 1e-12);
        assert!(report.update_source.starts_with("12 bytes per parameter"));

        let err = predict_scaling(
            &net,
            64,
            &[1],
            model(),
            Optimizer::Sgd,
            Some(0.0),
            None,
            Compute::Measured {
                compute_ms: 10.0,
                backward_share: 1.0,
            },
            &Silent,
        )
        .expect_err("share of 1")
        .to_string();
        assert_eq!(err, "`--backward-share` must be in [0, 1), got 1");
    }
}

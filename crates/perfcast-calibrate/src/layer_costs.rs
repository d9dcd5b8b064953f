//! A bundle's per-layer predictions as the compute time of perfcast-scale's models: forward
//! and backward seconds of every layer at a per-device batch (the training phase is forward +
//! backward), for `scale predict` ([`BundleCompute`]) and `plan` ([`BundleLayerTimes`],
//! [`plan_with_bundle`]).

use std::cell::Cell;

use perfcast_core::fusion::{Fusion, fuse};
use perfcast_core::progress::Observer;
use perfcast_core::{Context, DeviceSpec, Network, Phase};
use perfcast_scale::Link;
use perfcast_scale::plan::{
    DeviceLinks, DeviceOption, LayerTimes, PlanConfig, PlanReport, PriceTable, default_link,
    default_pair_link, plan,
};
use perfcast_scale::{ComputeModel, LayerCost};

use crate::predictor::{NetworkPrediction, Predictor, PreparedNetwork};

/// The forward and training-step predictions of a prepared network at `batch`.
fn both_phases(
    predictor: &Predictor,
    prepared: &PreparedNetwork,
    batch: usize,
    threads: usize,
) -> perfcast_scale::Result<(NetworkPrediction, NetworkPrediction)> {
    let at = |phase| {
        predictor.predict_prepared(
            prepared,
            &Context {
                batch,
                phase,
                threads,
                utilisation: 0.0,
            },
        )
    };
    let wrap = |e: perfcast_predict::Error| perfcast_scale::Error::Compute {
        batch,
        message: e.to_string(),
    };
    Ok((
        at(Phase::Inference).map_err(wrap)?,
        at(Phase::Training).map_err(wrap)?,
    ))
}

/// A network's layer costs for `scale predict`: forward and backward seconds from the
/// bundle's predictions and 4 bytes of gradient per parameter. The first time a prediction
/// leaves the bundle's trained ranges, a warning goes to the observer.
pub struct BundleCompute<'a> {
    predictor: &'a Predictor,
    prepared: PreparedNetwork,
    layers: Vec<(String, f64)>,
    threads: usize,
    observer: &'a dyn Observer,
    warned: Cell<bool>,
}

impl<'a> BundleCompute<'a> {
    /// The costs of `network` predicted at `threads` compute threads.
    pub fn new(
        predictor: &'a Predictor,
        network: &Network,
        threads: usize,
        observer: &'a dyn Observer,
    ) -> crate::Result<BundleCompute<'a>> {
        if threads < 1 {
            return Err(crate::Error::Input(
                "`--threads` must be at least 1, got 0".into(),
            ));
        }
        Ok(BundleCompute {
            prepared: predictor.prepare(network)?,
            predictor,
            layers: perfcast_scale::analytic::layer_params(network),
            threads,
            observer,
            warned: Cell::new(false),
        })
    }
}

impl ComputeModel for BundleCompute<'_> {
    fn step(&self, b: usize) -> perfcast_scale::Result<Vec<LayerCost>> {
        let (fwd, train) = both_phases(self.predictor, &self.prepared, b, self.threads)?;
        let outside = train
            .layers
            .iter()
            .chain(&fwd.layers)
            .filter(|l| !l.prediction.warnings.is_empty())
            .count();
        if outside > 0 && !self.warned.get() {
            self.warned.set(true);
            self.observer.note(&format!(
                "warning: {outside} layer prediction(s) at per-device batch {b} leave \
                 the bundle's trained ranges (`perfcast predict --network ... \
                 --batch {b} --phase training` lists them)"
            ));
        }
        Ok(fwd
            .layers
            .iter()
            .zip(&train.layers)
            .zip(&self.layers)
            .map(|((f, t), (name, params))| LayerCost {
                name: name.clone(),
                forward_s: f.prediction.ms * 1e-3,
                // The training phase is forward + backward.
                backward_s: (t.prediction.ms - f.prediction.ms).max(0.0) * 1e-3,
                grad_bytes: params * 4.0,
            })
            .collect())
    }
}

/// Per-layer forward and backward seconds of any network for `plan`, from a bundle's
/// predictor for one device (one thread). The first time predictions leave the bundle's
/// trained ranges, a warning naming `label` goes to the observer.
pub struct BundleLayerTimes<'a> {
    predictor: Predictor,
    label: String,
    observer: &'a dyn Observer,
    warned: Cell<bool>,
    fusion: Fusion,
}

impl<'a> BundleLayerTimes<'a> {
    /// Layer times from `predictor`, named `label` in warnings.
    pub fn new(predictor: Predictor, label: &str, observer: &'a dyn Observer) -> Self {
        BundleLayerTimes {
            predictor,
            label: label.to_string(),
            observer,
            warned: Cell::new(false),
            fusion: Fusion::None,
        }
    }

    /// The layers' times as `fusion` runs them: each fused kernel's time shared out over
    /// its layers in proportion to their eager times (stages still cut between layers).
    pub fn with_fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = fusion;
        self
    }

    /// Scales `ms` (per layer, eager) so each fused region of `network` sums to its fused
    /// kernel's prediction in `phase`.
    fn fuse_into(
        &self,
        network: &Network,
        batch: usize,
        phase: Phase,
        ms: &mut [f64],
    ) -> perfcast_scale::Result<()> {
        let wrap = |message: String| perfcast_scale::Error::Compute { batch, message };
        let context = Context {
            batch,
            phase,
            threads: 1,
            utilisation: 0.0,
        };
        let fused = self
            .predictor
            .predict_network_fused(network, &context, self.fusion)
            .map_err(|e| wrap(e.to_string()))?;
        let regions = fuse(network, self.fusion).map_err(|e| wrap(e.to_string()))?;
        for (kernel, region) in fused.layers.iter().zip(&regions) {
            let parts: f64 = region.members.iter().map(|&i| ms[i]).sum();
            if parts > 0.0 {
                let scale = kernel.prediction.ms / parts;
                for &i in &region.members {
                    ms[i] *= scale;
                }
            }
        }
        Ok(())
    }
}

impl LayerTimes for BundleLayerTimes<'_> {
    fn layer_times(
        &self,
        network: &Network,
        batch: usize,
    ) -> perfcast_scale::Result<Vec<(f64, f64)>> {
        let prepared =
            self.predictor
                .prepare(network)
                .map_err(|e| perfcast_scale::Error::Compute {
                    batch,
                    message: e.to_string(),
                })?;
        let (fwd, train) = both_phases(&self.predictor, &prepared, batch, 1)?;
        let outside = fwd
            .layers
            .iter()
            .chain(&train.layers)
            .filter(|l| l.prediction.warnings.iter().any(|w| w.contains("range")))
            .count();
        if outside > 0 && !self.warned.get() {
            self.warned.set(true);
            self.observer.note(&format!(
                "warning: `{}`: {outside} layer prediction(s) of `{}` at batch {batch} leave the \
                 bundle's trained ranges",
                self.label, network.name
            ));
        }
        let mut fwd_ms: Vec<f64> = fwd.layers.iter().map(|l| l.prediction.ms).collect();
        let mut train_ms: Vec<f64> = train.layers.iter().map(|l| l.prediction.ms).collect();
        if self.fusion != Fusion::None {
            self.fuse_into(network, batch, Phase::Inference, &mut fwd_ms)?;
            self.fuse_into(network, batch, Phase::Training, &mut train_ms)?;
        }
        Ok(fwd_ms
            .iter()
            .zip(&train_ms)
            .map(|(f, t)| {
                let f_s = f * 1e-3;
                (f_s, (t * 1e-3 - f_s).max(0.0))
            })
            .collect())
    }
}

/// Plans a training job of `network` on each of `devices` (label, spec), the compute of each
/// from the bundle at `bundle` for that device, over `link` inside a node (default per device:
/// NVLink on SXM parts, PCIe otherwise), priced from `prices` (the file's path names it in the
/// note on devices it has no price for). Returns the plan and each device's link.
pub fn plan_with_bundle(
    network: &Network,
    bundle: &std::path::Path,
    devices: &[(String, DeviceSpec)],
    link: Option<&Link>,
    prices: Option<(&std::path::Path, &PriceTable)>,
    config: &PlanConfig,
    observer: &dyn Observer,
) -> crate::Result<(PlanReport, Vec<DeviceLinks>)> {
    let mut computes = Vec::with_capacity(devices.len());
    for (label, spec) in devices {
        let bundle = crate::Bundle::load_for_device(bundle, spec)?;
        computes.push(
            BundleLayerTimes::new(Predictor::new(bundle), label, observer)
                .with_fusion(config.fusion),
        );
    }
    let mut missing_price = Vec::new();
    let options: Vec<DeviceOption<'_>> = devices
        .iter()
        .zip(&computes)
        .map(|((label, spec), compute)| {
            let price = prices.and_then(|(_, p)| p.price(label, spec));
            if prices.is_some() && price.is_none() {
                missing_price.push(format!("`{label}`"));
            }
            DeviceOption {
                label: label.clone(),
                spec: spec.clone(),
                link: link.cloned().unwrap_or_else(|| default_link(spec)),
                // A link the user named serves every GPU count.
                pair_link: link.is_none().then(|| default_pair_link(spec)).flatten(),
                price_per_gpu_hour: price,
                compute,
            }
        })
        .collect();
    if let (Some((path, _)), false) = (prices, missing_price.is_empty()) {
        observer.note(&format!(
            "warning: `{}` has no price for {}: no cost for them",
            path.display(),
            missing_price.join(", ")
        ));
    }
    let report = plan(network, &options, config)?;
    let links = options
        .iter()
        .map(|d| DeviceLinks {
            device: d.label.clone(),
            link: d.link.clone(),
            pair_link: d.pair_link.clone(),
        })
        .collect();
    Ok((report, links))
}

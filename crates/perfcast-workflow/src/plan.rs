//! `perfcast plan` as a workflow: a training job's time, memory and cost per device, GPU
//! count and parallel layout, each layer's compute from a bundle (perfcast-calibrate's
//! [`plan_with_bundle`]) and the layouts from perfcast-scale's planner.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use perfcast_calibrate::layer_costs::plan_with_bundle;
use perfcast_core::Network;
use perfcast_core::progress::Observer;
use perfcast_scale::Link;
use perfcast_scale::plan::{DeviceLinks, PlanConfig, PlanReport, PriceTable};
use serde::Serialize;

use crate::{Error, Result, check};

/// What [`run`] plans.
#[derive(Clone, Debug)]
pub struct PlanJob {
    /// The network whose training step is planned.
    pub network: Network,
    /// Devices by name (`a100`, `h100`, ...), each named once.
    pub devices: Vec<String>,
    /// The bundle whose training-step predictions give each layer's compute.
    pub bundle: PathBuf,
    /// On-demand prices per GPU-hour (TOML); `None`: no costs.
    pub price_file: Option<PathBuf>,
    /// The link between a node's GPUs (`nvlink`, `pcie4`, `GBPS:US`); `None`: per device.
    pub link: Option<String>,
    /// Collectives fitted to measured timings, pricing the all-reduces and sends they cover.
    pub collectives: Option<PathBuf>,
    /// Batch, GPU counts, optimiser, memory share, recomputation, layouts, sort; its
    /// `collectives` is read from [`PlanJob::collectives`].
    pub config: PlanConfig,
}

/// What [`run`] planned, as `perfcast plan --format json` writes it.
#[derive(Clone, Debug, Serialize)]
pub struct PlanOutcome {
    /// Every layout that fits, sorted, and the Pareto front.
    #[serde(flatten)]
    pub report: PlanReport,
    /// The link used per device.
    pub links: Vec<DeviceLinks>,
    /// Each device's data type: fp32, or a half type trained in mixed precision.
    pub dtypes: Vec<(String, perfcast_core::DType)>,
    /// The prices read.
    pub prices: Option<PriceTable>,
    /// The bundle used.
    pub bundle: PathBuf,
    /// Why nothing fits, when nothing does.
    pub message: Option<String>,
}

/// Checks the job (every value before a bundle loads), looks the devices up and plans.
pub fn run(job: &PlanJob, observer: &dyn Observer, interrupt: &AtomicBool) -> Result<PlanOutcome> {
    let config = &job.config;
    let input = |message: String| Err(Error::Input(message));
    if config.global_batch < 1 {
        return input("`--global-batch` must be at least 1, got 0".into());
    }
    let share = config.max_memory_fraction;
    if !(share > 0.0 && share <= 1.0) {
        return input(format!(
            "`--max-memory-fraction` must be in (0, 1], got {share}"
        ));
    }
    if config.gpus.is_empty() {
        return input("`--gpus` needs at least one count".into());
    }
    if config.micro_batches == Some(0) {
        return input("`--micro-batches 0`: at least 1 micro-batch is needed".into());
    }
    if let Some(&bad) = config.gpus.iter().find(|&&g| g == 0) {
        return input(format!("`--gpus {bad}`: a GPU count must be at least 1"));
    }
    if job.devices.is_empty() {
        return input("`--devices` needs at least one device".into());
    }
    let specs = job
        .devices
        .iter()
        .map(|name| {
            let spec = perfcast_core::known::target_device(None, Some(name))
                .map_err(|e| Error::Context {
                    context: format!("`--devices {name}`"),
                    source: Box::new(e),
                })?
                .ok_or_else(|| Error::Input(format!("`--devices {name}`: no device")))?;
            Ok((name.trim().to_string(), spec))
        })
        .collect::<Result<Vec<_>>>()?;
    // One device named twice (or by two of its names) would plan every row twice.
    for (i, (name, spec)) in specs.iter().enumerate() {
        if let Some((first, _)) = specs[..i].iter().find(|(_, s)| s.name == spec.name) {
            return input(format!(
                "`--devices`: `{first}` and `{name}` are both `{}`; name each device once",
                spec.name
            ));
        }
    }
    let mut counts = config.gpus.clone();
    counts.sort_unstable();
    if let Some(w) = counts.windows(2).find(|w| w[0] == w[1]) {
        return input(format!(
            "`--gpus`: {} is named twice; name each count once",
            w[0]
        ));
    }
    let link = job
        .link
        .as_deref()
        .map(|l| {
            Link::parse(l).map_err(|e| Error::Context {
                context: format!("`--link {l}`"),
                source: Box::new(e),
            })
        })
        .transpose()?;
    let config = PlanConfig {
        collectives: job
            .collectives
            .as_deref()
            .map(perfcast_scale::Collectives::from_file)
            .transpose()?,
        ..config.clone()
    };
    let prices = job
        .price_file
        .as_deref()
        .map(PriceTable::from_file)
        .transpose()?;
    check(interrupt, "planning")?;
    let (report, links) = plan_with_bundle(
        &job.network,
        &job.bundle,
        &specs,
        link.as_ref(),
        job.price_file.as_deref().zip(prices.as_ref()),
        &config,
        observer,
    )?;
    Ok(PlanOutcome {
        message: report.no_fit_message(),
        report,
        links,
        dtypes: specs.iter().map(|(n, s)| (n.clone(), s.dtype)).collect(),
        prices,
        bundle: job.bundle.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;

    fn job() -> PlanJob {
        PlanJob {
            network: perfcast_core::NetworkChoice::zoo("lenet5", None)
                .expect("zoo")
                .network,
            devices: vec!["a100".into(), "l4".into()],
            bundle: concat!(env!("CARGO_MANIFEST_DIR"), "/../../checkpoints/gpu").into(),
            price_file: None,
            link: None,
            collectives: None,
            config: PlanConfig {
                global_batch: 8,
                gpus: vec![1, 2],
                ..PlanConfig::default()
            },
        }
    }

    #[test]
    fn lenet5_is_planned_on_two_devices_with_a_pareto_front() {
        let outcome = run(&job(), &Silent, &AtomicBool::new(false)).expect("plan");
        assert!(!outcome.report.rows.is_empty());
        assert_eq!(outcome.links.len(), 2, "{:?}", outcome.links);
        assert!(outcome.message.is_none());
        assert!(outcome.prices.is_none());
    }

    #[test]
    fn a_device_named_twice_is_refused_before_the_bundle_loads() {
        let mut job = job();
        job.devices = vec!["a100".into(), "a100".into()];
        job.bundle = "/nonexistent".into();
        let err = run(&job, &Silent, &AtomicBool::new(false)).expect_err("twice");
        assert!(err.to_string().contains("name each device once"), "{err}");
        job.devices = vec!["a100".into()];
        job.config.gpus = vec![2, 1, 2];
        let err = run(&job, &Silent, &AtomicBool::new(false)).expect_err("twice");
        assert_eq!(
            err.to_string(),
            "`--gpus`: 2 is named twice; name each count once"
        );
    }
}

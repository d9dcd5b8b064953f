//! Host-cost calibration on a synthetic ridge bundle (perfcast-select's test specimen) and
//! runs made up from its own predictions, so the true terms are known.
#![allow(clippy::unwrap_used)]

use perfcast_calibrate::calibrate::{
    calibrate, check_lambda, evaluate_networks, labelled, network_ms, rewrite_manifest,
};
use perfcast_calibrate::{Bundle, Predictor};
use perfcast_core::Phase;
use perfcast_select::testing::ctx;

/// A measured run of `network` at batch 4: the plain sum scaled by 1.2 plus 2 ms per run.
fn run(
    predictor: &Predictor,
    network: &str,
    phase: Phase,
) -> perfcast_data::networks::NetworkRecord {
    let net = perfcast_core::zoo::build(network, None).unwrap();
    let plain = predictor
        .predict_network(&net, &ctx(4, phase))
        .unwrap()
        .layer_sum_ms;
    perfcast_data::networks::NetworkRecord {
        layers: net.layers.len(),
        param_tensors: 0,
        params: 0,
        network: net,
        resolution: None,
        batch: 4,
        phase,
        threads: 1,
        backend: "flex".into(),
        device: "test cpu".into(),
        timing: perfcast_data::Timing {
            median_ms: 2.0 + 1.2 * plain,
            min_ms: None,
            mad_ms: None,
            p10_ms: None,
            p90_ms: None,
            repetitions: Some(5),
        },
        update_ms: None,
        layer_sum_ms: None,
        layer_ms: None,
        perfcast_version: "0".into(),
        timestamp: 0,
    }
}

#[test]
fn calibration_fits_host_terms_that_beat_the_plain_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    perfcast_select::testing::write_ridge_bundle(&dir, "test", 60).unwrap();
    let predictor = Predictor::new(Bundle::load(&dir).unwrap());
    let records: Vec<_> = ["lenet5", "alexnet", "vgg11", "resnet18"]
        .iter()
        .map(|n| run(&predictor, n, Phase::Inference))
        .collect();
    let runs = labelled(records);
    assert_eq!(runs[0].0, "lenet5");
    let costs = calibrate(&predictor, &runs, None).unwrap();
    assert_eq!(costs.networks.len(), 4);
    assert!(costs.training.is_none());
    let inference = costs.inference.clone().unwrap();
    assert!(
        inference.fit_mape < inference.plain_mape / 2.0,
        "{inference:?}"
    );

    // Stored in the manifest, the terms compose every prediction of the phase.
    let mut manifest = predictor.bundle().manifest.clone();
    manifest.host_costs = Some(costs);
    rewrite_manifest(&dir, &manifest).unwrap();
    let calibrated = Predictor::new(Bundle::load(&dir).unwrap());
    let report =
        evaluate_networks(&calibrated, &dir, &runs, &perfcast_core::progress::Silent).unwrap();
    let summary = &report.summary[0];
    assert_eq!(summary.runs, 4);
    assert!(
        summary.composed_mape.unwrap() < summary.plain_mape,
        "{summary:?}"
    );
    let net = perfcast_core::zoo::build("resnet18", None).unwrap();
    let composed = network_ms(&calibrated, &net, &ctx(4, Phase::Inference)).unwrap();
    let plain = network_ms(&predictor, &net, &ctx(4, Phase::Inference)).unwrap();
    assert!(composed > plain, "{composed} vs {plain}");

    assert!(check_lambda(Some(-1.0)).is_err());
    let mut mixed = runs.clone();
    mixed[1].1.threads = 2;
    let err = calibrate(&predictor, &mixed, None).unwrap_err().to_string();
    assert_eq!(err, "calibration runs must share one thread count");
}

#[test]
fn the_update_splits_at_the_allocators_fresh_buffer_size_not_the_cache() {
    // A Llama block's projections, under the fresh-buffer size, must not pay the rate of the
    // calibration networks' larger FC tensors.
    use perfcast_calibrate::compose::{FRESH_TENSOR_UPDATE_BYTES, RunShape};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    perfcast_select::testing::write_ridge_bundle(&dir, "test", 60).unwrap();
    let predictor = Predictor::new(Bundle::load(&dir).unwrap());
    // 1 ms per million parameters below a 64 MiB buffer, 3 ms at or above it.
    let update_ms = |net: &perfcast_core::Network| {
        let shape = RunShape::of(net, 0.0);
        let large: usize = shape.tensors.iter().filter(|&&n| n * 4 >= 64 << 20).sum();
        (shape.params - large) as f64 / 1e6 + 3.0 * large as f64 / 1e6
    };
    let records: Vec<_> = ["lenet5", "alexnet", "vgg11", "resnet18"]
        .iter()
        .map(|n| {
            let mut r = run(&predictor, n, Phase::Training);
            let u = update_ms(&r.network);
            r.update_ms = Some(u);
            r.timing.median_ms += u;
            r
        })
        .collect();
    let costs = calibrate(&predictor, &labelled(records), None).unwrap();
    let training = costs.training.unwrap();
    assert_eq!(training.large_tensor_bytes, Some(FRESH_TENSOR_UPDATE_BYTES));
    assert!(
        (training.update_ms_per_mparam - 1.0).abs() < 1e-6,
        "{training:?}"
    );
    assert!(
        (training.update_large_ms_per_mparam - 3.0).abs() < 1e-6,
        "{training:?}"
    );
    let llama = perfcast_core::zoo::build("llama_block", None).unwrap();
    let composed = training.compose(&RunShape::of(&llama, 0.0));
    assert!(
        (composed.update_ms - update_ms(&llama)).abs() < 1e-6 * update_ms(&llama),
        "{composed:?}"
    );
}

#[test]
fn runs_measured_layer_by_layer_name_the_layers_furthest_from_their_prediction() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    perfcast_select::testing::write_ridge_bundle(&dir, "test", 60).unwrap();
    let predictor = Predictor::new(Bundle::load(&dir).unwrap());
    let mut record = run(&predictor, "vgg11", Phase::Inference);
    let predicted = predictor
        .predict_network(&record.network, &ctx(4, Phase::Inference))
        .unwrap();
    // Every layer measured at its prediction but the first conv, at twice it.
    let mut times: Vec<f64> = predicted.layers.iter().map(|l| l.prediction.ms).collect();
    let first_conv = predicted
        .layers
        .iter()
        .position(|l| l.prediction.kind == perfcast_core::ModuleKind::Conv2d)
        .unwrap();
    times[first_conv] *= 2.0;
    record.layer_ms = Some(times.clone());
    record.validate().unwrap();
    let report = evaluate_networks(
        &predictor,
        &dir,
        &labelled(vec![record.clone()]),
        &perfcast_core::progress::Silent,
    )
    .unwrap();
    let layers = &report.runs[0].layers;
    assert_eq!(layers[0].module, &*predicted.layers[first_conv].module);
    assert_eq!(layers[0].count, 1);
    assert!((layers[0].error_pct + 50.0).abs() < 1e-9, "{:?}", layers[0]);
    assert!(layers[1..].iter().all(|l| l.error_pct.abs() < 1e-9));
    // Layers of one module are one entry: VGG-11 repeats its relus and some convs.
    let distinct: std::collections::HashSet<_> =
        predicted.layers.iter().map(|l| l.module.clone()).collect();
    assert_eq!(layers.len(), distinct.len());
    assert_eq!(
        layers.iter().map(|l| l.count).sum::<usize>(),
        predicted.layers.len()
    );
    // A record whose times do not match its layers is refused by name.
    record.layer_ms = Some(times[1..].to_vec());
    assert!(record.validate().unwrap_err().contains("`layer_ms`"));
}

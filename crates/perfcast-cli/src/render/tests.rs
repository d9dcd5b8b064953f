//! Snapshot tests of the text renderers of `predict`, `bundle show`, `train` and `eval
//! networks`, on small report values built here (no timing runs): every figure is fixed, so
//! a change in a table's layout or wording shows as a snapshot diff. The filters guard what
//! would differ between machines and runs if a value came from one: absolute paths, elapsed
//! wall-clock times and long floats.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use perfcast_calibrate::calibrate::{Compared, NetworksEval, PhaseSummary};
use perfcast_calibrate::{Composed, HostCosts, PhaseCosts};
use perfcast_core::{Context, Metrics, ModuleKind, Phase};
use perfcast_models::eval::PredictionCost;
use perfcast_models::split::Split;
use perfcast_select::bundle::{FORMAT, FeatureRange, KindEntry};
use perfcast_select::pipeline::{
    KindReport, KindSelection, ModelReport, SelectionReport, SharedReport, SingleSelection,
    TrainReport,
};
use perfcast_select::predictor::LayerPrediction;
use perfcast_select::{
    Budget, Candidate, Manifest, ModulePrediction, NetworkPrediction, Selection,
};

/// Runs `f` with the filters every renderer snapshot uses.
fn filtered(f: impl FnOnce()) {
    let mut settings = insta::Settings::clone_current();
    // Absolute paths (a temp directory, a home folder): where a run happened, not what it said.
    settings.add_filter(r"(?:/tmp|/home|/root|/var)(?:/[^\s`'),]+)+", "[PATH]");
    // Elapsed wall-clock time.
    settings.add_filter(r"\bin \d+(?:\.\d+)? s\b", "in [DURATION]");
    settings.add_filter(r"\b\d+m\d+(?:\.\d+)?s\b", "[DURATION]");
    // Floats printed in full (arithmetic noise past the sixth decimal).
    settings.add_filter(r"\b(\d+\.\d{6})\d+\b", "$1[..]");
    settings.bind(f);
}

fn metrics(mape: f64) -> Metrics {
    Metrics {
        n: 40,
        mape,
        rmse: 0.5,
        r2: 0.95,
        r2_log: 0.975,
        within_10: 62.5,
        p50_ape: mape * 0.8,
        p95_ape: mape * 2.5,
    }
}

fn prediction(kind: ModuleKind, ms: f64, model: &'static str) -> ModulePrediction {
    ModulePrediction {
        kind,
        ms,
        model: Cow::Borrowed(model),
        fallback: model == "roofline-spec",
        warnings: Vec::new(),
    }
}

fn layer(name: &str, module: &str, p: ModulePrediction) -> LayerPrediction {
    LayerPrediction {
        name: name.into(),
        module: module.into(),
        prediction: p,
        fused: Vec::new(),
    }
}

fn network(phase: Phase, composed: Option<Composed>) -> NetworkPrediction {
    let layers = vec![
        layer(
            "features.0",
            "conv2d 3->64 k11 s4 p2 @224x224",
            prediction(ModuleKind::Conv2d, 12.5, "trees"),
        ),
        layer(
            "features.1",
            "relu 64x55x55",
            prediction(ModuleKind::Relu, 0.0425, "ridge"),
        ),
        layer(
            "classifier.6",
            "linear 4096->1000",
            prediction(ModuleKind::Linear, 3.25, "roofline-spec"),
        ),
    ];
    let layer_sum_ms = 15.7925;
    NetworkPrediction {
        network: "alexnet".into(),
        context: Context {
            batch: 8,
            phase,
            threads: 1,
            utilisation: 0.0,
        },
        layers,
        total_ms: composed.as_ref().map_or(layer_sum_ms, |c| c.total_ms),
        layer_sum_ms,
        roofline_ms: 4.0,
        composed,
        fallback_layers: 1,
        fusion: None,
    }
}

#[test]
fn predict_network_plain_sum() {
    let text = super::predict::network(&network(Phase::Inference, None));
    assert!(text.contains("3 layers"), "{text}");
    filtered(|| insta::assert_snapshot!(text));
}

#[test]
fn predict_network_fused_counts_kernels_and_names_the_policy() {
    let mut p = network(Phase::Inference, None);
    p.layers[0].name = "features.0+1".into();
    p.layers[0].fused = vec!["features.0".into(), "features.1".into()];
    p.layers.remove(1);
    p.fusion = Some(perfcast_predict::FusionReport {
        policy: perfcast_core::fusion::Fusion::Epilogue,
        graph: "GEMM epilogues fused".into(),
        eager_layers: 3,
        kernels: 2,
        eager_total_ms: 20.0,
        eager_roofline_ms: 5.0,
    });
    let text = super::predict::network(&p);
    assert!(text.contains("2 kernels"), "{text}");
    assert!(
        text.contains(
            "fusion `epilogue`, graph: GEMM epilogues fused: 3 layers run as 2 kernels; eager 20.0 ms"
        ),
        "{text}"
    );
    assert!(text.contains("features.0+1"), "{text}");
}

#[test]
fn predict_network_columns_widen_to_long_entries() {
    let mut p = network(Phase::Training, None);
    p.layers[0].module = "linear 768->768 x128 tokens; no input gradient".into();
    p.layers[1].name = "model.layers.0.self_attn.q_proj".into();
    let text = super::predict::network(&p);
    // Every row's prediction ends in the same column, whatever the entries' lengths.
    let ends: Vec<usize> = text
        .lines()
        .skip(2)
        // Table rows only: the fallback note below the table is prose.
        .take_while(|l| !l.starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| l.find(" ms").or_else(|| l.find(" us")))
        .collect();
    assert!(ends.len() >= 3, "{text}");
    assert!(ends.iter().all(|&e| e == ends[0]), "{ends:?}\n{text}");
    filtered(|| insta::assert_snapshot!(text));
}

#[test]
fn predict_network_composed_with_host_terms() {
    let composed = Composed {
        layer_sum_ms: 15.7925,
        per_run_ms: 1.5,
        scale_ms: 0.79,
        // A term fitted to a few nanoseconds is noise: shown as 0.
        dispatch_ms: -1.13e-7,
        update_ms: 2.25,
        copy_ms: 0.0,
        per_sample_grads_ms: 0.0,
        uncached_weights_ms: 0.0,
        host_floor_ms: 0.0,
        host_bound_ms: 0.0,
        from_spec: false,
        total_ms: 20.3325,
    };
    let text = super::predict::network(&network(Phase::Training, Some(composed)));
    let dispatch = text
        .lines()
        .find(|l| l.starts_with("host: per layer"))
        .expect("the per-layer host term");
    assert!(dispatch.ends_with(" 0 us"), "{dispatch}");
    assert!(text.contains("20.3 ms"), "the composed total: {text}");
    filtered(|| insta::assert_snapshot!(text));
}

#[test]
fn a_gpu_step_from_the_spec_shows_its_wait_on_the_host() {
    let composed = Composed {
        layer_sum_ms: 0.7,
        per_run_ms: 0.1,
        scale_ms: 0.0,
        dispatch_ms: 0.0,
        update_ms: 0.05,
        copy_ms: 0.2,
        per_sample_grads_ms: 0.0,
        uncached_weights_ms: 0.0,
        host_floor_ms: 1.88,
        host_bound_ms: 1.03,
        from_spec: true,
        total_ms: 2.08,
    };
    let text = super::predict::network(&network(Phase::Training, Some(composed)));
    let wait = text
        .lines()
        .find(|l| l.starts_with("host: dispatch"))
        .expect("the wait on the host");
    assert!(wait.contains("1.88 ms of host work"), "{wait}");
    assert!(wait.ends_with("1.03 ms"), "{wait}");
    // Spec terms hold no per-layer or scale term.
    assert!(!text.contains("host: per layer"), "{text}");
}

#[test]
fn predict_modules() {
    let rows = vec![
        super::predict::ModuleRow {
            module: "conv2d 64->64 k3 p1 @56x56".into(),
            context: Context {
                batch: 1,
                phase: Phase::Inference,
                threads: 1,
                utilisation: 0.0,
            },
            prediction: prediction(ModuleKind::Conv2d, 1.234, "medn"),
        },
        super::predict::ModuleRow {
            module: "linear 512->512".into(),
            context: Context {
                batch: 32,
                phase: Phase::Training,
                threads: 1,
                utilisation: 0.0,
            },
            prediction: prediction(ModuleKind::Linear, 0.0567, "knn"),
        },
    ];
    filtered(|| insta::assert_snapshot!(super::predict::modules(&rows)));
}

fn phase_costs(per_run_ms: f64, update: f64, cv: Option<f64>) -> PhaseCosts {
    PhaseCosts {
        per_run_ms,
        per_layer_ms: -1.2e-7,
        layer_scale: 1.05,
        update_ms_per_mparam: update,
        update_large_ms_per_mparam: update * 2.0,
        update_conv_ms_per_mparam: None,
        large_tensor_bytes: Some(32.0 * 1024.0 * 1024.0),
        input_gbs: None,
        host_floor: None,
        runs: 8,
        plain_mape: 21.5,
        fit_mape: 4.25,
        lambda: 0.01,
        cv_mape: cv,
        cv_plain_mape: cv.map(|_| 22.0),
    }
}

fn host_costs() -> HostCosts {
    HostCosts {
        inference: Some(phase_costs(0.85, 0.0, Some(6.5))),
        training: Some(phase_costs(2.5, 0.75, None)),
        networks: vec!["vgg11@64".into(), "resnet50@64".into(), "lenet5@28".into()],
        threads: 1,
    }
}

fn candidate(model: &str, cv_mape: f64, predict_us: f64, size_bytes: usize) -> Candidate {
    Candidate {
        model: model.into(),
        cv_mape,
        test_mape: cv_mape + 0.5,
        predict_us,
        size_bytes,
    }
}

fn manifest(host_costs: Option<HostCosts>) -> Manifest {
    let entry = |chosen: &str, candidates: Vec<Candidate>, pareto: &[&str]| KindEntry {
        chosen: chosen.into(),
        file: format!("conv2d/{chosen}.json"),
        schema_hash: "00ff00ff00ff00ff".into(),
        rows: 192,
        candidates,
        selection: Selection {
            chosen: chosen.into(),
            pareto: pareto.iter().map(|s| s.to_string()).collect(),
            why: format!("lowest cost score on the Pareto front ({chosen})"),
            excluded: Vec::new(),
        },
        ranges: vec![FeatureRange {
            name: "batch".into(),
            min: 1.0,
            max: 8.0,
        }],
        refitted: false,
        distilled: None,
    };
    let mut kinds = BTreeMap::new();
    kinds.insert(
        "conv2d".to_string(),
        entry(
            "trees",
            vec![
                candidate("ridge", 18.5, 0.9, 2_048),
                candidate("trees", 6.25, 4.5, 409_600),
                candidate("medn", 5.75, 42.0, 98_304),
            ],
            &["ridge", "trees", "medn"],
        ),
    );
    kinds.insert(
        "relu".to_string(),
        entry(
            "ridge",
            vec![
                candidate("ridge", 3.5, 0.8, 1_024),
                candidate("knn", 4.25, 12.5, 51_200),
            ],
            &["ridge"],
        ),
    );
    Manifest {
        format: FORMAT,
        name: "local".into(),
        perfcast_version: "0.1.0".into(),
        device: perfcast_core::testing::cpu_device(),
        data: "datasets/test-cpu".into(),
        budget: Budget::default(),
        kinds,
        host_costs,
        trained_devices: Vec::new(),
    }
}

#[test]
fn bundle_show_calibrated() {
    let text = super::predict::bundle(&manifest(Some(host_costs())));
    assert!(
        text.contains("* trees"),
        "the chosen model is marked: {text}"
    );
    filtered(|| insta::assert_snapshot!(text));
}

#[test]
fn bundle_show_without_host_terms() {
    let text = super::predict::bundle(&manifest(None));
    assert!(text.contains("no network host-cost terms"), "{text}");
    filtered(|| insta::assert_snapshot!(text));
}

fn model_report(kind: ModuleKind, model: &str, test_mape: f64, us: f64) -> ModelReport {
    ModelReport {
        model: model.into(),
        cv: metrics(test_mape * 1.1),
        test: metrics(test_mape),
        test_mape_by_phase: BTreeMap::from([
            ("inference".to_string(), test_mape * 0.9),
            ("training".to_string(), test_mape * 1.1),
        ]),
        cv_mape_by_phase: BTreeMap::new(),
        cost: PredictionCost {
            one_row_us: us,
            batch_row_us: us / 10.0,
            size_bytes: 20_480,
        },
        file: format!("{kind}/{model}.json"),
        parts: None,
    }
}

fn train_report() -> TrainReport {
    let kind = |kind: ModuleKind, best: &str| KindReport {
        kind,
        rows: (160, 40),
        models: vec![
            model_report(kind, "ridge", 14.5, 0.85),
            model_report(kind, "trees", 7.25, 4.5),
            model_report(kind, "medn", 6.5, 38.0),
        ],
        best: best.into(),
    };
    let single = |model: &str, mape: f64, us: f64| SingleSelection {
        model: model.into(),
        overall: metrics(mape),
        mean_predict_us: us,
        total_size_bytes: 40_960,
    };
    TrainReport {
        // An absolute dataset path, as `--data /tmp/...` gives: filtered.
        data: PathBuf::from("/tmp/perfcast-snapshot/datasets/test-cpu"),
        device: "test cpu".into(),
        split: Split::Random,
        folds: 5,
        test_share: 0.2,
        kinds: vec![
            kind(ModuleKind::Conv2d, "medn"),
            kind(ModuleKind::Linear, "medn"),
        ],
        shared: vec![
            SharedReport {
                model: "medn".into(),
                kind: ModuleKind::Conv2d,
                per_kind_mape: Some(6.5),
                shared_mape: 7.75,
            },
            SharedReport {
                // Too few rows for a network of its own: no per-kind score.
                model: "medn".into(),
                kind: ModuleKind::Linear,
                per_kind_mape: None,
                shared_mape: 9.5,
            },
        ],
        selection: Some(SelectionReport {
            bundle: PathBuf::from("checkpoints/local"),
            kinds: vec![KindSelection {
                kind: ModuleKind::Conv2d,
                selection: Selection {
                    chosen: "trees".into(),
                    pareto: vec!["ridge".into(), "trees".into(), "medn".into()],
                    why: "lowest cost score on the Pareto front".into(),
                    excluded: Vec::new(),
                },
                test_mape: 7.25,
            }],
            overall: metrics(7.5),
            mean_predict_us: 4.5,
            total_size_bytes: 40_960,
            single: vec![single("ridge", 14.5, 0.85), single("medn", 6.5, 38.0)],
            refitted: false,
        }),
        flagged: Vec::new(),
    }
}

#[test]
fn train_report_with_selection_and_shared_networks() {
    let text = super::train::train(&train_report(), Path::new("/tmp/perfcast-snapshot/models"));
    assert!(
        text.contains("auto-selection -> checkpoints/local"),
        "{text}"
    );
    filtered(|| insta::assert_snapshot!(text));
}

fn compared(network: &str, phase: Phase, measured_ms: f64, plain_ms: f64) -> Compared {
    let composed_ms = plain_ms * 1.1 + 0.5;
    let err = |x: f64| 100.0 * (x - measured_ms) / measured_ms;
    Compared {
        network: network.into(),
        batch: 4,
        phase,
        measured_ms,
        measured_layer_sum_ms: (phase == Phase::Inference).then_some(plain_ms * 0.95),
        plain_ms,
        plain_error_pct: err(plain_ms),
        composed: Some(Composed {
            layer_sum_ms: plain_ms,
            per_run_ms: 0.5,
            scale_ms: plain_ms * 0.1,
            dispatch_ms: 0.0,
            update_ms: 0.0,
            copy_ms: 0.0,
            per_sample_grads_ms: 0.0,
            uncached_weights_ms: 0.0,
            host_floor_ms: 0.0,
            host_bound_ms: 0.0,
            from_spec: false,
            total_ms: composed_ms,
        }),
        composed_error_pct: Some(err(composed_ms)),
        uncached_weights_ms: 0.0,
        fallback_layers: usize::from(network == "lenet5@28"),
        layers: Vec::new(),
    }
}

#[test]
fn eval_networks_plain_and_composed() {
    let runs = vec![
        compared("lenet5@28", Phase::Inference, 0.75, 0.5),
        compared("resnet18", Phase::Inference, 210.0, 180.0),
        compared("resnet18", Phase::Training, 720.0, 610.0),
    ];
    let report = NetworksEval {
        bundle: PathBuf::from("checkpoints/local"),
        host_costs: Some(host_costs()),
        summary: vec![
            PhaseSummary {
                phase: Phase::Inference,
                runs: 2,
                plain_mape: 23.5,
                composed_mape: Some(4.75),
            },
            PhaseSummary {
                phase: Phase::Training,
                runs: 1,
                plain_mape: 15.25,
                composed_mape: None,
            },
        ],
        runs,
    };
    let text = super::networks::evaluated(&report);
    assert!(text.contains("(1 roofline layers)"), "{text}");
    assert!(text.contains("- (not calibrated)"), "{text}");
    filtered(|| insta::assert_snapshot!(text));
}

#[test]
fn eval_networks_names_the_layers_furthest_from_their_time_alone() {
    use perfcast_calibrate::calibrate::LayerError;
    let layer = |module: &str, count: usize, measured_ms: f64, predicted_ms: f64| LayerError {
        name: "features.0".into(),
        module: module.into(),
        count,
        measured_ms,
        predicted_ms,
        error_pct: 100.0 * (predicted_ms - measured_ms) / measured_ms,
    };
    let mut run = compared("squeezenet1_1", Phase::Training, 440.0, 391.0);
    run.layers = vec![
        layer("conv2d 128->16 k1 s1 p0 @55x55", 1, 133.6, 72.2),
        layer("conv2d 64->16 k1 s1 p0 @55x55", 1, 66.5, 45.2),
        layer("conv2d 3->64 k3 s2 p0 @224x224", 1, 29.8, 38.6),
        layer("maxpool2d k3 s2 p0 64@111x111", 1, 29.9, 30.2),
    ];
    let report = NetworksEval {
        bundle: PathBuf::from("checkpoints/local"),
        host_costs: None,
        summary: vec![PhaseSummary {
            phase: Phase::Training,
            runs: 1,
            plain_mape: 11.1,
            composed_mape: None,
        }],
        runs: vec![run, compared("resnet18", Phase::Training, 720.0, 610.0)],
    };
    let text = super::networks::evaluated(&report);
    assert!(text.contains("squeezenet1_1 batch 4 training:"), "{text}");
    assert!(!text.contains("maxpool2d"), "three layers per run: {text}");
    assert!(
        !text.contains("resnet18 batch"),
        "runs without layers: {text}"
    );
    filtered(|| insta::assert_snapshot!(text));
}

//! Bundle round trips and the predictor, on a small synthetic linear dataset.

use perfcast_core::{DeviceSpec, ModuleKind, ModuleSpec, Phase};
use perfcast_models::features::row;
use perfcast_models::{FeatureSchema, Regressor};

use crate::testing::{ctx, device, linear};
use crate::{Bundle, Predictor};

fn write(dir: &std::path::Path) -> Box<dyn Regressor> {
    crate::testing::write_ridge_bundle(dir, "test", 60).unwrap()
}

#[test]
fn a_bundle_round_trips_and_predicts_like_its_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let model = write(&dir);
    let predictor = Predictor::new(Bundle::load(&dir).unwrap());
    let spec = linear(100, 200);
    let c = ctx(4, Phase::Training);
    let p = predictor.predict_module(&spec, &c).unwrap();
    assert_eq!(p.ms, model.predict_row(&row(&spec, &c, &device())).unwrap());
    assert!(!p.fallback && p.warnings.is_empty(), "{p:?}");
    // Outside the trained range: predicted, with a warning naming the feature.
    let p = predictor.predict_module(&linear(4096, 200), &c).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("`in_features` = 4096")),
        "{p:?}"
    );
    // A kind the bundle lacks falls back to the spec roofline, marked.
    let relu = ModuleSpec::Relu(perfcast_core::Elementwise { shape: [8, 16, 16] });
    let p = predictor.predict_module(&relu, &c).unwrap();
    assert!(p.fallback && p.ms > 0.0 && p.model == "roofline-spec");
    // No temp directories left beside it.
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["b"]);
}

#[test]
fn corrupt_truncated_or_mismatched_bundles_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    write(&dir);
    let manifest = dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();

    std::fs::write(&manifest, &text[..text.len() / 2]).unwrap();
    let err = Bundle::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("manifest.json") && err.contains("truncated"),
        "{err}"
    );

    std::fs::write(&manifest, text.replace("\"format\": 1", "\"format\": 99")).unwrap();
    let err = Bundle::load(&dir).unwrap_err().to_string();
    assert!(err.contains("format 99"), "{err}");

    let hash = format!(
        "{:016x}",
        FeatureSchema::for_kind(ModuleKind::Linear).hash()
    );
    std::fs::write(&manifest, text.replace(&hash, "0000000000000000")).unwrap();
    let err = Bundle::load(&dir).unwrap_err().to_string();
    assert!(err.contains("another feature schema"), "{err}");

    std::fs::write(&manifest, &text).unwrap();
    let model = dir.join("linear/ridge.json");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..10]).unwrap();
    let err = Bundle::load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("ridge.json") && err.contains("corrupt"),
        "{err}"
    );

    let err = Bundle::load(&tmp.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such bundle"), "{err}");
}

/// A manifest could name a model file outside the bundle (`../x`, an absolute
/// path, a symlink out, `/dev/zero`, read without bound).
#[test]
fn model_files_are_read_from_inside_the_bundle_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    write(&dir);
    let manifest = dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::copy(dir.join("linear/ridge.json"), outside.join("ridge.json")).unwrap();
    let abs = outside.join("ridge.json").display().to_string();
    for (file, needle) in [
        ("../outside/ridge.json", "inside the bundle"),
        (abs.as_str(), "inside the bundle"),
        ("", "inside the bundle"),
        ("/dev/zero", "inside the bundle"),
    ] {
        std::fs::write(&manifest, text.replace("linear/ridge.json", file)).unwrap();
        let err = Bundle::load(&dir).unwrap_err().to_string();
        assert!(err.contains(needle), "{file}: {err}");
    }
    // A symlink inside the bundle that leads out of it, or to a device file.
    #[cfg(unix)]
    for target in [
        outside.join("ridge.json"),
        std::path::PathBuf::from("/dev/zero"),
    ] {
        let link = dir.join("linear/link.json");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        std::fs::write(
            &manifest,
            text.replace("linear/ridge.json", "linear/link.json"),
        )
        .unwrap();
        let err = Bundle::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("outside the bundle"),
            "{}: {err}",
            target.display()
        );
    }
    // A model file over the cap is refused before it is read.
    std::fs::write(&manifest, &text).unwrap();
    let big = std::fs::File::create(dir.join("linear/ridge.json")).unwrap();
    big.set_len(crate::bundle::MAX_MODEL_BYTES + 1).unwrap();
    let err = Bundle::load(&dir).unwrap_err().to_string();
    assert!(err.contains("more than the"), "{err}");
}

#[test]
fn networks_sum_their_layers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    write(&dir);
    let predictor = Predictor::new(Bundle::load(&dir).unwrap());
    let net = perfcast_core::zoo::build("lenet5", None).unwrap();
    let p = predictor
        .predict_network(&net, &ctx(8, Phase::Inference))
        .unwrap();
    assert_eq!(p.layers.len(), net.layers.len());
    let sum: f64 = p.layers.iter().map(|l| l.prediction.ms).sum();
    assert!((p.total_ms - sum).abs() < 1e-12);
    // Only the linear layers have a model in this bundle.
    assert!(p.fallback_layers > 0 && p.fallback_layers < p.layers.len());
}

/// The shipped cross-device GPU bundle.
fn gpu_bundle(device: &DeviceSpec) -> Predictor {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/gpu");
    Predictor::new(Bundle::load_for_device(&dir, device).unwrap())
}

/// A GPU spec around a V100, scaled by the draws.
fn gpu(peak: f64, bandwidth: f64, sms: u32) -> DeviceSpec {
    DeviceSpec {
        name: format!("GPU {peak} {bandwidth} {sms}"),
        kind: perfcast_core::DeviceKind::Gpu,
        peak_gflops: peak,
        mem_bandwidth_gbs: bandwidth,
        cores: sms,
        threads: sms * 64,
        clock_mhz: 1400.0,
        memory_gb: 32.0,
        cache_mb: 6.0,
        caches: perfcast_core::Caches::default(),
        source: perfcast_core::SpecSource::Published,
        software: None,
        launch_us: None,
        tdp_w: None,
        dtype: Default::default(),
        peaks: Default::default(),
        links: Default::default(),
    }
}

/// A small xorshift stream: deterministic draws without a dependency.
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pow2(&mut self, max_log: u64) -> usize {
        1 << self.below(max_log + 1)
    }
}

/// The same GEMM written as batch x tokens or batch x heads gets one prediction on a
/// GPU bundle, whatever the split.
#[test]
fn gpu_predictions_do_not_depend_on_how_the_work_is_split() {
    let p = gpu_bundle(&gpu(14_029.0, 900.0, 80));
    let mut d = Draws(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let rows = d.pow2(12);
        let split = d.pow2(rows.trailing_zeros() as u64);
        let (inf, outf) = (1 + d.below(4096) as usize, 1 + d.below(4096) as usize);
        let phase = if d.below(2) == 0 {
            Phase::Inference
        } else {
            Phase::Training
        };
        let linear = |tokens| {
            ModuleSpec::Linear(perfcast_core::Linear {
                tokens,
                in_features: inf,
                out_features: outf,
                bias: true,
            })
        };
        let a = p.predict_module(&linear(rows), &ctx(1, phase)).unwrap();
        let b = p
            .predict_module(&linear(rows / split), &ctx(split, phase))
            .unwrap();
        assert_eq!(
            a.ms.to_bits(),
            b.ms.to_bits(),
            "{rows} rows as {split} x {}",
            rows / split
        );
        let bmm = |heads| {
            ModuleSpec::Matmul(perfcast_core::Matmul {
                heads,
                m: inf,
                k: 64,
                n: outf,
                trans_a: false,
                trans_b: false,
            })
        };
        let a = p.predict_module(&bmm(rows), &ctx(1, phase)).unwrap();
        let b = p
            .predict_module(&bmm(rows / split), &ctx(split, phase))
            .unwrap();
        assert_eq!(
            a.ms.to_bits(),
            b.ms.to_bits(),
            "{rows} matrices as {split} x {}",
            rows / split
        );
    }
}

/// No GPU prediction is below the roofline of the device's own spec, for random
/// specs and every kind, both phases.
#[test]
fn gpu_predictions_never_beat_the_spec_roofline() {
    let mut d = Draws(0x2545_f491_4f6c_dd1d);
    for _ in 0..12 {
        let device = gpu(
            1_000.0 * (1 + d.below(100)) as f64,
            100.0 * (1 + d.below(60)) as f64,
            8 + d.below(140) as u32,
        );
        let p = gpu_bundle(&device);
        for spec in perfcast_core::testing::one_of_each_kind() {
            for batch in [1, 8, 256] {
                for phase in [Phase::Inference, Phase::Training] {
                    let c = ctx(batch, phase);
                    let ms = p.predict_module(&spec, &c).unwrap().ms;
                    let floor = perfcast_core::canonical::least_time_s(&spec, &c, &device) * 1e3;
                    assert!(
                        ms >= floor,
                        "{} at {batch}: {ms} < {floor}",
                        spec.describe()
                    );
                }
            }
        }
    }
}

/// A GPU kind without training rows (NeuSight's matmul) answers a training step
/// composed from forward kernels, says so, and costs about three forward GEMMs.
#[test]
fn gpu_training_steps_of_forward_only_kinds_are_composed_and_marked() {
    let p = gpu_bundle(&gpu(14_029.0, 900.0, 80));
    let bmm = ModuleSpec::Matmul(perfcast_core::Matmul {
        heads: 96,
        m: 512,
        k: 64,
        n: 512,
        trans_a: false,
        trans_b: false,
    });
    let fwd = p.predict_module(&bmm, &ctx(1, Phase::Inference)).unwrap();
    let step = p.predict_module(&bmm, &ctx(1, Phase::Training)).unwrap();
    assert!(
        step.warnings
            .iter()
            .any(|w| w.contains("composed from forward kernels")),
        "{step:?}"
    );
    assert!(
        step.ms > 2.0 * fwd.ms && step.ms < 6.0 * fwd.ms,
        "{} vs {}",
        step.ms,
        fwd.ms
    );
    // The same step written as batch 8 x 12 heads: the same answer.
    let split = ModuleSpec::Matmul(perfcast_core::Matmul {
        heads: 12,
        m: 512,
        k: 64,
        n: 512,
        trans_a: false,
        trans_b: false,
    });
    let again = p.predict_module(&split, &ctx(8, Phase::Training)).unwrap();
    assert_eq!(again.ms.to_bits(), step.ms.to_bits());
}

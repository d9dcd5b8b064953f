//! A sweep with values set from outside the TOML file on top (`perfcast profile --samples 50
//! --batch 1,8`), checked as a whole afterwards; and the sweeps `perfcast quickstart` runs.

use std::path::Path;

use perfcast_core::{ModuleKind, Phase};

use crate::error::{Error, Result};
use crate::sweep::{MAX_SAMPLES, Param, Sweep, Value, builtin_path};
use crate::timer::TimingConfig;

/// Values that replace a sweep's own; `None` or empty keeps the sweep's.
#[derive(Clone, Debug, Default)]
pub struct SweepOverrides {
    /// Module kinds (repeats next to each other are dropped).
    pub modules: Vec<ModuleKind>,
    /// Configurations per kind.
    pub samples: Option<usize>,
    /// Sampler seed.
    pub seed: Option<u64>,
    /// Phases.
    pub phases: Vec<Phase>,
    /// Batch sizes to draw from.
    pub batch: Vec<usize>,
    /// Thread counts to draw from.
    pub threads: Vec<usize>,
    /// Background utilisation shares to draw from.
    pub utilisation: Vec<f64>,
    /// Cap on the timed samples of one configuration, seconds.
    pub max_time_s: Option<f64>,
    /// Visits per configuration.
    pub rounds: Option<u32>,
}

fn choice<T: Into<f64> + Copy>(values: &[T]) -> Param {
    Param::Choice(values.iter().map(|&v| Value::Num(v.into())).collect())
}

impl Sweep {
    /// The sweep in `file` (the built-in one without) with `overrides` on top, validated as a
    /// whole; an error names the file (or `<built-in>`).
    pub fn with_overrides(file: Option<&Path>, overrides: &SweepOverrides) -> Result<Sweep> {
        let mut sweep = match file {
            Some(path) => Sweep::from_file(path)?,
            None => Sweep::default(),
        };
        let o = overrides;
        if !o.modules.is_empty() {
            let mut kinds = o.modules.clone();
            kinds.dedup();
            sweep.modules = kinds;
        }
        if let Some(n) = o.samples {
            if !(1..=MAX_SAMPLES).contains(&n) {
                return Err(Error::Input(format!(
                    "`--samples` must be in [1, {MAX_SAMPLES}], got {n}"
                )));
            }
            sweep.samples = n;
        }
        if let Some(seed) = o.seed {
            sweep.seed = seed;
        }
        if !o.phases.is_empty() {
            sweep.phases = o.phases.clone();
        }
        if !o.batch.is_empty() {
            sweep.batch = choice(&o.batch.iter().map(|&b| b as f64).collect::<Vec<_>>());
        }
        if !o.threads.is_empty() {
            sweep.threads = choice(&o.threads.iter().map(|&t| t as f64).collect::<Vec<_>>());
        }
        if !o.utilisation.is_empty() {
            sweep.utilisation = choice(&o.utilisation);
        }
        if let Some(t) = o.max_time_s {
            sweep.timing.max_time_s = t;
        }
        if let Some(r) = o.rounds {
            sweep.timing.rounds = r;
        }
        sweep.validate().map_err(|message| Error::Sweep {
            path: file.map_or_else(builtin_path, Path::to_path_buf),
            message: format!("after command-line overrides: {message}"),
        })?;
        Ok(sweep)
    }
}

/// One group of the quickstart's kinds and how they are swept.
#[derive(Clone, Copy, Debug)]
pub struct QuickstartGroup {
    /// The kinds, swept together.
    pub kinds: &'static [ModuleKind],
    /// Configurations per kind, as a multiple of the quickstart's `--samples`.
    pub multiple: f64,
    /// Cap on each configuration's timed samples, seconds.
    pub max_time_s: f64,
    /// Cap on each configuration's forward work, GFLOP.
    pub max_gflop: f64,
    /// Sweep TOML laid over the built-in ranges (a seed and `[kind]` tables; empty for none):
    /// how a group aims at the layers a family adds.
    pub sweep: &'static str,
}

/// Every kind the zoo networks are made of, so no layer falls back to the spec roofline, then
/// the layers the newer zoo families add that the built-in ranges rarely draw.
///
/// Convolutions get the most samples (ten shape parameters, most of a CNN's time), GEMMs come
/// next; elementwise kinds are nearly linear in their size. Small ops are noisy and run to the
/// timing cap, whose quickstart value is still hundreds of calls and keeps the quickstart within
/// its budget. The last group is what imported models
/// add (ONNX CNNs, transformer and Llama-style configs): a quarter of the samples each, enough
/// for kinds whose time follows their size, so a CPU bundle predicts them from measurements
/// rather than the spec roofline. GEMMs reach 8 GFLOP where the rest stop at 1: a transformer's
/// FFN at batch 8 (1,024 x 768 -> 3,072, 4.8 GFLOP) beyond a cap of 1 was predicted at 0.70
/// (inference) and 0.55 (training) of its measured time by a quickstart bundle (the models
/// carried the speed of small GEMMs over to large ones).
///
/// The aimed groups after them: ViT-style patch embeddings (kernel = stride, 4 to 32, on 1-4
/// input channels), depthwise convolutions at every width with EfficientNet's 5x5 kernels,
/// squeeze-excitation's 1x1 convolutions on a 1x1 map and small single-token linears, and
/// DenseNet-sized channel concatenations, bottleneck convolutions that narrow to a few channels
/// on large maps (SqueezeNet's squeeze, DenseNet's growth: their backward passes run far below
/// a wide conv's speed), and transformer FFN-sized GEMMs over a few hundred tokens, with and
/// without bias. They take their rows from the general convolution
/// group (5x instead of 6x): most are cheap, so the sweep's minutes stay about the same.
pub const QUICKSTART_KINDS: [QuickstartGroup; 14] = [
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 5.0,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: "",
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Linear, ModuleKind::Matmul],
        multiple: 2.0,
        max_time_s: 0.25,
        max_gflop: 8.0,
        sweep: "",
    },
    QuickstartGroup {
        kinds: &[
            ModuleKind::MaxPool2d,
            ModuleKind::AvgPool2d,
            ModuleKind::BatchNorm2d,
            ModuleKind::Relu,
            ModuleKind::Add,
            ModuleKind::Softmax,
            ModuleKind::LayerNorm,
            ModuleKind::Gelu,
            ModuleKind::Tanh,
        ],
        multiple: 1.0,
        max_time_s: 0.15,
        max_gflop: 1.0,
        sweep: "",
    },
    QuickstartGroup {
        kinds: &[
            ModuleKind::Mul,
            ModuleKind::Sigmoid,
            ModuleKind::Silu,
            ModuleKind::MulScalar,
            ModuleKind::Embedding,
            ModuleKind::RmsNorm,
            ModuleKind::MaskedFill,
            ModuleKind::Dropout,
            ModuleKind::Copy,
            ModuleKind::Concat,
            ModuleKind::Slice,
            ModuleKind::Pad,
        ],
        multiple: 0.25,
        max_time_s: 0.15,
        max_gflop: 1.0,
        sweep: "",
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.5,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: r#"seed = 16
[conv2d]
kernel = [4, 8, 14, 16, 16, 32]
stride = ["kernel"]
padding = ["valid"]
groups = [1]
bias = [true]
in_channels = [1, 3, 3, 4]
out_channels = { min = 32, max = 1280, scale = "log" }
input_hw = { min = 32, max = 512, scale = "log" }
"#,
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.75,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: r#"seed = 17
[conv2d]
groups = ["depthwise"]
kernel = [3, 3, 5, 7]
stride = [1, 1, 2]
padding = ["same"]
bias = [false]
in_channels = { min = 8, max = 2048, scale = "log" }
input_hw = { min = 4, max = 128, scale = "log" }
"#,
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.25,
        max_time_s: 0.15,
        max_gflop: 1.0,
        sweep: r#"seed = 18
[conv2d]
kernel = [1]
stride = [1]
padding = ["valid"]
groups = [1]
bias = [true]
input_hw = [1]
in_channels = { min = 8, max = 2048, scale = "log" }
channel_ratio = { min = 0.03, max = 32, scale = "log" }
"#,
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Linear],
        multiple: 0.25,
        max_time_s: 0.15,
        max_gflop: 1.0,
        sweep: r#"seed = 19
[linear]
tokens = [1]
in_features = { min = 8, max = 2048, scale = "log" }
out_features = { min = 8, max = 2048, scale = "log" }
"#,
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Concat],
        multiple: 0.25,
        max_time_s: 0.15,
        max_gflop: 1.0,
        sweep: r#"seed = 20
[concat]
c = { min = 64, max = 2048, scale = "log" }
h = { min = 4, max = 64, scale = "log" }
w = { min = 4, max = 64, scale = "log" }
"#,
    },
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.375,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: r#"seed = 21
[conv2d]
kernel = [1, 1, 3]
stride = [1]
padding = ["same"]
groups = [1]
bias = [true, false]
in_channels = { min = 16, max = 1024, scale = "log" }
out_channels = { min = 8, max = 64, scale = "log" }
input_hw = { min = 7, max = 112, scale = "log" }
"#,
    },
    // Transformer widths, each beside a neighbour off the 1,024-float grid, so the wide
    // alignment columns see their effect apart from the size; enough of them that most pairs
    // of widths an LLM block uses have a row.
    QuickstartGroup {
        kinds: &[ModuleKind::Linear],
        multiple: 0.75,
        max_time_s: 0.25,
        max_gflop: 8.0,
        sweep: r#"seed = 22
[linear]
tokens = { min = 16, max = 256, scale = "log" }
in_features = [768, 1000, 1024, 2000, 2048, 3000, 3072, 4000, 4096, 5600, 5632]
out_features = [768, 1000, 1024, 2000, 2048, 3000, 3072, 4000, 4096, 5600, 5632]
bias = [true, false]
"#,
    },
    // Stems: a few image channels into 16-128 with overlapping 3-7 windows at 64-320 px
    // (SqueezeNet's, MobileNet's, EfficientNet's first layer); the patch group above only
    // draws windows that do not overlap.
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.25,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: r#"seed = 23
[conv2d]
kernel = [3, 3, 5, 7]
stride = [1, 2, 2]
padding = ["valid", "same"]
groups = [1]
bias = [true, false]
in_channels = [1, 3, 3, 4]
out_channels = { min = 16, max = 128, scale = "log" }
input_hw = { min = 64, max = 320, scale = "log" }
"#,
    },
    // Outputs of at most 16 channels on feature maps (SqueezeNet's squeeze): at batch 4 or
    // less the weight-gradient conv of a training step takes flex's small-channel direct path
    // (`wgrad_small_channel`) and runs several times longer per FLOP than one more output.
    QuickstartGroup {
        kinds: &[ModuleKind::Conv2d],
        multiple: 0.5,
        max_time_s: 0.25,
        max_gflop: 1.0,
        sweep: r#"seed = 24
[conv2d]
kernel = [1, 1, 3]
stride = [1]
padding = ["same"]
groups = [1]
bias = [true]
in_channels = { min = 16, max = 512, scale = "log" }
out_channels = { min = 2, max = 16, scale = "log" }
input_hw = { min = 7, max = 64, scale = "log" }
"#,
    },
    // Projections of 49-160 rows at transformer widths: above the 48 rows up to which the
    // GEMM reads its weights unpacked (`gemm_unpacked_weights`), where a block at 64 tokens
    // runs; the FFN group's log-uniform tokens put few draws there.
    QuickstartGroup {
        kinds: &[ModuleKind::Linear],
        multiple: 0.25,
        max_time_s: 0.25,
        max_gflop: 8.0,
        sweep: r#"seed = 25
[linear]
tokens = { min = 49, max = 160, scale = "log" }
in_features = [768, 1024, 2000, 2048, 3072, 4096, 5632]
out_features = [768, 1024, 2000, 2048, 3072, 4096, 5632]
bias = [true, false]
"#,
    },
];

/// Untimed warm-up of each quickstart configuration, seconds (the network layers' too), where
/// `profile` defaults to 0.05: the shorter warm-up repeats as well and leaves the time saved
/// to active rounds (docs/accuracy.md#figures-behind-code-choices).
pub const QUICKSTART_WARMUP_S: f64 = 0.02;

/// Configurations per kind of a [`QUICKSTART_KINDS`] group at `samples` (at least 5).
pub fn quickstart_samples(multiple: f64, samples: usize) -> usize {
    ((multiple * samples as f64).round() as usize).max(5)
}

/// Configurations and distinct kinds the quickstart's sweeps measure at `samples`.
pub fn quickstart_size(samples: usize) -> (usize, usize) {
    let mut kinds: Vec<ModuleKind> = QUICKSTART_KINDS
        .iter()
        .flat_map(|g| g.kinds.iter().copied())
        .collect();
    kinds.sort_by_key(|k| k.name());
    kinds.dedup();
    let configurations = QUICKSTART_KINDS
        .iter()
        .map(|g| g.kinds.len() * quickstart_samples(g.multiple, samples))
        .sum();
    (configurations, kinds.len())
}

/// Seconds of a duration written `8m`, `90s`, `1h`, `1m30s` or a bare number of seconds.
pub fn parse_duration_s(text: &str) -> std::result::Result<f64, String> {
    let bad = || format!("`{text}` is not a duration (write it as 8m, 90s, 1m30s or 1h)");
    let mut total = 0.0;
    let mut number = String::new();
    for ch in text.trim().chars() {
        match ch {
            '0'..='9' | '.' => number.push(ch),
            'h' | 'm' | 's' => {
                let v: f64 = number.parse().map_err(|_| bad())?;
                total += v * match ch {
                    'h' => 3600.0,
                    'm' => 60.0,
                    _ => 1.0,
                };
                number.clear();
            }
            _ => return Err(bad()),
        }
    }
    if !number.is_empty() {
        total += number.parse::<f64>().map_err(|_| bad())?;
    }
    if text.trim().is_empty() || !total.is_finite() {
        return Err(bad());
    }
    Ok(total)
}

/// The kinds active rounds choose for after the quickstart's random sweep, with each one's
/// configurations per round as a multiple of `--samples`: the kinds that hold most of a
/// network's time and most of the held-out error.
pub const ACTIVE_KINDS: &[(ModuleKind, f64)] = &[
    (ModuleKind::Conv2d, 0.6),
    (ModuleKind::Linear, 0.2),
    (ModuleKind::Matmul, 0.2),
];

/// One active round's sweeps at `samples` (the random sweep's ranges and timing caps).
pub fn active_sweeps(samples: usize) -> Result<Vec<Sweep>> {
    let groups = quickstart_sweeps(samples)?;
    ACTIVE_KINDS
        .iter()
        .map(|&(kind, multiple)| {
            let base = groups
                .iter()
                .find(|s| s.modules.contains(&kind))
                .cloned()
                .unwrap_or_else(|| groups[0].clone());
            Ok(Sweep {
                modules: vec![kind],
                samples: quickstart_samples(multiple, samples),
                ..base
            })
        })
        .collect()
}

/// The quickstart's sweeps of the built-in ranges, one per [`QUICKSTART_KINDS`] entry, with
/// `samples` configurations per elementwise or pooling kind.
pub fn quickstart_sweeps(samples: usize) -> Result<Vec<Sweep>> {
    QUICKSTART_KINDS
        .iter()
        .map(|g| {
            let sweep = Sweep::with_overrides(
                None,
                &SweepOverrides {
                    modules: g.kinds.to_vec(),
                    samples: Some(quickstart_samples(g.multiple, samples)),
                    max_time_s: Some(g.max_time_s),
                    ..SweepOverrides::default()
                },
            )?;
            let (seed, params) = if g.sweep.is_empty() {
                (sweep.seed, sweep.params)
            } else {
                let aimed = Sweep::from_toml(g.sweep, &builtin_path())?;
                (aimed.seed, aimed.params)
            };
            let sweep = Sweep {
                seed,
                params,
                max_gflop: g.max_gflop,
                timing: TimingConfig {
                    warmup_s: QUICKSTART_WARMUP_S,
                    ..sweep.timing
                },
                ..sweep
            };
            sweep.validate().map_err(|message| Error::Sweep {
                path: builtin_path(),
                message,
            })?;
            Ok(sweep)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_the_sweeps_values_and_are_checked() {
        let sweep = Sweep::with_overrides(
            None,
            &SweepOverrides {
                modules: vec![ModuleKind::Relu, ModuleKind::Relu, ModuleKind::Linear],
                samples: Some(7),
                seed: Some(3),
                max_time_s: Some(0.1),
                ..SweepOverrides::default()
            },
        )
        .expect("sweep");
        assert_eq!(sweep.modules, [ModuleKind::Relu, ModuleKind::Linear]);
        assert_eq!((sweep.samples, sweep.seed), (7, 3));
        assert_eq!(sweep.timing.max_time_s, 0.1);
        let err = Sweep::with_overrides(
            None,
            &SweepOverrides {
                samples: Some(0),
                ..SweepOverrides::default()
            },
        )
        .expect_err("no samples")
        .to_string();
        assert_eq!(err, "`--samples` must be in [1, 100000], got 0");
        let err = Sweep::with_overrides(
            None,
            &SweepOverrides {
                rounds: Some(0),
                ..SweepOverrides::default()
            },
        )
        .expect_err("no rounds")
        .to_string();
        assert!(err.contains("after command-line overrides"), "{err}");
    }

    #[test]
    fn the_quickstart_covers_the_kinds_real_models_have_with_more_convolutions() {
        let sweeps = quickstart_sweeps(40).expect("sweeps");
        let kinds: Vec<ModuleKind> = sweeps.iter().flat_map(|s| s.modules.clone()).collect();
        assert_eq!(kinds.len(), 24 + 10);
        // Every kind a transformer config or an ONNX CNN maps to, but the zero-cost views
        // and the rarer scalar and reduction kinds.
        for k in [
            ModuleKind::Embedding,
            ModuleKind::RmsNorm,
            ModuleKind::Silu,
            ModuleKind::Pad,
        ] {
            assert!(kinds.contains(&k), "{k}");
        }
        assert!(!kinds.contains(&ModuleKind::View));
        assert_eq!(sweeps[0].samples, 200);
        assert_eq!(sweeps[2].samples, 40);
        assert_eq!(sweeps[3].samples, 10);
        assert_eq!(sweeps[2].timing.max_time_s, 0.15);
        // The quickstart's shorter warm-up, on every group and on the active rounds.
        let active = active_sweeps(40).expect("active");
        for s in sweeps.iter().chain(&active) {
            assert_eq!(s.timing.warmup_s, QUICKSTART_WARMUP_S);
            assert!(s.timing.warmup_s < TimingConfig::default().warmup_s);
        }
        assert_eq!(quickstart_sweeps(10).expect("sweeps")[3].samples, 5);
        assert_eq!(
            quickstart_size(40),
            (
                200 + 2 * 80 + 9 * 40 + 12 * 10 + 20 + 30 + 3 * 10 + 15 + 30 + 10 + 20 + 10,
                24
            )
        );
        // The bottleneck group narrows to at most 64 channels; the FFN group's GEMMs keep
        // transformer widths over 16-256 tokens, some without bias.
        let bottleneck = sweeps[9].sample(ModuleKind::Conv2d).expect("draws");
        assert_eq!(bottleneck.len(), 15);
        assert!(bottleneck.iter().all(|s| match &s.spec {
            perfcast_core::ModuleSpec::Conv2d(c) => c.out_channels <= 64 && c.groups == 1,
            _ => false,
        }));
        let ffn = sweeps[10].sample(ModuleKind::Linear).expect("draws");
        assert_eq!(ffn.len(), 30);
        let widths = [
            768, 1000, 1024, 2000, 2048, 3000, 3072, 4000, 4096, 5600, 5632,
        ];
        assert!(ffn.iter().all(|s| match &s.spec {
            perfcast_core::ModuleSpec::Linear(l) =>
                (16..=256).contains(&l.tokens) && widths.contains(&l.in_features),
            _ => false,
        }));
        // Widths on the 1,024-float grid and off it, for the wide alignment columns.
        let on_grid = |s: &crate::sweep::Sample| match &s.spec {
            perfcast_core::ModuleSpec::Linear(l) => l.out_features % 1024 == 0,
            _ => false,
        };
        assert!(ffn.iter().any(on_grid) && !ffn.iter().all(on_grid));
        assert!(ffn.iter().any(|s| matches!(&s.spec,
            perfcast_core::ModuleSpec::Linear(l) if !l.bias)));
        // GEMMs are drawn up to a transformer FFN's work at batch 8, the rest to 1 GFLOP.
        let gemms = &sweeps[1];
        assert_eq!(gemms.modules, [ModuleKind::Linear, ModuleKind::Matmul]);
        let work = |s: &crate::sweep::Sample| {
            perfcast_core::features::derive(&s.spec, s.batch).flops / 1e9
        };
        let linear = gemms.sample(ModuleKind::Linear).expect("draws");
        assert!(linear.iter().all(|s| work(s) <= 8.0));
        assert!(linear.iter().filter(|s| work(s) > 1.0).count() >= 5);
        assert!(
            sweeps[0]
                .sample(ModuleKind::Conv2d)
                .expect("draws")
                .iter()
                .all(|s| work(s) <= 1.0)
        );
        // Active rounds draw from the same ranges.
        let active = active_sweeps(40).expect("active");
        assert_eq!(active[1].max_gflop, 8.0);
    }

    #[test]
    fn the_aimed_groups_draw_the_layers_newer_families_add() {
        let sweeps = quickstart_sweeps(40).expect("sweeps");
        let draws = |i: usize, kind: ModuleKind| {
            assert_eq!(sweeps[i].modules, [kind]);
            sweeps[i].sample(kind).expect("draws")
        };
        let conv = |s: &crate::sweep::Sample| match &s.spec {
            perfcast_core::ModuleSpec::Conv2d(c) => c.clone(),
            other => panic!("not a convolution: {other:?}"),
        };
        // Patch embeddings: non-overlapping windows of 4 to 32 over an image's channels.
        let patches: Vec<_> = draws(4, ModuleKind::Conv2d).iter().map(conv).collect();
        assert_eq!(patches.len(), 20);
        for c in &patches {
            assert_eq!(
                (c.stride, c.padding, c.groups),
                (c.kernel, [0, 0], 1),
                "{c:?}"
            );
            assert!(c.kernel[0] >= 4 && c.in_channels <= 4, "{c:?}");
        }
        assert!(patches.iter().any(|c| c.kernel == [16, 16]));
        // Depthwise at every width, 5x5 and 7x7 among them.
        let depthwise: Vec<_> = draws(5, ModuleKind::Conv2d).iter().map(conv).collect();
        assert!(
            depthwise
                .iter()
                .all(|c| c.groups == c.in_channels && c.out_channels == c.in_channels)
        );
        let widths: Vec<usize> = depthwise.iter().map(|c| c.in_channels).collect();
        assert!(
            widths.iter().any(|&w| w < 32) && widths.iter().any(|&w| w > 512),
            "{widths:?}"
        );
        assert!(depthwise.iter().any(|c| c.kernel == [5, 5]));
        // Squeeze-excitation: 1x1 convolutions on a 1x1 map, squeezing and expanding.
        let se: Vec<_> = draws(6, ModuleKind::Conv2d).iter().map(conv).collect();
        assert!(
            se.iter()
                .all(|c| c.input_hw == [1, 1] && c.kernel == [1, 1])
        );
        assert!(se.iter().any(|c| c.out_channels * 4 <= c.in_channels));
        assert!(se.iter().any(|c| c.out_channels >= 4 * c.in_channels));
        for s in draws(7, ModuleKind::Linear) {
            let perfcast_core::ModuleSpec::Linear(l) = &s.spec else {
                panic!("not a linear")
            };
            assert_eq!(l.tokens, 1);
        }
        // Stems: overlapping windows over a few image channels at image sizes.
        let stems: Vec<_> = draws(11, ModuleKind::Conv2d).iter().map(conv).collect();
        assert_eq!(stems.len(), 10);
        for c in &stems {
            assert!(c.in_channels <= 4 && c.kernel[0] > c.stride[0], "{c:?}");
            assert!(c.input_hw[0] >= 64 && (16..=128).contains(&c.out_channels));
        }
        // Narrow outputs, whose training step's weight gradient takes the direct path.
        let narrow: Vec<_> = draws(12, ModuleKind::Conv2d).iter().map(conv).collect();
        assert_eq!(narrow.len(), 20);
        assert!(
            narrow
                .iter()
                .all(|c| c.out_channels <= 16 && c.groups == 1 && c.in_channels >= 16)
        );
        // Packed projections: just above the unpacked-weights rows, at transformer widths.
        for s in draws(13, ModuleKind::Linear) {
            let perfcast_core::ModuleSpec::Linear(l) = &s.spec else {
                panic!("not a linear")
            };
            assert!((49..=160).contains(&l.tokens), "{l:?}");
            assert!(l.in_features >= 768 && l.out_features >= 768);
        }
        for s in draws(8, ModuleKind::Concat) {
            let perfcast_core::ModuleSpec::Concat(e) = &s.spec else {
                panic!("not a concat")
            };
            assert!(e.shape[0] >= 64, "{e:?}");
        }
    }

    #[test]
    fn durations_read_as_people_write_them() {
        for (text, s) in [
            ("8m", 480.0),
            ("90s", 90.0),
            ("1m30s", 90.0),
            ("1h", 3600.0),
            ("45", 45.0),
            ("0", 0.0),
        ] {
            assert_eq!(parse_duration_s(text), Ok(s), "{text}");
        }
        for text in ["", "8 min", "m", "-5m", "1.2.3s"] {
            let err = parse_duration_s(text).expect_err(text);
            assert!(err.contains(&format!("`{text}`")), "{err}");
        }
    }

    #[test]
    fn active_rounds_keep_the_random_sweeps_ranges_and_caps() {
        let rounds = active_sweeps(40).expect("sweeps");
        let kinds: Vec<_> = rounds
            .iter()
            .map(|s| (s.modules.clone(), s.samples))
            .collect();
        assert_eq!(
            kinds,
            [
                (vec![ModuleKind::Conv2d], 24),
                (vec![ModuleKind::Linear], 8),
                (vec![ModuleKind::Matmul], 8)
            ]
        );
        let random = quickstart_sweeps(40).expect("sweeps");
        assert_eq!(rounds[0].timing, random[0].timing);
        assert_eq!(rounds[1].timing, random[1].timing);
    }
}

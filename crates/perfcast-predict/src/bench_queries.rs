//! The queries prediction speed is measured on, shared by `perfcast bundle bench` and the
//! profiling driver (`examples/speed.rs`) so that a profile looks inside the figure it explains.

use perfcast_core::{Context, ModuleSpec, Network, Phase, Result, zoo};

/// One conv2d module, VGG-16, and 10,000 module queries of VGG-16's layers at batch 1 to 32,
/// all on one thread in inference.
#[derive(Clone, Debug)]
pub struct BenchQueries {
    /// conv2d 64->64, 3x3, 56x56 input.
    pub conv: ModuleSpec,
    /// Batch 1, inference, 1 thread.
    pub one: Context,
    /// VGG-16 at its default resolution.
    pub vgg: Network,
    /// VGG-16's layers in turn, batch `2^(i % 6)`.
    pub batch: Vec<(ModuleSpec, Context)>,
}

impl BenchQueries {
    /// The queries.
    pub fn new() -> Result<BenchQueries> {
        let conv = ModuleSpec::from_json(
            r#"{"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": 56, "kernel": 3, "padding": 1}"#,
        )?;
        let one = Context {
            batch: 1,
            phase: Phase::Inference,
            threads: 1,
            utilisation: 0.0,
        };
        let vgg = zoo::build("vgg16", None)?;
        let modules = vgg.modules();
        let batch = (0..10_000)
            .map(|i| {
                let (_, spec) = modules[i % modules.len()];
                let context = Context {
                    batch: 1 << (i % 6),
                    ..one.clone()
                };
                (spec.clone(), context)
            })
            .collect();
        Ok(BenchQueries {
            conv,
            one,
            vgg,
            batch,
        })
    }
}

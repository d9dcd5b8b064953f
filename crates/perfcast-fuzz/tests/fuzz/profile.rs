//! perfcast-profile: sweep TOML and sampling.

use std::path::Path;

use perfcast_profile::Sweep;
use proptest::test_runner::TestCaseError;

use crate::harness::{Cost, check, fuzz};
use crate::mutate::{byte_ops, mutate_toml_text, toml_ops};

/// The sweep of the module docs, every setting and a table of each parameter form.
const DOC_SWEEP: &str = r#"
seed = 7
samples = 200
method = "lhs"
modules = ["conv2d", "linear"]
phases = ["inference", "training"]
batch = [1, 2, 4, 8, 16, 32]
threads = [1]
utilisation = [0.0, 0.5]
max_gflop = 1.0
max_mib = 256.0

[conv2d]
in_channels = { min = 3, max = 256, scale = "log" }
kernel = [1, 3, 5]
padding = ["same", "valid"]
groups = [1, "depthwise"]
"#;

/// Every kind, ranges and lists of every form, and the timing table.
const WIDE_SWEEP: &str = r#"
seed = 1
samples = 3
method = "random"
modules = ["conv2d", "linear", "matmul", "maxpool2d", "avgpool2d", "batchnorm2d", "layernorm",
           "relu", "gelu", "softmax", "add", "pow_scalar"]
phases = ["training"]
batch = { min = 1, max = 64, scale = "log" }
threads = { min = 1, max = 4 }
utilization = 0.25
max_gflop = 10
max_mib = 1024

[timing]
warmup_s = 0.0
min_samples = 3
max_samples = 10
target_rel_error = 0.01
max_time_s = 0.1
min_sample_s = 0.0001
rounds = 1

[conv2d]
in_channels = [1, 16]
out_channels = { min = 1, max = 64 }
input_hw = { min = 4, max = 64, scale = "log" }
kernel = 3
stride = [1, 2]
padding = [0, 1, "same"]
dilation = [1, 2]
groups = [1, 2, "depthwise"]
bias = [true, false, 0, 1]

[maxpool2d]
channels = 8
input_hw = [8, 16]
kernel = [2, 3]
stride = [1, 2]
padding = [0, 1, "valid", "same"]

[matmul]
heads = [1, 12]
m = { min = 1, max = 512 }
k = 64
n = { min = 1, max = 512, scale = "log" }

[relu]
c = 1
h = [1, 7]
w = { min = 1, max = 8192, scale = "log" }
"#;

/// `Sweep::from_toml` on mutated sweeps; a sweep that parses samples every kind (at most 2
/// configurations each, to stay fast) into valid specs or a clean error.
#[test]
fn sweep_toml() {
    let texts = [DOC_SWEEP, WIDE_SWEEP, ""];
    let strategy = (0..texts.len(), toml_ops(4), byte_ops(1));
    fuzz("sweep_toml", Cost::Cheap, strategy, |(i, ops, bytes)| {
        let text = mutate_toml_text(texts[i], &ops, &bytes);
        let Ok(mut sweep) = Sweep::from_toml(&text, Path::new("fuzz.toml")) else {
            return Ok(false);
        };
        sweep.samples = sweep.samples.min(2);
        let mut kinds = sweep.modules.clone();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let Ok(samples) = sweep.sample(kind) else {
                continue;
            };
            check(samples.len() == sweep.samples, || {
                format!(
                    "{kind}: {} samples, asked for {}",
                    samples.len(),
                    sweep.samples
                )
            })?;
            for s in &samples {
                check(s.spec.kind() == kind, || {
                    format!("{kind} sampled a {}", s.spec.kind())
                })?;
                s.spec
                    .validate()
                    .map_err(|e| TestCaseError::fail(format!("sampled spec is invalid: {e}")))?;
                for phase in &sweep.phases {
                    s.context(*phase)
                        .validate()
                        .map_err(|e| TestCaseError::fail(format!("sampled context: {e}")))?;
                }
            }
        }
        Ok(true)
    });
}

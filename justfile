# Thin recipes over cargo. `just --list` shows them.

# Measure this machine with the built-in sweep (the main job until the quickstart lands)
profile *ARGS:
    cargo run --release --bin perfcast -- profile {{ARGS}}

# The README's test command
test:
    cargo test --workspace --release

# Formatting and lints as CI runs them
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --release -- -D warnings

# Everything CI runs
ci:
    bash .ci/run

# Compare burn's CPU backends (flex vs ndarray) on conv, linear and matmul
bench-backends:
    cargo run --release --bin perfcast -- backends compare

# Repeatability: re-measure 50 stored rows of a dataset
remeasure DIR:
    cargo run --release --bin perfcast -- datasets remeasure {{DIR}} --rows 50

# Check the GPU code path (needs `apt-get install mesa-vulkan-drivers` without a GPU)
profile-gpu *ARGS:
    cargo run --release -p perfcast-cli --features wgpu -- profile --backend wgpu {{ARGS}}

# Import the published data sets from ../shared/data into datasets/
import-all:
    cargo run --release --bin perfcast -- import neusight ../shared/data/neusight --out datasets/neusight --force
    cargo run --release --bin perfcast -- import justus ../shared/data/justus --out datasets/justus --force
    cargo run --release --bin perfcast -- import deepbench ../shared/data/deepbench --out datasets/deepbench --force
    cargo run --release --bin perfcast -- import vidur ../shared/data/vidur --out datasets/vidur --force

# Train every cheap model on a dataset: just train datasets/neusight/tesla-v100-pcie-32gb models/v100
train DATA OUT *ARGS:
    cargo run --release --bin perfcast -- train --data {{DATA}} --out {{OUT}} {{ARGS}}

# The shipped cross-device GPU bundle checkpoints/gpu: the utilisation model (`util`) on
# NeuSight's forward kernels (7 GPUs), DeepBench's forward kernels and conv training steps
# (fwd + bwd-data + bwd-filter, 10 GPUs), the H100's NeuSight-format kernels of bench/gpu/h100
# and Vidur's fp16 kernels. The H100's conv rows are left out: with them every other GPU's conv
# MAPE rose by 4-10 points (docs/accuracy.md). Justus's TensorFlow conv rows join only for the
# GPUs no kernel-level source measured (K40, K80, M60), with the framework's factor taken out:
# a conv2d-only bundle on the kernel sources (target/gpu-kernels) prices the reference GPUs'
# kernels, `datasets strip-overhead` divides it out. `just import-all import-h100` first;
# target/models-gpu keeps the report.
JUSTUS_REFS := "geforce-gtx-1080-ti,tesla-p100-pcie-16gb,tesla-v100-pcie-16gb"
DB := "datasets/deepbench/geforce-gtx-1080-ti datasets/deepbench/geforce-gtx-titan-x datasets/deepbench/radeon-instinct-mi25 datasets/deepbench/radeon-vega-frontier-edition datasets/deepbench/tesla-m40 datasets/deepbench/tesla-p100-pcie-16gb datasets/deepbench/tesla-t4 datasets/deepbench/tesla-v100-sxm2-16gb datasets/deepbench/titan-x-pascal datasets/deepbench/titan-xp"
gpu-bundle:
    cargo run --release --bin perfcast -- train --data datasets/neusight {{DB}} datasets/h100-ns datasets/vidur --modules conv2d --models util --folds 3 --seed 0 --out target/gpu-kernels-models --force --bundle target/gpu-kernels --max-model-kb 8192 --cost-weight 0 --no-progress
    cargo run --release --bin perfcast -- datasets strip-overhead --data datasets/justus --bundle target/gpu-kernels --reference {{JUSTUS_REFS}} --modules conv2d --out datasets/justus-kernels --force
    cargo run --release --bin perfcast -- train --data datasets/neusight {{DB}} datasets/h100-ns datasets/vidur datasets/justus-kernels --models util --folds 3 --seed 0 --out target/models-gpu --force --bundle checkpoints/gpu --max-model-kb 8192 --cost-weight 0 --no-progress

# The GPU issue's splits (A100 extrapolation, NVIDIA to AMD, leave one GPU out) for the util model
gpu-splits:
    cargo build --release --bin perfcast
    bash bench/gpu/splits.sh target/release/perfcast util

# Leave-one-device-out and anchor-mapping figures of the cross-device models
eval-devices:
    cargo run --release --bin perfcast -- eval devices --data datasets/neusight --modules linear,matmul --models ridge,knn,trees
    cargo run --release --bin perfcast -- eval devices --data datasets/justus --modules conv2d --models trees --holdout tesla-v100-pcie-16gb
    cargo run --release --bin perfcast -- eval anchor --data datasets/deepbench --modules conv2d --phase training --anchor all --same-kind
    cargo run --release --bin perfcast -- eval anchor --data datasets/deepbench --modules matmul --anchor all --same-kind

# Import the H100 measurements committed in bench/gpu/h100 (DeepBench and NeuSight layouts)
import-h100:
    rm -rf target/h100-db target/h100-ns && mkdir -p target/h100-db
    cp bench/gpu/h100/data/conv.csv bench/gpu/h100/data/gemm.csv target/h100-db/
    python3 bench/gpu/h100/split_neusight.py target/h100-ns
    cargo run --release --bin perfcast -- import deepbench target/h100-db --out datasets/h100-db --force
    cargo run --release --bin perfcast -- import neusight target/h100-ns --out datasets/h100-ns --force

#!/usr/bin/env bash
# The GPU issue's evaluation splits on NeuSight's data, for any model family (default util).
# Usage: bench/gpu/splits.sh [perfcast binary] [families] [eval devices options...]
#   (needs datasets/neusight imported: perfcast import neusight ../shared/data/neusight --out
#   datasets/neusight). The import records each GPU's `launch_us` (its smallest adds' 2% latency
#   quantile), which `util` takes as the held-out GPU's launch floor; `--no-launch-us` as a third
#   argument scores without it (floors from the training GPUs alone).
set -euo pipefail
P=${1:-target/release/perfcast}
M=${2:-util}
shift 2 || shift $#
N=datasets/neusight
NV="$N/tesla-p4 $N/tesla-p100-pcie-16gb $N/tesla-t4 $N/tesla-v100-pcie-32gb $N/nvidia-a100-pcie-40gb"
EW=add,mul,div,pow,add_scalar,mul_scalar,div_scalar,pow_scalar,gelu,relu,tanh,layernorm,softmax
echo "== 1. train P4, P100, T4, V100; predict A100-40GB"
$P --no-progress eval devices --data $NV --holdout nvidia-a100-pcie-40gb --models "$M" --modules linear,matmul,$EW "$@"
echo "== 2. train the five NVIDIA GPUs; predict MI100 and MI210 (element-wise, ln, softmax)"
$P --no-progress eval devices --data $NV $N/amd-instinct-mi100 --holdout amd-instinct-mi100 --models "$M" --modules $EW "$@"
$P --no-progress eval devices --data $NV $N/amd-instinct-mi210 --holdout amd-instinct-mi210 --models "$M" --modules $EW "$@"
echo "== 3. leave one GPU out over the five NVIDIA GPUs"
$P --no-progress eval devices --data $NV --models "$M" --modules linear,matmul "$@"

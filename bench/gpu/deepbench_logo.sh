#!/usr/bin/env bash
# DeepBench conv training steps (fwd + bwd-data + bwd-weight, published by Baidu) against the
# GPU bundle's composed training steps, with the scored GPU left out of the bundle's training.
# Usage: bench/gpu/deepbench_logo.sh [perfcast binary] [devices...]
# Needs datasets/neusight and datasets/deepbench imported (`just import-all`); the H100 rows
# (`just import-h100`: NeuSight-format kernels) join the training set when they are there, as
# in `just gpu-bundle`.
set -euo pipefail
P=${1:-target/release/perfcast}; shift || true
D=datasets/deepbench
ALL="geforce-gtx-1080-ti geforce-gtx-titan-x radeon-instinct-mi25 radeon-vega-frontier-edition tesla-m40 tesla-p100-pcie-16gb tesla-t4 tesla-v100-sxm2-16gb titan-x-pascal titan-xp"
TARGETS=${*:-tesla-v100-sxm2-16gb tesla-t4 titan-xp}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for t in $TARGETS; do
  rest=""
  for d in $ALL; do [ "$d" = "$t" ] || rest="$rest $D/$d"; done
  # The P100 and T4 are in NeuSight too: leaving one out means leaving out both.
  ns=$(ls -d datasets/neusight/*/ | grep -v "/$t/" | tr '\n' ' ')
  h100=$(ls -d datasets/h100-ns 2>/dev/null | tr '\n' ' ')
  $P --no-progress train --data $ns $rest $h100 --models util --folds 2 --seed 0 \
     --out "$TMP/models-$t" --force --bundle "$TMP/bundle-$t" --max-model-kb 8192 --cost-weight 0 >/dev/null
  $P --no-progress eval bundle --bundle "$TMP/bundle-$t" --data "$D/$t" --modules conv2d --phase training 2>/dev/null | grep -E 'conv2d +training'
done

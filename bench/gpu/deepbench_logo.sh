#!/usr/bin/env bash
# DeepBench conv training steps (fwd + bwd-data + bwd-weight, published by Baidu) against the
# GPU bundle's composed training steps, with the scored GPU left out of the bundle's training.
# Usage: bench/gpu/deepbench_logo.sh [perfcast binary] [devices...]
# Needs datasets/neusight and datasets/deepbench imported (`just import-all`).
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
  # The P100 is in NeuSight too: leaving it out means leaving out both.
  ns=datasets/neusight
  [ "$t" = tesla-p100-pcie-16gb ] && ns=$(ls -d datasets/neusight/*/ | grep -v p100 | tr '\n' ' ')
  $P --no-progress train --data $ns $rest --models util --phase inference --folds 2 --seed 0 \
     --out "$TMP/models-$t" --force --bundle "$TMP/bundle-$t" --max-model-kb 8192 --cost-weight 0 >/dev/null
  $P --no-progress eval bundle --bundle "$TMP/bundle-$t" --data "$D/$t" --modules conv2d | head -3
done

#!/usr/bin/env bash
# Justus's K80, K40 and M60 (GPUs only a framework measured; their rows stripped of its overhead
# by `just gpu-bundle` into datasets/justus-kernels), each left out of a conv2d bundle trained on
# every other GPU source and the other two's stripped rows, scored on its own stripped rows.
# Usage: bench/gpu/kseries_logo.sh [perfcast binary]
set -euo pipefail
P=${1:-target/release/perfcast}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for t in tesla-k80-one-gk210 tesla-k40 tesla-m60-one-gm204; do
  mkdir -p "$TMP/jk-$t"
  for d in datasets/justus-kernels/*/; do
    [ "$(basename "$d")" = "$t" ] || cp -r "$d" "$TMP/jk-$t/"
  done
  "$P" --no-progress train --data datasets/neusight datasets/deepbench datasets/h100-ns \
    datasets/vidur "$TMP/jk-$t" --modules conv2d --models util --folds 3 --seed 0 \
    --out "$TMP/m-$t" --force --bundle "$TMP/b-$t" --max-model-kb 8192 --cost-weight 0 > /dev/null 2>&1
  "$P" --no-progress eval bundle --bundle "$TMP/b-$t" --data "datasets/justus-kernels/$t" \
    --modules conv2d 2>/dev/null | grep -E 'conv2d +(inference|training)'
done

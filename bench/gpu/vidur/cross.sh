#!/usr/bin/env bash
# Vidur's fp16 layer kernels on a GPU the util model never saw in fp16: trained on NeuSight's
# fp32 kernels and one GPU's fp16 rows, scored per op on the other GPU's (and each way round).
# Usage: bench/gpu/vidur/cross.sh [perfcast binary]   (needs `just import-all`)
set -euo pipefail
P=${1:-target/release/perfcast}
V=datasets/vidur
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for pair in "a100 nvidia-a100-sxm4-80gb-fp16 a40 nvidia-a40-fp16" "a40 nvidia-a40-fp16 a100 nvidia-a100-sxm4-80gb-fp16"; do
  set -- $pair
  echo "== fp16 $3 predicted from $1's fp16 rows (and NeuSight's fp32 kernels)"
  $P --no-progress train --data datasets/neusight $V/$2 --models util --folds 2 --seed 0 \
     --out "$TMP/models" --force --bundle "$TMP/bundle" --max-model-kb 8192 --cost-weight 0 >/dev/null
  $P --no-progress eval bundle --bundle "$TMP/bundle" --data $V/$4 --rows "$TMP/target.csv" >/dev/null
  $P --no-progress eval bundle --bundle "$TMP/bundle" --data $V/$2 --rows "$TMP/source.csv" >/dev/null
  python3 "$(dirname "$0")/ops.py" ../shared/data/vidur/compute "$3" "$TMP/target.csv" "$1" "$TMP/source.csv"
done

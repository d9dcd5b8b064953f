#!/usr/bin/env bash
# DeepBench conv training steps (fwd + bwd-data + bwd-weight, published by Baidu) against the
# GPU bundle's conv2d model, with the scored GPU left out of the bundle's training.
# Usage: bench/gpu/deepbench_logo.sh [perfcast binary] [devices...]
# Needs datasets/neusight, datasets/deepbench and datasets/justus imported (`just import-all`);
# the H100 rows (`just import-h100`: NeuSight-format kernels) join the training set when they
# are there, as in `just gpu-bundle`. JUSTUS=0 leaves Justus's stripped rows out; otherwise each
# target's bundle strips them as `just gpu-bundle` does, from a conv2d bundle that never saw the
# target (and without the target among the references when it is one). OWN=1 also keeps the
# target's own stripped Justus rows (the 1080 Ti and P100; for the V100-SXM2, Justus's V100
# PCIe): a GPU that only a framework's layer timings measured. EXTRA="dir ..." adds datasets
# to every bundle's training (the H100's dense conv rows, say).
set -euo pipefail
P=${1:-target/release/perfcast}; shift || true
D=datasets/deepbench
ALL="geforce-gtx-1080-ti geforce-gtx-titan-x radeon-instinct-mi25 radeon-vega-frontier-edition tesla-m40 tesla-p100-pcie-16gb tesla-t4 tesla-v100-sxm2-16gb titan-x-pascal titan-xp"
REFS="geforce-gtx-1080-ti tesla-p100-pcie-16gb tesla-v100-pcie-16gb"
TARGETS=${*:-tesla-v100-sxm2-16gb tesla-t4 titan-xp}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for t in $TARGETS; do
  rest=""
  for d in $ALL; do [ "$d" = "$t" ] || rest="$rest $D/$d"; done
  # The P100 and T4 are in NeuSight too: leaving one out means leaving out both.
  ns=$(ls -d datasets/neusight/*/ | grep -v "/$t/" | tr '\n' ' ')
  h100=$(ls -d datasets/h100-ns 2>/dev/null | tr '\n' ' ')
  train() {  # BUNDLE [more datasets]
    local bundle=$1; shift
    $P --no-progress train --data $ns $rest $h100 datasets/vidur "$@" --modules conv2d --models util \
       --folds 2 --seed 0 --out "$TMP/models-$t" --force --bundle "$bundle" --max-model-kb 8192 \
       --cost-weight 0 >/dev/null 2>&1
  }
  train "$TMP/bundle-$t" ${EXTRA:-}
  if [ "${JUSTUS:-1}" != 0 ]; then
    # Justus measured the V100 PCIe, DeepBench the SXM2: the same chip.
    j=$t; [ "$t" = tesla-v100-sxm2-16gb ] && j=tesla-v100-pcie-16gb
    refs=$(for r in $REFS; do [ "$r" = "$j" ] || echo -n "$r,"; done)
    $P --no-progress datasets strip-overhead --data datasets/justus --bundle "$TMP/bundle-$t" \
       --reference "${refs%,}" --modules conv2d --out "$TMP/justus-$t" --force >/dev/null
    # A reference left out is stripped too: drop its rows unless OWN=1 asks for them.
    [ "${OWN:-0}" = 1 ] || rm -rf "$TMP/justus-$t/$j"
    train "$TMP/bundle-$t" "$TMP/justus-$t" ${EXTRA:-}
  fi
  $P --no-progress eval bundle --bundle "$TMP/bundle-$t" --data "$D/$t" --modules conv2d --phase training 2>/dev/null | grep -E 'conv2d +training'
done

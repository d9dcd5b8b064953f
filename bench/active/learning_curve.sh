#!/usr/bin/env bash
# Learning curves: held-out MAPE against profiling minutes, random sweeps vs active selection.
#
# usage: bench/active/learning_curve.sh PERFCAST WORKDIR [KIND] [STEPS] [PER_STEP] [BASE]
#
# A fixed test set (KIND, $TEST (default 120) random configurations, seed 777) is measured first. Both
# strategies start from the same random base (BASE configurations, seed 1), then add PER_STEP
# configurations per step: random draws (a new seed each step) or `profile --active` (a pool of
# 8x as many draws, the most disputed measured). The steps alternate between the strategies
# so a slow phase of the machine falls on both. After each step a bundle is trained as the
# quickstart trains (ridge, trees, roofline, medn; 3 folds) and scored on the test set.
# STRATEGIES="random active spread" adds active selection ranked by disagreement alone (active
# ranks it per expected second of measuring).
# Prints one TSV line per (strategy, step): profiling seconds so far (wall time of the profile
# commands, each with its device probe and, for active, its choice), rows, MAPE by phase.
# Run on an idle machine: the profiling seconds are the x axis.
set -euo pipefail
B=$1; W=$2; KIND=${3:-conv2d}; STEPS=${4:-5}; PER=${5:-40}; BASE=${6:-80}
CAP=0.25
mkdir -p "$W"
prof() { # out, extra args...: prints the command's wall seconds (the device probe and the
  # active choice included) and the kind's rows after it
  local out=$1; shift
  local t0; t0=$(date +%s.%N)
  local n; n=$("$B" --no-progress -q profile --modules "$KIND" --max-time-s $CAP --out "$out" \
    --resume --format json "$@" | python3 -c "import json,sys; print(json.load(sys.stdin)['kinds']['$KIND']['total_rows'])")
  python3 -c "import time; print(round(time.time() - $t0, 1), $n)"
}
score() { # dataset, label -> "inference_mape training_mape rows"
  local data=$1 label=$2
  "$B" --no-progress -q train --data "$data" --modules "$KIND" --models ridge,trees,roofline,medn \
    --folds 3 --set medn.max_steps=3000 --out "$W/$label.train" --bundle "$W/$label.bundle" \
    --force > /dev/null
  "$B" --no-progress -q eval bundle --bundle "$W/$label.bundle" --data "$W/test" \
    --modules "$KIND" --format json | python3 -c '
import json,sys
d=json.load(sys.stdin)[0]["kinds"]
m={k["phase"]: k["metrics"]["mape"] for k in d}
print("%.2f\t%.2f" % (m.get("inference", float("nan")), m.get("training", float("nan"))))'
}

if [ ! -d "$W/base" ]; then
  prof "$W/base" --samples "$BASE" --seed 1 > "$W/base.seconds"
fi
# The test set takes the base's device spec: a single-device bundle answers for its own spec,
# and a probe taken in a busy moment reads lower peaks.
if [ ! -d "$W/test" ]; then
  mkdir -p "$W/test" && cp "$W/base/device.json" "$W/test/"
  prof "$W/test" --samples "${TEST:-120}" --seed 777 > /dev/null
fi
read -r base_s base_rows < "$W/base.seconds"
STRATEGIES=${STRATEGIES:-random active}
declare -A spent
for s in $STRATEGIES; do
  rm -rf "${W:?}/$s" && cp -a "$W/base" "$W/$s" && spent[$s]=$base_s
done
printf 'strategy\tstep\tprofiling_s\trows\tinference_mape\ttraining_mape\n'
for s in $STRATEGIES; do
  printf '%s\t0\t%.1f\t%s\t%s\n' "$s" "$base_s" "$base_rows" "$(score "$W/$s" "$s-0")"
done
for step in $(seq 1 "$STEPS"); do
  for s in $STRATEGIES; do
    case $s in
      random) extra=() ;;
      active) extra=(--active) ;;
      spread) extra=(--active --active-spread-only) ;;
    esac
    read -r t n < <(prof "$W/$s" --samples "$PER" --seed $((100 + step)) "${extra[@]}")
    spent[$s]=$(python3 -c "print(${spent[$s]} + $t)")
    printf '%s\t%d\t%.1f\t%s\t%s\n' "$s" "$step" "${spent[$s]}" "$n" "$(score "$W/$s" "$s-$step")"
  done
done

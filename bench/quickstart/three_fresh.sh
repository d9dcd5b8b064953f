#!/usr/bin/env bash
# Three fresh quickstarts on a quiet machine, each scored on the same whole-network runs
# (measured once, after the first) and timed by bench/speed/run.sh.
#
#   bash bench/quickstart/three_fresh.sh [WORKDIR]      # default /tmp/perfcast-three
#
# Environment: PERFCAST_BIN (default $CARGO_TARGET_DIR/release/perfcast, else
# target/release/perfcast), RUNS for the speed script (default 3), SPEED=0 to skip it, and
# KEEP_RUNS=1 to score on new5.jsonl and prof5.jsonl already in WORKDIR instead of measuring.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
P=${PERFCAST_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/perfcast}
M=${1:-/tmp/perfcast-three}
[ -x "$P" ] || { echo "no perfcast binary at $P (cargo build --release --bin perfcast)" >&2; exit 2; }
mkdir -p "$M"
echo "== start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
for q in A B C; do
  rm -rf "$M/qs$q" && mkdir -p "$M/qs$q" && cd "$M/qs$q" || exit 2
  echo "== quickstart $q $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "quickstart wall %e s, peak RSS %M KB" "$P" --no-progress quickstart > qs.log 2>&1
  tail -1 qs.log
  if [ "$q" = A ] && [ "${KEEP_RUNS:-0}" != 1 ]; then
    echo "== runs $(date -u +%T)"
    "$P" measure --network squeezenet1_1,densenet121@112,efficientnet_b0,vit_b_16@64,llama_block@64 \
        --batch 1,4 --phase inference,training --save "$M/new5.jsonl" > "$M/new5.txt" 2>&1
    "$P" measure --network lenet5,alexnet,resnet18,mobilenetv2,vgg16@112 \
        --batch 1,8 --phase inference,training --save "$M/prof5.jsonl" > "$M/prof5.txt" 2>&1
  fi
  "$P" eval networks --bundle checkpoints/local --from "$M/new5.jsonl" > eval-new5.txt 2>&1
  "$P" eval networks --bundle checkpoints/local --from "$M/prof5.jsonl" > eval-prof5.txt 2>&1
  grep -E "runs: MAPE" eval-new5.txt eval-prof5.txt
  if [ "${SPEED:-1}" != 0 ]; then
    PERFCAST_BIN="$P" RUNS=${RUNS:-3} bash "$repo/bench/speed/run.sh" "$M/qs$q/checkpoints/local" > speed.txt 2>&1
    grep -E "p50|Python|requests/s" speed.txt
  fi
done
echo "== end $(date -u +%T)"

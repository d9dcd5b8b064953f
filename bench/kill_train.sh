#!/usr/bin/env bash
# Kill -9 `train --bundle` at random points, N times; after every kill the bundle must
# load (old or new, never neither), and after one more full run no staging directory is left.
#
#   bash bench/kill_train.sh [trials=100] [perfcast=target/release/perfcast]
set -euo pipefail
trials="${1:-100}"
bin="${2:-${CARGO_TARGET_DIR:-target}/release/perfcast}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/sweep.toml" <<'TOML'
seed = 1
phases = ["inference", "training"]
batch = [1, 2, 4, 8]
[timing]
warmup_s = 0.0
min_samples = 3
max_time_s = 0.01
[relu]
c = { min = 1, max = 64, scale = "log" }
h = { min = 2, max = 32 }
w = [4, 8]
[linear]
tokens = [1]
in_features = { min = 4, max = 256, scale = "log" }
out_features = [8]
TOML
"$bin" profile --modules relu,linear --samples 40 --sweep "$work/sweep.toml" --out "$work/ds" -q
train() {
  "$bin" train --data "$work/ds" --models ridge,trees --folds 3 --out "$work/m" --force \
    --bundle "$work/b" -q --format json >/dev/null 2>&1
}
train
start=$(date +%s%N); train; full_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "one train run: ${full_ms} ms; killing at uniform random points in [0, ${full_ms}] ms"
intact=0; new=0
for i in $(seq 1 "$trials"); do
  before=$(sha256sum "$work/b/manifest.json" | cut -c1-16)
  train & pid=$!
  sleep "$(awk -v r="$RANDOM" -v m="$full_ms" 'BEGIN{printf "%.3f", r/32767*m/1000}')"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if "$bin" bundle show "$work/b" --format json >/dev/null 2>&1; then
    intact=$((intact + 1))
    after=$(sha256sum "$work/b/manifest.json" | cut -c1-16)
    [ "$before" != "$after" ] && new=$((new + 1))
  else
    echo "trial $i: the bundle does not load"; ls -la "$work" "$work/b" || true
  fi
done
leftover_before=$(find "$work" -maxdepth 1 -name '.perfcast-*' | wc -l)
train
leftover_after=$(find "$work" -maxdepth 1 -name '.perfcast-*' | wc -l)
echo "trials: $trials; bundle loads after the kill: $intact (the new one in $new)"
echo "staging directories left by the kills: $leftover_before; after the next run: $leftover_after"
[ "$intact" -eq "$trials" ] && [ "$leftover_after" -eq 0 ]

#!/usr/bin/env bash
# One arm of the students A/B: the quickstart's training step on a quickstart run's dataset,
# without (`base`) or with (`dist`) `--distill`, calibrated on stored calibration runs and
# scored on stored network runs (bench/quickstart/three_fresh.sh keeps both kinds of runs).
#
#   bash bench/speed/distill/ab_arm.sh RUN_DIR base|dist CALIBRATION.jsonl WORKDIR
#
# RUN_DIR is one quickstart of three_fresh.sh (WORKDIR/qsA): its dataset is trained on, and
# new5.jsonl / prof5.jsonl beside it are scored. Prints the training time and the four
# whole-network MAPEs (new five, profiled five; inference, training).
set -uo pipefail
Q=$(cd "$1" && pwd); ARM=$2; CAL=$3; OUT=$4
P=${PERFCAST_BIN:-$CARGO_TARGET_DIR/release/perfcast}
D=$(ls -d "$Q"/datasets/*/ | head -1); D=${D%/}
R=$(dirname "$Q"); X=$(basename "$Q")
extra=(); [ "$ARM" = dist ] && extra=(--distill)
B="$OUT/$X-$ARM-b"
mkdir -p "$OUT"; rm -rf "$B" "$OUT/$X-$ARM-out"
/usr/bin/time -f "%e s" "$P" --no-progress train --data "$D" --models ridge,trees,roofline,medn \
    --folds 3 --set medn.max_steps=10000 --set medn.width=48 --refit "${extra[@]}" --force \
    --out "$OUT/$X-$ARM-out" --bundle "$B" > "$OUT/$X-$ARM-train.log" 2>&1
"$P" --no-progress calibrate --bundle "$B" --from "$CAL" > "$OUT/$X-$ARM-cal.log" 2>&1 \
    || tail -2 "$OUT/$X-$ARM-cal.log"
for f in new5 prof5; do
  "$P" eval networks --bundle "$B" --from "$R/$f.jsonl" > "$OUT/$X-$ARM-$f.txt" 2>&1
done
printf "%s %s train %s | " "$X" "$ARM" "$(tail -1 "$OUT/$X-$ARM-train.log")"
for f in new5 prof5; do
  grep -E "runs: MAPE" "$OUT/$X-$ARM-$f.txt" | awk '{printf "%s %s ", $1, $NF}'
done
echo
grep "student of" "$OUT/$X-$ARM-train.log" || true

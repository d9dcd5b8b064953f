#!/usr/bin/env bash
# A distilled conv2d student against its teacher, on one quickstart run of
# bench/quickstart/three_fresh.sh: the run's conv2d pick (the teacher) labels its own rows and
# four jittered neighbours of each (augment.py), a MEDN of width W learns those labels
# (`perfcast train --models medn`), and the student is spliced into a copy of the run's bundle;
# prints both bundles' network errors, the conv2d rows' errors and one module's time.
#
#   bash bench/speed/distill/run_conv.sh WORKDIR/qsA 32 [OUT]
#
# Environment: PERFCAST_BIN (default $CARGO_TARGET_DIR/release/perfcast), SPEED_BIN (the
# profiling driver, `cargo build --release -p perfcast-predict --example speed`; timing skipped
# without it). Needs pyarrow and numpy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
Q=$(cd "$1" && pwd); W=$2; OUT=${3:-$(mktemp -d)}
P=${PERFCAST_BIN:-$CARGO_TARGET_DIR/release/perfcast}
D=$(ls -d "$Q"/datasets/*/ | head -1); D=${D%/}
R=$(dirname "$Q")
mkdir -p "$OUT"
"$P" --no-progress eval bundle --bundle "$Q/checkpoints/local" --data "$D" --modules conv2d --rows "$OUT/rows.csv" > /dev/null 2>&1
python3 "$here/relabel.py" "$D" "$OUT/rows.csv" conv2d "$OUT/teacher" > /dev/null
PERFCAST_BIN=$P python3 "$here/augment.py" "$Q/checkpoints/local" 4 "$OUT/teacher" 2>/dev/null | tail -1
"$P" --no-progress train --data "$OUT/teacher" --modules conv2d --models medn --folds 3 \
    --set medn.max_steps=10000 --set medn.width="$W" --refit --force --out "$OUT/student-out" \
    --bundle "$OUT/student" > "$OUT/student.log" 2>&1
grep -E "^conv2d " "$OUT/student.log" | tail -1
python3 - "$Q/checkpoints/local" "$OUT/student" "$OUT/spliced" <<'PY'
import json, shutil, sys, os
src, st, out = sys.argv[1:4]
if os.path.exists(out): shutil.rmtree(out)
shutil.copytree(src, out)
m = json.load(open(f"{out}/manifest.json")); s = json.load(open(f"{st}/manifest.json"))
m["kinds"]["conv2d"] = s["kinds"]["conv2d"]
shutil.rmtree(f"{out}/conv2d"); shutil.copytree(f"{st}/conv2d", f"{out}/conv2d")
json.dump(m, open(f"{out}/manifest.json", "w"), indent=2)
PY
for f in new5 prof5; do
  [ -f "$R/$f.jsonl" ] || continue
  printf "%s, inference / training: " "$f"
  for b in "$Q/checkpoints/local" "$OUT/spliced"; do
    "$P" eval networks --bundle "$b" --from "$R/$f.jsonl" 2>&1 | grep "runs: MAPE" | awk '{printf "%s ", $NF}'
    printf "| "
  done; echo "(teacher | student)"
done
for b in "$Q/checkpoints/local" "$OUT/spliced"; do
  "$P" --no-progress eval bundle --bundle "$b" --data "$D" --modules conv2d 2>&1 | grep "conv2d " | sed 's/^.*conv2d */conv2d /'
done
if [ -n "${SPEED_BIN:-}" ]; then
  for b in "$Q/checkpoints/local" "$OUT/spliced"; do "$SPEED_BIN" "$b" module 300000; done
fi

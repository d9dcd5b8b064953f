#!/usr/bin/env bash
# DeepBench conv rows of GPUs that are in training, scored on rows held out: each GPU's conv
# rows split in two halves at random (seed 42, or $SEED), a conv2d bundle trained on one half
# of every GPU (plus the other GPU sources of `just gpu-bundle`) and scored on the other half,
# both ways round; prints the held-out MAPE per GPU and phase. (`eval bundle` on the datasets
# a bundle was trained on scores mostly its own training rows.)
# Usage: [SEED=N] bench/gpu/deepbench_halves.sh [perfcast binary]
# Needs `just import-all import-h100 && just gpu-bundle` (datasets/justus-kernels), pyarrow.
set -euo pipefail
P=${1:-target/release/perfcast}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$TMP" <<'PY'
import glob, os, shutil, sys
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
tmp = sys.argv[1]
for path in sorted(glob.glob("datasets/deepbench/*/conv2d.parquet")):
    dev = path.split("/")[-2]
    if "xeon" in dev:
        continue
    t = pq.read_table(path)
    # Row selection has no kernel for string views: plain strings instead.
    t = pa.table({n: c.cast(pa.string()) if str(c.type) == "string_view" else c
                  for n, c in zip(t.column_names, t.columns)})
    first = np.random.default_rng(int(os.environ.get("SEED", "42"))).random(t.num_rows) < 0.5
    for half, mask in (("A", first), ("B", ~first)):
        out = f"{tmp}/{half}/{dev}"
        os.makedirs(out)
        shutil.copy(path.replace("conv2d.parquet", "device.json"), out)
        pq.write_table(t.filter(pa.array(mask)), f"{out}/conv2d.parquet")
PY
for pair in "A B" "B A"; do
  set -- $pair
  "$P" --no-progress train --data datasets/neusight "$TMP/$1" datasets/h100-ns datasets/vidur \
    datasets/justus-kernels --modules conv2d --models util --folds 3 --seed 0 --out "$TMP/m$1" \
    --force --bundle "$TMP/b$1" --max-model-kb 8192 --cost-weight 0 > /dev/null 2>&1
  "$P" --no-progress eval bundle --bundle "$TMP/b$1" --data "$TMP/$2" --modules conv2d \
    --rows "$TMP/rows$2.csv" > /dev/null 2>&1
done
python3 - "$TMP" <<'PY'
import csv, sys
from collections import defaultdict
errors = defaultdict(list)
for half in "AB":
    for r in csv.DictReader(open(f"{sys.argv[1]}/rows{half}.csv")):
        errors[(r["device"], r["phase"])].append(abs(float(r["predicted_ms"]) / float(r["measured_ms"]) - 1))
print(f"{'GPU':<32} {'inference':>9} {'training':>9}")
means = defaultdict(list)
for dev in sorted({d for d, _ in errors}):
    row = []
    for phase in ("inference", "training"):
        e = errors.get((dev, phase), [])
        m = 100 * sum(e) / len(e) if e else float("nan")
        means[phase].append(m)
        row.append(f"{m:9.1f}")
    print(f"{dev:<32} {' '.join(row)}")
print(f"{'mean':<32} " + " ".join(f"{sum(v) / len(v):9.1f}" for v in means.values()))
PY

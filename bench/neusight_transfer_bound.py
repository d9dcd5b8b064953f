#!/usr/bin/env python3
"""How well can the other four NeuSight GPUs' *measured* times explain a held-out GPU's?

NeuSight linear and bmm are judged leaving one GPU out, predicted from the held-out GPU's
spec alone (docs/accuracy.md#leave-one-gpu-out-and-what-the-other-gpus-can-explain). This
script measures what the published data allows,
with maps that are *given* the held-out GPU's own times to fit (oracles, so optimistic bounds):

- `const`: t_target = c * t_anchor, one constant per (target, anchor) pair, c = the median ratio;
- `pow`:   log t_target = a * log t_anchor + b, least squares per pair;
- `all`:   log t_target = sum_i a_i log t_anchor_i + b over all four other GPUs (5 parameters);
- `shape`: `all` plus log B, M, N, K, their degree-2 products and each anchor's time times each
           log dimension (35 parameters): a shape-dependent map between devices.

All on the configurations every GPU measured (the same B, M, N, K). A predictor from specs has
none of the target's times, so where even these oracles miss by much, a spec-only
predictor cannot be expected to reach it on this data; where only the shape-dependent map does, a
predictor must learn how that map changes with the spec from four training GPUs. numpy only.
Usage:

    python3 bench/neusight_transfer_bound.py ../shared/data/neusight linear
    python3 bench/neusight_transfer_bound.py ../shared/data/neusight bmm
"""

import csv
import glob
import itertools
import os
import sys

import numpy as np


def load(root, kind):
    times = {}
    for path in sorted(glob.glob(os.path.join(root, kind, "*.csv"))):
        gpu = os.path.basename(path)[:-4]
        rows = {}
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                key = (int(r["B"]), int(r["M"]), int(r["N"]), int(r["K"]))
                rows[key] = float(r["Latency"])
        times[gpu] = rows
    return times


def mape(pred, true):
    return float(np.mean(np.abs(pred - true) / true) * 100)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("linear", "bmm"):
        sys.exit(__doc__)
    times = load(sys.argv[1], sys.argv[2])
    gpus = list(times)
    keys = sorted(set.intersection(*[set(t) for t in times.values()]))
    t = {g: np.array([times[g][k] for k in keys]) for g in gpus}
    print(f"{sys.argv[2]}: {len(keys)} configurations measured on all {len(gpus)} GPUs")
    logs = np.log(np.array(keys, dtype=float))
    dims = [logs[:, i] for i in range(4)]
    square = [a * b for a, b in itertools.combinations_with_replacement(dims, 2)]
    best_pow, best_all, best_shape = [], [], []
    for g in gpus:
        y = np.log(t[g])
        cells = []
        pows = []
        for h in gpus:
            if h == g:
                continue
            x = np.log(t[h])
            const = mape(t[h] * np.exp(np.median(y - x)), t[g])
            a = np.vstack([x, np.ones_like(x)]).T
            fit = np.linalg.lstsq(a, y, rcond=None)[0]
            pw = mape(np.exp(a @ fit), t[g])
            pows.append(pw)
            cells.append(f"{h[:14]} const {const:.1f} pow {pw:.1f}")
        x = np.vstack([np.log(t[h]) for h in gpus if h != g] + [np.ones(len(keys))]).T
        fit = np.linalg.lstsq(x, y, rcond=None)[0]
        every = mape(np.exp(x @ fit), t[g])
        anchors = [np.log(t[h]) for h in gpus if h != g]
        cross = [a * d for a in anchors for d in dims]
        x = np.vstack(anchors + dims + square + cross + [np.ones(len(keys))]).T
        fit = np.linalg.lstsq(x, y, rcond=None)[0]
        shaped = mape(np.exp(x @ fit), t[g])
        best_pow.append(min(pows))
        best_all.append(every)
        best_shape.append(shaped)
        print(
            f"  {g[:22]:<22} | " + "; ".join(cells) + f" | all {every:.1f} | shape {shaped:.1f}"
        )
    print(
        f"  mean over held-out GPUs: best single-anchor pow {np.mean(best_pow):.1f}%, "
        f"all four anchors {np.mean(best_all):.1f}%, shape-dependent {np.mean(best_shape):.1f}%"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How far apart are DeepBench's GPUs on GEMMs, and does the published spec say by how much?

PROFET-style anchor mapping on DeepBench's fp32 training GEMMs is judged with each GPU left
out in turn (`perfcast eval anchor --data datasets/deepbench --modules matmul --anchor all
--same-kind`; its score is in docs/accuracy.md#anchor-mapping-on-deepbench). For every held-out
GPU this script prints, for its closest anchors:

- `oracle`: the MAPE of t_target = c * t_anchor with the one constant c that minimises it,
  chosen knowing the target's times (an optimistic bound for any map with one level per pair);
- `c`: that constant, beside `peak`, the ratio of the anchor's published peak GFLOP/s to the
  target's (what the spec says c should be on compute-bound GEMMs), and `peak MAPE`, the MAPE
  of the constant c = peak, and `1.0 MAPE`, of c = 1 (the two cards taken as equally fast);
- `flip` where the measured c and the spec's peak ratio fall on opposite sides of 1: the spec
  says the target is the faster card and it is the slower, or the other way round.

Same-stack pairs of near-identical chips (GTX 1080 Ti and TITAN Xp, M40 and TITAN X) are
close to a constant ratio, but in the opposite order to their published peaks (board
clocks and power limits, not in the spec), so no spec-only rule can find that level. numpy only.
Usage:

    python3 bench/deepbench_pair_bound.py ../shared/data/deepbench
"""

import csv
import os
import sys
from collections import defaultdict

import numpy as np

# Published fp32 peak GFLOP/s of DeepBench's GPUs, as `perfcast import deepbench` writes them
# into each device.json (`peak_gflops`).
PEAK = {
    "NV_1080Ti": 11340.0,
    "NV_TitanX": 6605.0,
    "AMD_MI25": 12288.0,
    "AMD_VegaFE": 13107.0,
    "NV_M40": 6844.0,
    "NV_P100": 9300.0,
    "NV_T4": 8141.0,
    "NV_V100": 15700.0,
    "NV_TitanX_Pascal": 10974.0,
    "NV_TitanXp": 12150.0,
}


def load(root):
    times = defaultdict(dict)
    with open(os.path.join(root, "gemm.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["precision"] != "Float" or r["mode"] != "train" or r["device"] not in PEAK:
                continue
            key = (r["M"], r["N"], r["K"], r["A_T"], r["B_T"])
            ms = float(r["time_ms"])
            if ms > 0:
                times[r["device"]][key] = ms
    return times


def mape(pred, true):
    return float(np.mean(np.abs(pred - true) / true) * 100)


def best_constant(x, y):
    """The c minimising mean |c x - y| / y: the median of y / x weighted by x / y."""
    r = y / x
    order = np.argsort(r)
    w = (x / y)[order]
    cum = np.cumsum(w)
    c = float(r[order][np.searchsorted(cum, cum[-1] / 2)])
    return c, mape(c * x, y)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    times = load(sys.argv[1])
    gpus = sorted(times)
    best = []
    print(f"{'target':18} {'anchor':18} {'oracle':>7} {'c':>6} {'peak':>6} {'peak MAPE':>9} {'1.0 MAPE':>8}")
    for target in gpus:
        rows = []
        for anchor in gpus:
            if anchor == target:
                continue
            keys = sorted(set(times[target]) & set(times[anchor]))
            y = np.array([times[target][k] for k in keys])
            x = np.array([times[anchor][k] for k in keys])
            c, oracle = best_constant(x, y)
            peak = PEAK[anchor] / PEAK[target]
            rows.append((oracle, anchor, c, peak, mape(peak * x, y), mape(x, y)))
        rows.sort()
        best.append(rows[0][0])
        for oracle, anchor, c, peak, peak_mape, equal in rows[:3]:
            flip = "flip" if (c - 1) * (peak - 1) < 0 else ""
            print(
                f"{target:18} {anchor:18} {oracle:6.1f}% {c:6.3f} {peak:6.3f} "
                f"{peak_mape:8.1f}% {equal:7.1f}% {flip}"
            )
    print(
        f"mean over held-out GPUs of the best one-anchor constant (oracle): "
        f"{np.mean(best):.1f}%"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Achieved fp32 efficiency of each NeuSight GPU by kernel duration.

Efficiency = 2 B M N K / latency / the config's `SingleFLOPs`, median per decade of measured
latency (0.1-1, 1-10, 10-100, 100-1000, over 1000 ms; nan where a decade has 5 rows or fewer).
Shows which GPUs lose efficiency on long kernels (power or clock limits no spec field
carries). numpy only. Usage:

    python3 bench/neusight_efficiency.py ../shared/data/neusight
"""

import csv
import glob
import json
import os
import sys

import numpy as np

DECADES = [(0.1, 1), (1, 10), (10, 100), (100, 1000), (1000, float("inf"))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    configs = {}
    for path in glob.glob(os.path.join(root, "device_configs", "*.json")):
        with open(path) as f:
            configs[os.path.basename(path)[:-5]] = json.load(f)
    for kind in ("linear", "bmm"):
        for path in sorted(glob.glob(os.path.join(root, kind, "*.csv"))):
            gpu = os.path.basename(path)[:-4]
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            b, m, n, k, t = (
                np.array([float(r[c]) for r in rows]) for c in ("B", "M", "N", "K", "Latency")
            )
            eff = 2 * b * m * n * k / (t * 1e-3) / (configs[gpu]["SingleFLOPs"] * 1e9)
            cells = []
            for lo, hi in DECADES:
                sel = (t >= lo) & (t < hi)
                cells.append(f"{np.median(eff[sel]):.2f}" if sel.sum() > 5 else "nan")
            print(f"{kind:<6} {gpu[:24]:<24} " + " ".join(f"{c:>5}" for c in cells)
                  + f"   max {eff.max():.2f}")


if __name__ == "__main__":
    main()

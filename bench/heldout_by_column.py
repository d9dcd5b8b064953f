#!/usr/bin/env python3
"""Held-out error of one model grouped by one feature column.

`perfcast train` writes `<out>/<module>/heldout.csv` (features, `measured_ms`, `<model>_ms`);
this prints, per value of a column, the rows, their MAPE, the mean log(predicted / measured)
and their share of the total error. Standard library only. Usage:

    perfcast train --data datasets/cpu-conv-m2 --models ridge-trees --out /tmp/x --force
    python3 bench/heldout_by_column.py /tmp/x/conv2d/heldout.csv ridge-trees kernel_h
"""

import csv
import math
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, model, column = sys.argv[1:]
    groups = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            m, p = float(r["measured_ms"]), float(r[f"{model}_ms"])
            groups[r[column]].append((abs(p - m) / m, math.log(p / m)))
    total = sum(e for g in groups.values() for e, _ in g)
    rows = sum(len(g) for g in groups.values())
    print(f"{model} on {path}: {rows} rows, MAPE {100 * total / rows:.2f}%")
    for value in sorted(groups, key=lambda v: (len(v), v)):
        g = groups[value]
        mape = 100 * sum(e for e, _ in g) / len(g)
        bias = sum(b for _, b in g) / len(g)
        share = 100 * sum(e for e, _ in g) / total
        print(f"  {column}={value}: {len(g)} rows, MAPE {mape:.1f}%, "
              f"mean log(p/m) {bias:+.3f}, {share:.1f}% of the error")


if __name__ == "__main__":
    main()

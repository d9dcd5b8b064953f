#!/usr/bin/env python3
"""Write data/neusight.csv in NeuSight's folder layout, so `perfcast import neusight` reads it.

Usage: python3 bench/gpu/h100/split_neusight.py OUT_DIR
then:  perfcast import neusight OUT_DIR --out datasets/h100-neusight
"""
import csv
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEM = "NVIDIA_H100_80GB_HBM3"
# NeuSight's own config for this GPU (MIT, NeuSight project).
CONFIG = {"Device": "NVIDIA H100 80GB HBM3", "Dev_Mem": 80, "Mem_Bw": 3430, "Num_Sm": 132,
          "Core_Per_SM": 128, "Freq": 1980, "SingleFLOPs": 66908, "L2Cache": 50}

out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(HERE, "data", "neusight.csv"))))
by_op = {}
for r in rows:
    by_op.setdefault(r["OPName"], []).append(r)
for op, rs in by_op.items():
    os.makedirs(os.path.join(out, op), exist_ok=True)
    cols = ["B", "M", "N", "K"] if op in ("linear", "bmm") else ["B", "H"]
    with open(os.path.join(out, op, STEM + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["OPName", "Latency", "Device"] + cols)
        for r in rs:
            w.writerow([op, r["Latency"], CONFIG["Device"]] + [r[c] for c in cols])
os.makedirs(os.path.join(out, "device_configs"), exist_ok=True)
json.dump(CONFIG, open(os.path.join(out, "device_configs", STEM + ".json"), "w"), indent=1)
print({op: len(rs) for op, rs in by_op.items()})

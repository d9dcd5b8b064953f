#!/usr/bin/env python3
"""Writes a synthetic linear-layer dataset for MEDN's 100,000-row training benchmark.

138,889 rows: after `perfcast train`'s 20% test split and MEDN's 10% validation split exactly
100,000 training rows remain. Shapes are log-uniform (tokens 1-4096, features 16-8192); the
latency is a launch floor plus the FLOPs at 50 GFLOP/s with 5% log-normal noise, so the model
has something smooth to learn. Deterministic (seed 0). Usage:

    python3 bench/synth_linear.py /tmp/synth
    perfcast import csv /tmp/synth/linear.csv --mapping /tmp/synth/map.toml --out /tmp/synth/ds
    python3 bench/medn_torch.py --data /tmp/synth/ds --module linear --threads 1 \\
        --set medn.max_steps=3920      # batch 512: 3,920 steps are 20 epochs of 100,000 rows
"""

import math
import os
import random
import sys

ROWS = 138_889

MAPPING = """kind = "linear"
backend = "synthetic"
unit = "us"
phase = "inference"
[device]
name = "synthetic"
kind = "cpu"
peak_gflops = 100.0
mem_bandwidth_gbs = 20.0
cores = 2
threads = 2
clock_mhz = 2600.0
memory_gb = 16.0
cache_mb = 32.0
source = "measured"
[columns]
tokens = "tokens"
in_features = "in_f"
out_features = "out_f"
median_ms = "us"
[defaults]
bias = true
batch = 1
threads = 2
"""


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    tmp = os.path.join(out, "linear.csv.tmp")
    with open(tmp, "w") as f:
        f.write("tokens,in_f,out_f,us\n")
        for _ in range(ROWS):
            t = log_uniform(rng, 1, 4096)
            i = log_uniform(rng, 16, 8192)
            o = log_uniform(rng, 16, 8192)
            us = (5.0 + 2.0 * t * i * o / 50e3) * math.exp(rng.gauss(0.0, 0.05))
            f.write(f"{t},{i},{o},{us:.3f}\n")
    os.replace(tmp, os.path.join(out, "linear.csv"))
    with open(os.path.join(out, "map.toml"), "w") as f:
        f.write(MAPPING)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training speed of MEDN: perfcast (burn, CPU) against PyTorch (CPU), same architecture and work.

Runs `perfcast train --models medn` on a dataset, reads the fitted checkpoint's architecture and
training history (input width, widths, depth, heads, batch size, steps, epochs, validation
samples, seconds), then trains the same network in PyTorch for the same number of optimiser steps
with the same batch size, loss (masked L1 in log space), optimiser (Adam, cosine schedule) and a
validation forward pass per epoch, on the same thread count. Inputs are random standardised
rows of the same shape: values do not change the arithmetic, so the comparison is of speed only.

Not part of CI: needs `torch` (pip install torch). Usage:

    python3 bench/medn_torch.py --data datasets/cpu-big --module conv2d --threads 2

Prints one JSON object: perfcast seconds, PyTorch seconds, and the ratio (PyTorch / perfcast,
above 1 means perfcast is faster).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="perfcast dataset directory")
    ap.add_argument("--module", default="conv2d", help="module kind to train")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads for both")
    ap.add_argument("--perfcast", default="target/release/perfcast", help="perfcast binary")
    ap.add_argument("--set", action="append", default=[], help="extra `medn.field=value`")
    args = ap.parse_args()

    import torch  # imported late so --help works without torch

    torch.set_num_threads(args.threads)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "models")
        cmd = [args.perfcast, "train", "--data", args.data, "--modules", args.module,
               "--models", "medn", "--folds", "2", "--out", out, "--no-progress"]
        for s in args.set:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, args.module, "medn", "medn.json")) as f:
            meta = json.load(f)

    results = []
    for config, hist in zip(meta["configs"], meta["history"]):
        torch_s = train_torch(torch, config, hist)
        results.append({
            "d_input": config["d_input"], "width": config["width"], "depth": config["depth"],
            "tasks": config["tasks"], "batch_size": hist["batch_size"], "steps": hist["steps"],
            "epochs": hist["epochs"], "perfcast_s": hist["seconds"], "torch_s": torch_s,
            "ratio_torch_over_perfcast": torch_s / hist["seconds"],
        })
    print(json.dumps({"module": args.module, "threads": args.threads,
                      "torch": torch.__version__, "networks": results}, indent=2))


def train_torch(torch, c, h):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.norm, self.linear = nn.LayerNorm(w), nn.Linear(w, w)

        def forward(self, x):
            return x + torch.relu(self.linear(self.norm(x)))

    class Medn(nn.Module):
        def __init__(self):
            super().__init__()
            w = c["width"]
            self.input = nn.Linear(c["d_input"], w)
            self.blocks = nn.Sequential(*[Block(w) for _ in range(c["depth"])])
            self.out_norm = nn.LayerNorm(w)
            self.latent = nn.Linear(w, c["latent"])
            self.heads = nn.ModuleList([
                nn.Sequential(nn.Linear(c["latent"], c["head_width"]), nn.ReLU(),
                              nn.Linear(c["head_width"], 1))
                for _ in range(c["tasks"])])

        def forward(self, x):
            z = torch.relu(self.latent(self.out_norm(self.blocks(self.input(x)))))
            return torch.cat([hd(z) for hd in self.heads], dim=1)

    torch.manual_seed(0)
    n, nv, b, t = h["train_samples"], max(h["val_samples"], 1), h["batch_size"], c["tasks"]
    x, y = torch.randn(n, c["d_input"]), torch.randn(n, t)
    m = (torch.rand(n, t) > 0.1).float()
    xv = torch.randn(nv, c["d_input"])
    net = Medn()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-5)
    total = h["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    start = time.perf_counter()
    step = 0
    while step < total:
        perm = torch.randperm(n)
        for i in range(0, n, b):
            idx = perm[i:i + b]
            diff = (net(x[idx]) - y[idx]) * m[idx]
            loss = (diff.abs().sum(0) / m[idx].sum(0).clamp(min=1)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step >= total:
                break
        with torch.no_grad():
            net.eval()
            net(xv)
            net.train()
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The zoo CNNs' training steps as a GPU bundle predicts them on every DeepBench, NeuSight and
Justus GPU (and the H100), against the spec roofline of the same work: the ratio predicted / roofline
per network and GPU. A ratio below 1 would be a prediction faster than the device can run.

Usage: python3 bench/gpu/zoo_roofline.py PERFCAST BUNDLE [--batch 64] [--json OUT]
"""
import json
import subprocess
import sys

perfcast, bundle = sys.argv[1], sys.argv[2]
batch = sys.argv[sys.argv.index("--batch") + 1] if "--batch" in sys.argv else "64"
NETS = [("lenet5", 32), ("alexnet", 224), ("vgg11", 224), ("vgg16", 224), ("resnet18", 224),
        ("resnet50", 224), ("mobilenetv2", 224)]
GPUS = ["geforce-gtx-1080-ti", "geforce-gtx-titan-x", "radeon-instinct-mi25",
        "radeon-vega-frontier-edition", "tesla-m40", "tesla-p100-pcie-16gb", "tesla-t4",
        "tesla-v100-sxm2-16gb", "titan-x-pascal", "titan-xp", "amd-instinct-mi100",
        "amd-instinct-mi210", "nvidia-a100-80gb-pcie", "nvidia-a100-pcie-40gb", "tesla-p4",
        "tesla-v100-pcie-32gb", "nvidia-h100-80gb-hbm3", "tesla-k40", "tesla-k80-one-gk210",
        "tesla-m60-one-gm204"]

table = {}
for gpu in GPUS:
    for net, res in NETS:
        cmd = [perfcast, "--no-progress", "predict", "--bundle", bundle, "--device", gpu,
               "--network", net, "--resolution", str(res), "--batch", batch,
               "--phase", "training", "--format", "json"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: {out.stderr.strip()}")
        p = json.loads(out.stdout)
        table[(gpu, net)] = (p["layer_sum_ms"], p["total_ms"], p["roofline_ms"])

print(f"training step at batch {batch}: predicted layer sum / spec roofline of the same layers")
print(f"{'GPU':<30}" + "".join(f"{n:>12}" for n, _ in NETS))
lowest = min(v[0] / v[2] for v in table.values())
for gpu in GPUS:
    print(f"{gpu:<30}" + "".join(f"{table[(gpu, n)][0] / table[(gpu, n)][2]:>12.2f}" for n, _ in NETS))
print(f"lowest ratio: {lowest:.2f} ({'none below the roofline' if lowest >= 1 else 'BELOW THE ROOFLINE'})")
if "--json" in sys.argv:
    rows = [{"gpu": g, "network": n, "layer_sum_ms": v[0], "total_ms": v[1], "roofline_ms": v[2]}
            for (g, n), v in table.items()]
    json.dump(rows, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)

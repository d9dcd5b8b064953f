#!/usr/bin/env python3
"""Per-op accuracy of a bundle on Vidur's fp16 kernels of a GPU it was not trained on.

Usage: ops.py VIDUR_COMPUTE_DIR TARGET_GPU ROWS_TARGET.csv SOURCE_GPU ROWS_SOURCE.csv

ROWS_*.csv are `perfcast eval bundle --rows` outputs on the target's and the source's Vidur
datasets. Each scored row is labelled with the op it was imported from (the shapes of every
model and TP degree in the target's `mlp.csv` files), and scored against the issue's baseline:
one constant utilisation (the median of the source GPU's measured roofline / (time - 5 us),
per op) plus a 5 us floor.
"""
import csv, glob, math, os, re, statistics as st, sys

compute, target, rows_t, source, rows_s = sys.argv[1:6]
SPECS = {
    "a100": dict(peak=312e12, bw=2039e9),
    "a40": dict(peak=149.7e12, bw=696e9),
}
FLOOR = 5e-6


def ops_of(gpu):
    """(kind, module description) -> op name, from the shapes of every mlp.csv row."""
    label = {}
    for path in glob.glob(os.path.join(compute, gpu, "*", "*", "mlp.csv")):
        for r in csv.DictReader(open(path)):
            h, kv, e, f = (int(r[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
            t, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
            gated = r["use_gated_mlp"].strip().lower() == "true"
            hd = e // h
            up = f // tp * (2 if gated else 1)
            for op, (i, o) in {
                "qkv": (e, (h + 2 * kv) * hd // tp),
                "out": (e // tp, e),
                "up": (e, up),
                "down": (f // tp, e),
            }.items():
                label[("linear", f"linear {i}->{o} x{t} tokens")] = op
            norm = "rmsnorm" if gated else "layernorm"
            label[(norm, f"{norm} {t}x{e}")] = "norm"
            label[("add", f"add 1x{t}x{e}")] = "add"
            label[("gelu", f"gelu 1x{t}x{f // tp}")] = "act"
    return label


def load(path, labels):
    out = {}
    for r in csv.DictReader(open(path)):
        op = labels.get((r["kind"], r["module"]))
        if op is None:
            continue
        out.setdefault((op, r["module"]), []).append(
            (float(r["measured_ms"]) / 1e3, float(r["predicted_ms"]) / 1e3, float(r["bound_ms"]) / 1e3)
        )
    return out


def shape_roofline(module, gpu):
    nums = list(map(int, re.findall(r"\d+", module)))
    d = SPECS[gpu]
    if module.startswith("linear"):
        i, o, t = nums[:3]
        return max(2 * t * i * o / d["peak"], 2 * (t * i + i * o + t * o) / d["bw"])
    return None


lt, ls = ops_of(target), ops_of(source)
tgt, src = load(rows_t, lt), load(rows_s, ls)
# The baseline's utilisation per op: the source GPU's median of bound / (time - floor).
util = {}
for (op, module), v in src.items():
    t = st.median(x[0] for x in v)
    bound = v[0][2]
    util.setdefault(op, []).append(bound / max(t - FLOOR, 1e-9))
util = {op: st.median(u) for op, u in util.items()}
print(f"{'op':<6} {'rows':>6} {'perfcast MAPE':>14} {'baseline MAPE':>14} {'pred/meas':>10} {'below bound':>12}")
for op in ["qkv", "out", "up", "down", "norm", "act", "add"]:
    ours, base, ratios, below, n = [], [], [], 0, 0
    for (o, module), v in tgt.items():
        if o != op:
            continue
        for meas, pred, bound in v:
            n += 1
            ours.append(abs(pred - meas) / meas)
            ratios.append(pred / meas)
            below += pred < bound * (1 - 1e-9)
            b = FLOOR + bound / min(util.get(op, 1.0), 1.0)
            base.append(abs(b - meas) / meas)
    if n:
        print(f"{op:<6} {n:>6} {100 * st.mean(ours):>13.1f}% {100 * st.mean(base):>13.1f}% "
              f"{st.median(ratios):>10.2f} {below:>12}")

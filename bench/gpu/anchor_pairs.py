#!/usr/bin/env python3
"""PROFET's question on DeepBench's conv training rows (fwd + bwd-data + bwd-filter): a user
measured a layer on GPU A, what will it take on GPU B? Per ordered pair, the MAPE of
  flop   t_B = t_A x peak_A / peak_B             (a spreadsheet's ratio of published FLOP/s)
  bundle t_B = t_A x pred_B / pred_A             (the bundle's ratio of its own predictions)
  direct t_B = pred_B                            (the bundle alone, no anchor)
and how many pairs the bundle's ratio beats the FLOP ratio on.

Usage: python3 bench/gpu/anchor_pairs.py PERFCAST BUNDLE [GPU ...]
A BUNDLE holding `{}` is one bundle per target GPU B, trained without it (the `{}` is B's name,
as bench/gpu/deepbench_logo.sh trains them): B is then never seen, A's rows only as measured.
Reads ../shared/data/deepbench/conv.csv (fp32 training rows).
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

perfcast, bundle = sys.argv[1], sys.argv[2]
IDS = {"NV_1080Ti": "geforce-gtx-1080-ti", "NV_TitanX": "geforce-gtx-titan-x",
       "AMD_MI25": "radeon-instinct-mi25", "AMD_VegaFE": "radeon-vega-frontier-edition",
       "NV_M40": "tesla-m40", "NV_P100": "tesla-p100-pcie-16gb", "NV_T4": "tesla-t4",
       "NV_V100": "tesla-v100-sxm2-16gb", "NV_TitanX_Pascal": "titan-x-pascal",
       "NV_TitanXp": "titan-xp"}
gpus = sys.argv[3:] or list(IDS.values())
HERE = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(HERE, "..", "..", "..", "shared", "data", "deepbench", "conv.csv")
if not os.path.exists(src):
    src = os.path.join(HERE, "..", "..", "..", "..", "shared", "data", "deepbench", "conv.csv")

rows = {}  # gpu -> {config: ms}
for r in csv.DictReader(open(src)):
    if r["mode"] != "train" or r["precision"] != "Float" or r["device"] not in IDS:
        continue
    try:
        ms = float(r["fwd_ms"]) + float(r["bwd_inputs_ms"]) + float(r["bwd_params_ms"])
    except ValueError:
        continue
    key = tuple(int(r[c]) for c in ("W", "H", "C", "N", "K", "S_filter_w", "R_filter_h",
                                    "pad_w", "pad_h", "stride_w", "stride_h"))
    rows.setdefault(IDS[r["device"]], {})[key] = ms

common = sorted(set.intersection(*(set(rows[g]) for g in gpus)))
queries = [{"kind": "conv2d", "in_channels": c, "out_channels": k, "input_hw": [h, w],
            "kernel": [rh, sw], "stride": [sh, sw_], "padding": [ph, pw], "dilation": [1, 1],
            "groups": 1, "bias": False, "batch": n, "phase": "training"}
           for (w, h, c, n, k, sw, rh, pw, ph, sw_, sh) in common]
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(queries, f)
pred, peak = {}, {}  # pred[(bundle for target, gpu)]
for target in gpus if "{}" in bundle else [None]:
    b = bundle.format(target) if target else bundle
    for g in gpus:
        out = subprocess.run([perfcast, "--no-progress", "predict", "--bundle", b, "--device", g,
                              "--modules-file", f.name, "--format", "json"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        pred[(target, g)] = [p["ms"] for p in json.loads(out.stdout)]
for g in gpus:
    spec = json.load(open(os.path.join("datasets", "deepbench", g, "device.json")))
    peak[g] = spec["peak_gflops"]
os.unlink(f.name)


def mape(pairs):
    return 100 * sum(abs(p - m) / m for p, m in pairs) / len(pairs)


print(f"{len(common)} conv training configurations measured on all {len(gpus)} GPUs")
print(f"{'anchor A':<30} {'target B':<30} {'flop':>7} {'bundle':>7} {'direct':>7}")
wins, totals = 0, {"flop": [], "bundle": [], "direct": []}
for a in gpus:
    for b in gpus:
        if a == b:
            continue
        meas_a = [rows[a][k] for k in common]
        meas_b = [rows[b][k] for k in common]
        t = b if "{}" in bundle else None
        pa_, pb_ = pred[(t, a)], pred[(t, b)]
        flop = mape([(ta * peak[a] / peak[b], tb) for ta, tb in zip(meas_a, meas_b)])
        ratio = mape([(ta * pb / pa, tb) for ta, tb, pa, pb in
                      zip(meas_a, meas_b, pa_, pb_)])
        direct = mape(list(zip(pb_, meas_b)))
        wins += ratio < flop
        for n, v in (("flop", flop), ("bundle", ratio), ("direct", direct)):
            totals[n].append(v)
        print(f"{a:<30} {b:<30} {flop:>7.1f} {ratio:>7.1f} {direct:>7.1f}")
n = len(totals["flop"])
print(f"mean over {n} pairs: flop {sum(totals['flop']) / n:.1f}%, bundle ratio "
      f"{sum(totals['bundle']) / n:.1f}%, direct {sum(totals['direct']) / n:.1f}%; "
      f"the bundle's ratio beats the FLOP ratio on {wins} of {n} pairs")

#!/usr/bin/env python3
"""Vidur's fused kernels against perfcast's fusion rules and the eager ops they replace.

Usage: fused.py PERFCAST BUNDLE VIDUR_COMPUTE_DIR DATASETS_VIDUR_DIR

Two fused kernels of the gated (Llama-style) models Vidur measured in fp16:
- `mlp_act`: SiLU-and-multiply over the TP shard, `silu(gate) * up` in one kernel (reads 2E
  halves, writes E). Eager PyTorch runs it as `silu` (E in, E out) then `mul` (2E in, E out).
- `attn_rope`: the rotary embedding applied to the Q and K shards in place in one kernel
  (reads and writes Q and K, reads the cos/sin cache).
Each is predicted as perfcast's `compile`/`engine` policies predict a memory-bound fused
region (the bundle's `add` model for one kernel moving the region's boundary bytes, raised to
the region's roofline) and, for `mlp_act`, as the eager pair; both against the measured
median. Devices are the imported Vidur specs (`perfcast import vidur`).
"""
import csv, glob, json, math, os, statistics as st, subprocess, sys, tempfile

perfcast, bundle, compute, imported = sys.argv[1:5]
# perfcast's `engine` policy: a half-precision memory-bound kernel moves at most this many
# elements per SM per cycle (crates/perfcast-predict/src/fused.rs); refitted below per kernel.
ENGINE_ELEMS_PER_SM_CYCLE = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
GPUS = {"a100": "nvidia-a100-sxm4-80gb-fp16", "a40": "nvidia-a40-fp16"}
HALF = 2


def rows_of(gpu):
    """(op, tokens, shard elements of each operand, measured ms) of every gated row."""
    out = {}
    for path in glob.glob(os.path.join(compute, gpu, "*", "*", "mlp.csv")):
        for r in csv.DictReader(open(path)):
            if r["use_gated_mlp"].strip().lower() != "true":
                continue
            h, kv, e, f = (int(r[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
            t, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
            hd = e // h
            if f % tp or h % tp:
                continue
            for op, col in (("mlp_act", "mlp_act"), ("attn_rope", "attn_rope")):
                v = r.get(f"time_stats.{col}.median", "")
                if not v:
                    continue
                ms = float(v)
                if op == "mlp_act":
                    key = (op, t, f // tp)
                else:
                    q = h // tp * hd
                    k = max(kv // tp, 1) * hd
                    key = (op, t, q + k, hd)
                out.setdefault(key, []).append(ms)
    return {k: st.median(v) for k, v in out.items()}


def predict(spec_file, modules):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(modules, fh)
        name = fh.name
    try:
        res = subprocess.run(
            [perfcast, "predict", "--bundle", bundle, "--device-spec", spec_file,
             "--modules-file", name, "--format", "json", "-q"],
            capture_output=True, text=True)
        if res.returncode:
            sys.exit(res.stderr.strip())
    finally:
        os.unlink(name)
    return [m["ms"] for m in json.loads(res.stdout)]


def mape(pairs):
    return 100 * st.mean(abs(p - m) / m for p, m in pairs)


def ratio(pairs):
    return st.median(p / m for p, m in pairs)



def paced_ms(elems, spec, kappa):
    sms, clk = spec["cores"], spec["clock_mhz"] * 1e6
    return spec.get("launch_us", 2.0) / 1e3 + elems / (kappa * sms * clk) * 1e3


def fit_kappa(points, spec):
    """Elements per SM-cycle the kernel reached on its large rows (median)."""
    sms, clk = spec["cores"], spec["clock_mhz"] * 1e6
    launch = spec.get("launch_us", 2.0) / 1e3
    big = [e / ((ms - launch) / 1e3 * sms * clk) for e, ms in points if e * HALF > 50e6]
    return st.median(big) if big else float("nan")


for gpu, folder in GPUS.items():
    spec_file = os.path.join(imported, folder, "device.json")
    spec = json.load(open(spec_file))
    bw = spec["mem_bandwidth_gbs"] * 1e9
    rows = rows_of(gpu)
    mods, plan = [], []
    for key, ms in sorted(rows.items()):
        if key[0] == "mlp_act":
            _, t, i = key
            boundary = 3 * t * i * HALF
            base = len(mods)
            mods += [{"kind": "add", "shape": [1, t, i]},
                     {"kind": "silu", "shape": [1, t, i]},
                     {"kind": "mul", "shape": [1, t, i]}]
            plan.append((key, ms, boundary, base, True))
        else:
            _, t, qk, hd = key
            boundary = (2 * t * qk + t * hd) * HALF
            elems = max(boundary // (3 * HALF), 1)
            base = len(mods)
            mods.append({"kind": "add", "shape": [1, t, -(-elems // t)]})
            plan.append((key, ms, boundary, base, False))
    preds = predict(spec_file, mods)
    points = {"mlp_act": [], "attn_rope": []}
    for key, ms, boundary, base, act in plan:
        points[key[0]].append((boundary / HALF, ms))
    kappas = {op: fit_kappa(p, spec) for op, p in points.items()}
    print(f"{gpu}: elements per SM-cycle reached on large rows: "
          + ", ".join(f"{op} {k:.2f}" for op, k in kappas.items())
          + f" (DRAM allows {bw / HALF / (spec['cores'] * spec['clock_mhz'] * 1e6):.2f})")
    by = {op: {"fused": [], "engine": [], "other-kernel": [], "eager": [], "roof": []} for op in points}
    for key, ms, boundary, base, act in plan:
        op = key[0]
        elems = boundary / HALF
        roof = boundary / bw * 1e3
        fused = max(preds[base], roof)
        other = kappas["attn_rope" if act else "mlp_act"]
        d = by[op]
        d["fused"].append((fused, ms))
        d["engine"].append((max(fused, paced_ms(elems, spec, ENGINE_ELEMS_PER_SM_CYCLE)), ms))
        d["other-kernel"].append((max(fused, paced_ms(elems, spec, other)), ms))
        d["roof"].append((roof, ms))
        if act:
            d["eager"].append((preds[base + 1] + preds[base + 2], ms))
    for op, d in by.items():
        line = f"{gpu} {op:9s} n={len(d['fused']):4d}"
        for name, pairs in d.items():
            if pairs:
                line += f"  {name}: {mape(pairs):5.1f}% (x{ratio(pairs):.2f})"
        print(line)

#!/usr/bin/env python3
"""Whole CNN training steps and inference measured on the H100 (data/networks.jsonl) against
what a GPU bundle predicts for the H100 from its spec.

Usage: python3 bench/gpu/h100/eval_steps.py PERFCAST BUNDLE [--device h100] [--json OUT]
Prints per run the measured time, the kernel sum (`total_ms` of `predict --network`), the
step with the framework's costs (`step_ms` when the bundle reports one) and the spec roofline
of the same work, then MAPE per network and phase. fp32 runs of zoo networks only.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
perfcast, bundle = sys.argv[1], sys.argv[2]
device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "h100"
ZOO = {"lenet5", "alexnet", "vgg11", "vgg16", "resnet18", "resnet50", "mobilenetv2"}
runs = [json.loads(l) for l in open(os.path.join(HERE, "data", "networks.jsonl"))]
runs = [r for r in runs if r["dtype"] == "float32" and r["network"] in ZOO]


def predict(r, phase):
    cmd = [perfcast, "--no-progress", "predict", "--bundle", bundle, "--device", device,
           "--network", r["network"], "--resolution", str(r["resolution"]), "--batch", str(r["batch"]),
           "--phase", phase, "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


rows = []
for r in runs:
    for phase, measured in (("training", r["step_ms"]), ("inference", r["forward_ms"])):
        p = predict(r, phase)
        total = p.get("total_ms")
        step = (p.get("framework") or {}).get("step_ms", total)
        roof = p.get("roofline_ms")
        rows.append({"network": r["network"], "resolution": r["resolution"], "batch": r["batch"],
                     "phase": phase, "measured_ms": measured, "kernels_ms": total,
                     "predicted_ms": step, "roofline_ms": roof})

print(f"{'network':<12} {'res':>4} {'batch':>5} {'phase':<9} {'measured':>9} {'kernels':>9} {'predicted':>9} {'err%':>7} {'roofline':>9}")
for x in rows:
    err = 100 * (x["predicted_ms"] - x["measured_ms"]) / x["measured_ms"]
    x["error_pct"] = err
    roof = f"{x['roofline_ms']:.3f}" if x["roofline_ms"] is not None else "-"
    print(f"{x['network']:<12} {x['resolution']:>4} {x['batch']:>5} {x['phase']:<9} {x['measured_ms']:>9.3f} {x['kernels_ms']:>9.3f} {x['predicted_ms']:>9.3f} {err:>+7.1f} {roof:>9}")
for phase in ("training", "inference"):
    errs = [abs(x["error_pct"]) for x in rows if x["phase"] == phase]
    print(f"{phase}: MAPE {sum(errs) / len(errs):.1f}% over {len(errs)} runs")
    for net in sorted({x["network"] for x in rows}):
        e = [x["error_pct"] for x in rows if x["phase"] == phase and x["network"] == net]
        print(f"  {net:<12} mean |err| {sum(map(abs, e)) / len(e):5.1f}%  mean signed {sum(e) / len(e):+6.1f}%")
if "--json" in sys.argv:
    json.dump(rows, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)

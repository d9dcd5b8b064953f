#!/usr/bin/env python3
"""Prediction speed from Python: one module through the dict path, and 10,000
modules of one kind through the array path (`Bundle.predict_array`) and the column path
(`Bundle.predict_columns`), medians of repeated calls after a warm-up, on one thread.

Needs the `perfcast` package (`pip install ./python`) and numpy. Usage:

    python3 bench/speed/python_speed.py --bundle checkpoints/local [--format json]
"""

import argparse
import json
import statistics
import time


def p50_us(fn, calls, warmup):
    """Median wall time of one call, microseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", default="checkpoints/local")
    ap.add_argument("--calls", type=int, default=20000, help="timed one-module calls")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--format", choices=["text", "json"], default="text")
    args = ap.parse_args()

    import numpy as np
    import perfcast

    bundle = perfcast.load_bundle(args.bundle)
    conv = {"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": [56, 56],
            "kernel": 3, "padding": 1}
    one = p50_us(lambda: bundle.predict(conv), args.calls, args.calls // 10)

    # 10,000 conv2d rows as one array: channels 16..512, 7..112 pixels, 1x1 / 3x3, stride 1 / 2.
    rng = np.random.default_rng(1)
    n = args.rows
    cin = 2 ** rng.integers(4, 10, n)
    cout = 2 ** rng.integers(4, 10, n)
    hw = rng.choice([7, 14, 28, 56, 112], n)
    k = rng.choice([1, 3], n)
    s = rng.choice([1, 2], n)
    columns = perfcast.config_columns("conv2d")
    values = {
        "in_channels": cin, "out_channels": cout, "in_h": hw, "in_w": hw, "kernel_h": k,
        "kernel_w": k, "stride_h": s, "stride_w": s, "pad_h": k // 2, "pad_w": k // 2,
        "dilation_h": np.ones(n), "dilation_w": np.ones(n), "groups": np.ones(n), "bias": np.zeros(n),
    }
    config = np.stack([values[c] for c in columns], axis=1).astype("<f8")
    batch = 2 ** rng.integers(0, 4, n)
    reps = 7
    array_us = p50_us(lambda: bundle.predict_array("conv2d", config, batch=batch), reps, 2)
    columns_us = p50_us(
        lambda: bundle.predict_columns(
            "conv2d", in_channels=cin, out_channels=cout, input_hw=np.stack([hw, hw], 1),
            kernel=np.stack([k, k], 1), stride=np.stack([s, s], 1), padding=np.stack([k // 2, k // 2], 1),
            batch=batch),
        reps, 2)
    out = {
        "one_module_dict_us": one,
        "array_rows_per_s": n / array_us * 1e6,
        "columns_rows_per_s": n / columns_us * 1e6,
        "rows": n,
    }
    if args.format == "json":
        print(json.dumps(out, indent=2))
        return
    print(f"python one module (dict, bundle.predict): {one:.2f} us")
    print(f"python {n} modules as one array (predict_array): {out['array_rows_per_s'] / 1e6:.2f} M/s")
    print(f"python {n} modules as columns (predict_columns): {out['columns_rows_per_s'] / 1e6:.2f} M/s")


if __name__ == "__main__":
    main()

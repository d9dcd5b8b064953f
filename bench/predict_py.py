#!/usr/bin/env python3
"""Prediction speed: perfcast's in-process Predictor beside the predictors users would otherwise
call from Python, measured side by side in one run on the same machine.

Times, on one row and on 10,000 rows:

- scikit-learn's RandomForestRegressor.predict (default hyper-parameters: 100 trees, grown
  until pure) fitted on 2,000 random rows of the width of perfcast's shared MEDN input;
- a PyTorch MLP forward with MEDN's default shape (input projection to width 64, 2 pre-norm
  residual blocks, layer norm, latent 32, a 32-wide head, a linear skip path), in eval mode
  under `torch.inference_mode()`;
- perfcast, through `perfcast bundle bench <bundle> --format json` (one module, a VGG-16 query,
  and 10,000 module rows; see `crates/perfcast-select/benches/predictor.rs` for the same in
  divan), run as a subprocess between the Python timings;
- perfcast from Python (the `perfcast` package, `pip install ./python`), when it is installed:
  `bundle.predict(module)` for one conv2d, and `bundle.predict_columns("conv2d", ...)` for
  10,000 random conv2d rows as one numpy batch (the cost a Python NAS loop pays, dict and array
  conversion included).

Inputs are random standardised rows: values do not change the arithmetic, so this compares
speed only. Python runs single-threaded by default (`--threads`), as perfcast's single-row
figures are; batches use the same thread count for both. Not part of CI: needs `torch` and
`scikit-learn` (`pip install torch scikit-learn`) and a built binary
(`cargo build --release --bin perfcast`). Usage:

    python3 bench/predict_py.py --bundle checkpoints/local --threads 1

Prints a table (or `--format json`) with each predictor's p50 per single row, per-row time and
rows/s on 10,000 rows, and the ratios (the Python predictor's time over perfcast's: above 1
means perfcast is faster).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def p50_us(fn, calls, warmup=None):
    """Median wall time of one call, microseconds, after a warm-up."""
    for _ in range(warmup if warmup is not None else max(3, calls // 10)):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(times)


def medn_like(torch, d_in, width=64, depth=2, latent=32, head=32):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.linear = nn.Linear(width, width)

        def forward(self, h):
            return h + torch.relu(self.linear(self.norm(h)))

    class Medn(nn.Module):
        def __init__(self):
            super().__init__()
            self.input = nn.Linear(d_in, width)
            self.blocks = nn.ModuleList([Block() for _ in range(depth)])
            self.out_norm = nn.LayerNorm(width)
            self.latent = nn.Linear(width, latent)
            self.hidden = nn.Linear(latent, head)
            self.out = nn.Linear(head, 1)
            self.skip = nn.Linear(d_in, 1)

        def forward(self, x):
            h = self.input(x)
            for b in self.blocks:
                h = b(h)
            z = torch.relu(self.latent(self.out_norm(h)))
            return self.out(torch.relu(self.hidden(z))) + self.skip(x)

    return Medn().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", default="checkpoints/local", help="perfcast bundle directory")
    ap.add_argument("--perfcast", default="target/release/perfcast", help="perfcast binary")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for every predictor")
    ap.add_argument("--features", type=int, default=73,
                    help="row width (73: the shared MEDN input of the default bundle)")
    ap.add_argument("--rows", type=int, default=10_000, help="rows of the batched timing")
    ap.add_argument("--calls", type=int, default=2000, help="timed single-row calls")
    ap.add_argument("--format", choices=["text", "json"], default="text")
    args = ap.parse_args()

    import numpy as np
    import torch
    from sklearn.ensemble import RandomForestRegressor

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x_train = rng.standard_normal((2000, args.features)).astype(np.float32)
    y_train = x_train[:, :8].sum(axis=1) + 0.1 * rng.standard_normal(2000)
    forest = RandomForestRegressor(random_state=0, n_jobs=args.threads).fit(x_train, y_train)
    x_batch = rng.standard_normal((args.rows, args.features)).astype(np.float32)
    x_one = x_batch[:1]

    net = medn_like(torch, args.features)
    t_batch = torch.from_numpy(x_batch)
    t_one = t_batch[:1]

    def torch_call(x):
        with torch.inference_mode():
            return net(x)

    results = {}
    results["sklearn_random_forest"] = {
        "one_row_us": p50_us(lambda: forest.predict(x_one), args.calls // 4),
        "batch_per_row_us": p50_us(lambda: forest.predict(x_batch), 5, warmup=1) / args.rows,
    }
    results["pytorch_mlp"] = {
        "one_row_us": p50_us(lambda: torch_call(t_one), args.calls),
        "batch_per_row_us": p50_us(lambda: torch_call(t_batch), 20) / args.rows,
    }

    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    out = subprocess.run(
        [args.perfcast, "bundle", "bench", args.bundle, "--format", "json"],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    lines = json.loads(out)
    one = next(l for l in lines if l["query"].startswith("one module"))
    batch = [l for l in lines if l["query"].startswith("batch of 10,000")]
    single_thread = next((l for l in batch if "1 thread" in l["query"]), batch[0])
    results["perfcast"] = {
        "one_row_us": one["p50_us"],
        "one_row_query": one["query"],
        "batch_per_row_us": single_thread["p50_us"],
        "batch_query": single_thread["query"],
        "all_lines": lines,
    }
    try:
        import perfcast as pc
    except ImportError:
        pc = None
    if pc is not None:
        bundle = pc.load_bundle(args.bundle)
        conv = {"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": [56, 56],
                "kernel": [3, 3], "padding": [1, 1]}
        cin = 2 ** rng.integers(2, 9, args.rows)
        cols = dict(in_channels=cin, out_channels=2 ** rng.integers(2, 9, args.rows),
                    input_hw=np.repeat(2 ** rng.integers(3, 7, (args.rows, 1)), 2, axis=1),
                    kernel=np.full((args.rows, 2), 3), padding=np.full((args.rows, 2), 1))
        batch = rng.choice([1, 8, 32], args.rows)
        results["perfcast_python"] = {
            "one_row_us": p50_us(lambda: bundle.predict(conv, batch=8), args.calls),
            "batch_per_row_us": p50_us(
                lambda: bundle.predict_columns("conv2d", batch=batch, **cols), 20) / args.rows,
        }
    for name in ("sklearn_random_forest", "pytorch_mlp", "perfcast_python"):
        if name not in results:
            continue
        r = results[name]
        r["batch_rows_per_s"] = 1e6 / r["batch_per_row_us"]
        r["one_row_ratio_to_perfcast"] = r["one_row_us"] / results["perfcast"]["one_row_us"]
        r["batch_ratio_to_perfcast"] = (
            r["batch_per_row_us"] / results["perfcast"]["batch_per_row_us"]
        )
    results["perfcast"]["batch_rows_per_s"] = 1e6 / results["perfcast"]["batch_per_row_us"]
    results["machine"] = {
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "sklearn": __import__("sklearn").__version__,
    }

    if args.format == "json":
        print(json.dumps(results, indent=2))
        return
    print(f"{'predictor':<24} {'1 row p50 us':>13} {'us/row (10k)':>13} {'rows/s (10k)':>13} "
          f"{'1-row ratio':>12} {'10k ratio':>10}")
    for name in ("perfcast", "perfcast_python", "sklearn_random_forest", "pytorch_mlp"):
        if name not in results:
            continue
        r = results[name]
        ratio1 = r.get("one_row_ratio_to_perfcast", 1.0)
        ratio_b = r.get("batch_ratio_to_perfcast", 1.0)
        print(f"{name:<24} {r['one_row_us']:>13.3g} {r['batch_per_row_us']:>13.3g} "
              f"{r['batch_rows_per_s']:>13.3g} {ratio1:>11.3g}x {ratio_b:>9.3g}x")
    print(f"perfcast one row: {results['perfcast']['one_row_query']}; "
          f"10k: {results['perfcast']['batch_query']}")
    print(f"ratios: the Python predictor's time over perfcast's (above 1: perfcast is faster); "
          f"{args.threads} thread(s), load average {results['machine']['load_average'][0]:.2f}")


if __name__ == "__main__":
    main()

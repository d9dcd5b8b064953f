#!/usr/bin/env python3
"""Ctrl-C at three points of `perfcast quickstart --samples 10 --fast`, then a resume.

In one temporary folder (the quickstart writes `datasets/` and `checkpoints/` under its working
directory), runs the quickstart four times:

  1. SIGINT during the first profile sweep (2 s after stderr's `2/5` line);
  2. SIGINT during the second sweep (1 s after the first sweep's `profiled ...` summary on
     stdout), the first sweep's rows being resumed first;
  3. SIGINT during training (1 s after stderr's `4/5` line);
  4. no signal: the run must finish (exit 0) with a bundle.

Runs 1-3 must exit 130 with a last stderr line saying how to resume. Prints per run the exit
code, the wall time, the time from the signal to the exit, and that line; exits 1 if any check
fails. Python 3.11 standard library only. Usage, from the repository root after
`cargo build --release --bin perfcast`:

    python3 bench/reliability/ctrlc_quickstart.py [--perfcast target/release/perfcast]
"""

import argparse
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time


def run(perfcast, cwd, trigger):
    """Runs the quickstart in `cwd`; `trigger(stream, line)` returns the delay in seconds after
    which to send SIGINT (None: not yet). Returns (code, wall s, signal-to-exit s, stderr)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [perfcast, "--no-progress", "quickstart", "--samples", "10", "--fast"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = queue.Queue()

    def pump(stream, name):
        for line in stream:
            lines.put((name, line.rstrip("\n")))
        lines.put((name, None))

    for stream, name in [(proc.stdout, "stdout"), (proc.stderr, "stderr")]:
        threading.Thread(target=pump, args=(stream, name), daemon=True).start()
    err, open_streams, sent = [], 2, None
    while open_streams:
        name, line = lines.get()
        if line is None:
            open_streams -= 1
            continue
        if name == "stderr":
            err.append(line)
        if sent is None and trigger is not None:
            delay = trigger(name, line)
            if delay is not None:
                def fire(delay=delay):
                    time.sleep(delay)
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
                sent = time.monotonic() + delay
                threading.Thread(target=fire, daemon=True).start()
    code = proc.wait()
    end = time.monotonic()
    return code, end - t0, (end - sent) if sent else None, err


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--perfcast", default="target/release/perfcast")
    a = p.parse_args()
    perfcast = os.path.abspath(a.perfcast)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="perfcast-ctrlc-") as cwd:
        state = {"summaries": 0}

        def second_sweep(name, line):
            if name == "stdout" and line.startswith("profiled "):
                state["summaries"] += 1
                if state["summaries"] == 1:
                    return 1.0
            return None

        points = [
            ("first sweep", lambda n, l: 2.0 if n == "stderr" and l.startswith("2/5") else None),
            ("second sweep", second_sweep),
            ("training", lambda n, l: 1.0 if n == "stderr" and l.startswith("4/5") else None),
            ("resume to the end", None),
        ]
        for label, trigger in points:
            code, wall, to_exit, err = run(perfcast, cwd, trigger)
            last = err[-1] if err else ""
            want = 0 if trigger is None else 130
            ok = code == want
            if trigger is not None:
                ok = ok and "run the same command again to resume" in last
            else:
                ok = ok and os.path.isfile(os.path.join(cwd, "checkpoints/local/manifest.json"))
            failures += not ok
            after = f", {to_exit:.1f} s from SIGINT to exit" if to_exit is not None else ""
            print(f"{label}: exit {code} after {wall:.1f} s{after} [{'ok' if ok else 'FAILED'}]")
            print(f"    {last}")
            sys.stdout.flush()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

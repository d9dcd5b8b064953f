#!/usr/bin/env bash
# Every prediction-speed figure on one bundle, for a quiet machine: `perfcast bundle bench`
# (medians over RUNS runs), the Python calls (when the `perfcast` package is installed) and
# single-module requests over HTTP on loopback (`perfcast serve` + `perfcast loadtest`).
#
#   bash bench/speed/run.sh [BUNDLE]        # default checkpoints/local
#
# Environment: PERFCAST_BIN (default $CARGO_TARGET_DIR/release/perfcast, else
# target/release/perfcast), RUNS (default 7), SERVE_THREADS (default: the cores),
# CONCURRENCY (default 32), PIPELINE and PIPELINE_CONNECTIONS (pipelined run: default 16
# requests on each of 4 connections), PORT (default 18787).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=${1:-checkpoints/local}
BIN=${PERFCAST_BIN:-${CARGO_TARGET_DIR:-target}/release/perfcast}
RUNS=${RUNS:-7}
PORT=${PORT:-18787}
CONCURRENCY=${CONCURRENCY:-32}
PIPELINE=${PIPELINE:-16}
PIPELINE_CONNECTIONS=${PIPELINE_CONNECTIONS:-4}
SERVE_THREADS=${SERVE_THREADS:-$(nproc)}
[ -x "$BIN" ] || { echo "no perfcast binary at $BIN (cargo build --release --bin perfcast)" >&2; exit 2; }
[ -f "$BUNDLE/manifest.json" ] || { echo "no bundle at $BUNDLE (perfcast quickstart)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -n "${server:-}" ] && kill "$server" 2>/dev/null || true' EXIT

echo "== $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), bundle $BUNDLE"
echo "== binary $BIN, built $(date -u -r "$BIN" +%FT%TZ) (set PERFCAST_BIN to time another)"
echo "== perfcast bundle bench $BUNDLE: medians of $RUNS runs"
for i in $(seq "$RUNS"); do
    "$BIN" bundle bench "$BUNDLE" --format json > "$tmp/bench-$i.json"
done
python3 - "$tmp" "$RUNS" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
lines = [json.load(open(f"{tmp}/bench-{i}.json")) for i in range(1, runs + 1)]
for j, line in enumerate(lines[0]):
    p50 = statistics.median(l[j]["p50_us"] for l in lines)
    p99 = statistics.median(l[j]["p99_us"] for l in lines)
    rate = statistics.median(l[j]["per_second"] for l in lines)
    print(f"  {line['query']:<58} p50 {p50:8.3f} us  p99 {p99:8.3f} us  {rate / 1e6:7.3f} M/s")
PY

echo "== Python"
if python3 -c "import perfcast, numpy" 2>/dev/null; then
    python3 bench/speed/python_speed.py --bundle "$BUNDLE"
else
    echo "  skipped: the perfcast package is not installed (pip install ./python)"
fi

echo "== HTTP: perfcast serve --threads $SERVE_THREADS, perfcast loadtest --concurrency $CONCURRENCY"
"$BIN" serve --bundle "$BUNDLE" --addr "127.0.0.1:$PORT" --threads "$SERVE_THREADS" > "$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1 && break
    sleep 0.1
done
"$BIN" loadtest --addr "127.0.0.1:$PORT" --concurrency "$CONCURRENCY" --invalid-share 0 --requests 300000 --duration-s 10
echo "== HTTP pipelined: --concurrency $PIPELINE_CONNECTIONS --pipeline $PIPELINE"
"$BIN" loadtest --addr "127.0.0.1:$PORT" --concurrency "$PIPELINE_CONNECTIONS" --pipeline "$PIPELINE" --invalid-share 0 --requests 600000 --duration-s 10

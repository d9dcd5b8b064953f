#!/usr/bin/env bash
# Single-module HTTP throughput with the CPU each side spends per request: `perfcast serve`
# (its user + system time from /proc) and `perfcast loadtest` (from /usr/bin/time). To A/B two
# binaries, interleave calls of this script (docs/accuracy.md says why).
#
#   bash bench/speed/http_cpu.sh BIN BUNDLE [THREADS] [RUNS]
#
# Prints per run: requests/s, server us per request, loadtest us per request.
set -euo pipefail
BIN=$1; BUNDLE=$2; THREADS=${3:-$(nproc)}; RUNS=${4:-3}
PORT=${PORT:-18793}; N=${REQUESTS:-300000}
"$BIN" serve --bundle "$BUNDLE" --threads "$THREADS" --addr "127.0.0.1:$PORT" > /dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1 && break
    sleep 0.1
done
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }
for _ in $(seq "$RUNS"); do
    before=$(cpu)
    out=$(/usr/bin/time -f "TIME %U %S" "$BIN" loadtest --addr "127.0.0.1:$PORT" \
        --concurrency 32 --invalid-share 0 --requests "$N" --duration-s 10 2>&1)
    after=$(cpu)
    rate=$(echo "$out" | grep -o '[0-9]* requests/s' | cut -d' ' -f1)
    client=$(echo "$out" | awk '/^TIME/{print $2 + $3}')
    python3 -c "print(f'{$rate:7d} requests/s  server {($after - $before) / $tick / $N * 1e6:5.2f} us  loadtest {$client / $N * 1e6:5.2f} us')"
done

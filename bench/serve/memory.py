#!/usr/bin/env python3
"""Peak memory and answers of `perfcast serve` under the memory cases of the robustness issue.

Starts `perfcast serve` on the shipped GPU bundle, runs each case below against it, and prints
per case the answers, the wall time and the server's peak resident memory (VmHWM of
/proc/<pid>/status, reset to the current RSS before each case by writing 5 to
/proc/<pid>/clear_refs where the kernel allows it; else the peak since the start). Ends with a
SIGTERM to a server importing a 20,000-node ONNX file and the time it takes to exit.

Cases:
  a. six concurrent uploads to /v1/predict/onnx, each declaring a 600 MB Content-Length and
     then sending its body (1 MiB writes) until the server closes;
  b. six concurrent chunked uploads (no Content-Length) of 600 MB each;
  c. POST /v1/predict/network with a transformer of `n_layer` 16777216, then 1000000;
  d. large valid requests: 10,000 modules at the 1 MiB body limit, a transformer of 4,096
     blocks, a 20,000-node ONNX file, three of them at once.

Python 3.11 standard library only. Usage (from the repository root, after
`cargo build --release --bin perfcast`):

    python3 bench/serve/memory.py [--perfcast target/release/perfcast] [--bundle checkpoints/gpu]
        [--max-onnx-mb N]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

MB = 1_000_000


# --- ONNX protobuf, written by hand --------------------------------------------------------


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):
    """A length-delimited field."""
    if isinstance(payload, str):
        payload = payload.encode()
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def field_int(num, v):
    return varint(num << 3) + varint(v)


def value_info(name, dims):
    shape = b"".join(field(1, field_int(1, d)) for d in dims)
    tensor = field_int(1, 1) + field(2, shape)
    return field(1, name) + field(2, field(1, tensor))


def relu_chain(n):
    """An ONNX model of `n` Relu nodes in a chain on [1, 3, 8, 8], all named `same`."""
    nodes = []
    for i in range(n):
        src = "x" if i == 0 else f"t{i - 1}"
        node = field(1, src) + field(2, f"t{i}") + field(3, "same") + field(4, "Relu")
        nodes.append(field(1, node))
    graph = (
        b"".join(nodes)
        + field(2, "chain")
        + field(11, value_info("x", [1, 3, 8, 8]))
        + field(12, value_info(f"t{n - 1}", [1, 3, 8, 8]))
    )
    opset = field(1, "") + field_int(2, 17)
    return field_int(1, 8) + field(7, graph) + field(8, opset)


# --- the server --------------------------------------------------------------------------------


class Server:
    def __init__(self, perfcast, bundle, extra=()):
        self.proc = subprocess.Popen(
            [perfcast, "serve", "--bundle", bundle, "--addr", "127.0.0.1:0", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in self.proc.stderr:
            if "listening on http://" in line:
                hostport = line.split("listening on http://")[1].split()[0]
                host, port = hostport.rsplit(":", 1)
                self.addr = (host, int(port))
                break
        else:
            raise SystemExit("the server did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def status(self, key):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def reset_peak(self):
        try:
            with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def request(addr, method, path, body=b"", timeout=120):
    """One request on a fresh connection: status and body text."""
    s = socket.create_connection(addr, timeout=timeout)
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    try:
        s.sendall(head.encode() + body)
    except OSError:
        pass
    return read_answer(s)


def read_answer(s):
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    text = data.decode(errors="replace")
    status = int(text[9:12]) if text[9:12].isdigit() else 0
    return status, text.split("\r\n\r\n", 1)[-1]


def upload(addr, size, chunked, out, i):
    """Declares (or chunks) a `size`-byte body to /v1/predict/onnx and sends it in 1 MiB writes
    until the server closes or answers."""
    s = socket.create_connection(addr, timeout=120)
    if chunked:
        head = "POST /v1/predict/onnx HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
    else:
        head = f"POST /v1/predict/onnx HTTP/1.1\r\nhost: t\r\ncontent-length: {size}\r\n\r\n"
    s.sendall(head.encode())
    block = b"\x00" * (1 << 20)
    sent = 0
    try:
        while sent < size:
            if chunked:
                s.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
            else:
                s.sendall(block)
            sent += len(block)
        if chunked:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    status, body = read_answer(s)
    out[i] = (status, sent, body[:160])


def case(server, name, run):
    reset = server.reset_peak()
    base = server.status("VmRSS")
    t0 = time.monotonic()
    answers = run()
    took = time.monotonic() - t0
    peak = server.status("VmHWM")
    after = server.status("VmRSS")
    print(
        f"{name}: {took:.2f} s, peak RSS {peak / MB:.0f} MB"
        f"{'' if reset else ' (since start)'} (before {base / MB:.0f} MB, after {after / MB:.0f} MB)"
    )
    for a in answers:
        print(f"    {a}")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--perfcast", default="target/release/perfcast")
    p.add_argument("--bundle", default="checkpoints/gpu")
    p.add_argument("--max-onnx-mb", type=int, help="passed to `perfcast serve` (its default: 512)")
    a = p.parse_args()
    extra = ["--max-onnx-mb", str(a.max_onnx_mb)] if a.max_onnx_mb else []

    server = Server(a.perfcast, a.bundle, extra)
    print(f"perfcast serve pid {server.proc.pid}, idle RSS {server.status('VmRSS') / MB:.0f} MB")

    def uploads(chunked):
        def run():
            out = [None] * 6
            threads = [
                threading.Thread(target=upload, args=(server.addr, 600 * MB, chunked, out, i))
                for i in range(6)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return [f"{s} after {sent / MB:.0f} MB sent: {b}" for s, sent, b in out]

        return run

    case(server, "a. six uploads declaring 600 MB", uploads(False))

    gpt2 = json.load(open("examples/transformers/gpt2.json"))

    def transformer(n_layer):
        cfg = dict(gpt2, n_layer=n_layer)
        return json.dumps({"transformer": cfg, "seq": 128}).encode()

    def one(body_of):
        def run():
            status, body = request(server.addr, "POST", "/v1/predict/network", body_of)
            return [f"{status}: {body[:200]}"]

        return run

    case(server, "c. transformer n_layer 16777216", one(transformer(16777216)))
    case(server, "c. transformer n_layer 1000000", one(transformer(1000000)))

    relu = {"kind": "relu", "shape": [64, 56, 56]}
    modules, size = [], 20
    while size < (1 << 20) - 200:
        modules.append(dict(relu, shape=[64, 56, 56 + len(modules) % 1000]))
        size += len(json.dumps(modules[-1])) + 2
    modules_body = json.dumps({"modules": modules}).encode()
    chain = relu_chain(20_000)

    def big(kind):
        if kind == "modules":
            return request(server.addr, "POST", "/v1/predict", modules_body)
        if kind == "transformer":
            return request(server.addr, "POST", "/v1/predict/network", transformer(4096))
        return request(server.addr, "POST", "/v1/predict/onnx?batch=1", chain)

    def summary(kind, answer):
        status, body = answer
        try:
            total = json.loads(body).get("total_ms")
        except ValueError:
            total = None
        return f"{kind}: {status}" + (f", total {total:.4g} ms" if total else f": {body[:160]}")

    for kind in ["modules", "transformer", "onnx"]:
        label = {
            "modules": f"{len(modules)} modules ({len(modules_body) / MB:.2f} MB body)",
            "transformer": "transformer of 4096 blocks",
            "onnx": f"ONNX of 20,000 nodes ({len(chain) / MB:.2f} MB)",
        }[kind]
        case(server, f"d. {label}", lambda kind=kind: [summary(kind, big(kind))])

    def together():
        out = {}

        def go(kind):
            out[kind] = big(kind)

        threads = [threading.Thread(target=go, args=(k,)) for k in ["modules", "transformer", "onnx"]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [summary(k, v) for k, v in out.items()]

    case(server, "d. the three at once", together)
    print(f"peak RSS since start {server.status('VmHWM') / MB:.0f} MB")
    code = server.stop()
    print(f"server exit {code}")

    # Last, on a server of its own: the allocator keeps most of a freed 512 MiB body.
    server = Server(a.perfcast, a.bundle, extra)
    case(server, "b. six chunked uploads of 600 MB", uploads(True))
    server.stop()

    # SIGTERM with work in flight: four 20,000-node imports, then four transformers of 4,096
    # blocks (seconds each, longer than the shutdown bound on a busy machine).
    for label, path, body in [
        ("four 20,000-node ONNX imports", "/v1/predict/onnx?batch=1", chain),
        ("four transformers of 4096 blocks", "/v1/predict/network", transformer(4096)),
    ]:
        server = Server(a.perfcast, a.bundle, extra)
        out = {}

        def post(i, path=path, body=body):
            out[i] = request(server.addr, "POST", path, body)[0]

        threads = [threading.Thread(target=post, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=60)
        took = time.monotonic() - t0
        for t in threads:
            t.join()
        print(
            f"SIGTERM with {label} sent 0.3 s before: exit {code} after {took:.2f} s "
            f"(bound 5 s); answers {sorted(out.values())}"
        )


if __name__ == "__main__":
    main()

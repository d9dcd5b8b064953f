#!/usr/bin/env python3
"""Measure a CUDA GPU with PyTorch into files perfcast imports.

Run on the machine with the GPU: `python3 bench/gpu/h100/measure.py OUT_DIR [--budget-s 470]`.
Every part has a share of the budget and writes rows the moment they are measured, so a part
that fails or runs out of time leaves the others' rows. Timing: CUDA events around each call,
warm-up first (cuDNN's autotuner picks its algorithm there, as frameworks run), the median of
the timed repetitions (NeuSight-format files: the mean of the 5 fastest, as NeuSight did).
fp32 rows run with TF32 off, so they are true fp32 as in DeepBench and NeuSight.

Files written (each readable by one perfcast importer or by `bench/gpu/h100/README.md`'s steps):
- `conv.csv`: DeepBench's conv layout (fwd, bwd-data and bwd-filter separately) plus `G`
  (groups): DeepBench's own training shapes and every conv of the torchvision CNNs.
- `gemm.csv`: DeepBench's GEMM layout, its training shapes.
- `neusight.csv`: NeuSight's columns with `OPName` (linear, bmm, conv, add, ln, softmax, gelu).
- `networks.jsonl`: whole training steps of torchvision CNNs (copy, forward, backward, optimiser).
- `llm_fp16.csv`: one Llama-style decoder layer's ops in fp16, Vidur's op names.
- `env.json`, `log.txt`.
"""

import json
import os
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "out"
BUDGET = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else 470.0
HERE = os.path.dirname(os.path.abspath(__file__))
START = time.time()
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "log.txt"), "a")
DEV = torch.device("cuda")


def log(*a):
    line = f"[{time.time() - START:6.1f}s] " + " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def fp32_exact():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def time_ms(fn, warmup=3, reps=10, max_s=1.5):
    """Median and sorted times (ms) of `fn` on the GPU, fewer repetitions for long calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    t0 = time.time()
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
        if time.time() - t0 > max_s and len(times) >= 3:
            break
    times.sort()
    return times[len(times) // 2], times


def mean_fastest(times, n=5):
    t = times[:n]
    return sum(t) / len(t)


class Part:
    """One part's rows and its deadline."""

    def __init__(self, name, share_s, path, header):
        self.name = name
        self.deadline = time.time() + share_s
        self.path = os.path.join(OUT, path)
        new = not os.path.exists(self.path)
        self.f = open(self.path, "a")
        if new and header:
            self.f.write(header + "\n")
        self.rows = 0

    def late(self):
        return time.time() > self.deadline or time.time() - START > BUDGET

    def write(self, line):
        self.f.write(line + "\n")
        self.f.flush()
        self.rows += 1


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEV, dtype=dtype)


def conv_kernels(n, c, h, w, k, r, s, pad, stride, groups, dtype):
    """fwd, bwd-data, bwd-filter medians (ms) of one conv."""
    x = rand(n, c, h, w, dtype=dtype)
    wt = rand(k, c // groups, r, s, dtype=dtype)
    y = F.conv2d(x, wt, None, stride, pad, 1, groups)
    gy = torch.randn_like(y)
    args = (None, stride, pad, [1, 1], False, [0, 0], groups)

    def bwd(mask):
        return lambda: torch.ops.aten.convolution_backward(gy, x, wt, *args, mask)

    fwd = time_ms(lambda: F.conv2d(x, wt, None, stride, pad, 1, groups))[0]
    bd = time_ms(bwd([True, False, False]))[0]
    bf = time_ms(bwd([False, True, False]))[0]
    return fwd, bd, bf, y.shape[2], y.shape[3]


CONV_HEADER = (
    "device,mode,precision,source_app,W,H,C,N,K,S_filter_w,R_filter_h,pad_w,pad_h,"
    "stride_w,stride_h,G,fwd_ms,bwd_inputs_ms,bwd_params_ms,P_out_w,Q_out_h"
)


def conv_row(part, app, dtype, n, c, h, w, k, r, s, pad, stride, groups):
    fwd, bd, bf, oh, ow = conv_kernels(n, c, h, w, k, r, s, pad, stride, groups, dtype)
    prec = {torch.float32: "Float", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    part.write(
        f"NV_H100,training,{prec},{app},{w},{h},{c},{n},{k},{s},{r},{pad[1]},{pad[0]},"
        f"{stride[1]},{stride[0]},{groups},{fwd:.5f},{bd:.5f},{bf:.5f},{ow},{oh}"
    )


def part_deepbench_conv(cfg, share):
    p = Part("deepbench conv", share, "conv.csv", CONV_HEADER)
    for dtype in (torch.float32, torch.bfloat16):
        for w, h, c, n, k, s, r, pw, ph, sw, sh in cfg["deepbench_conv"]:
            if p.late():
                break
            try:
                conv_row(p, "deepbench", dtype, n, c, h, w, k, r, s, [ph, pw], [sh, sw], 1)
            except Exception as e:  # noqa: BLE001 - a shape the library refuses is logged
                log("conv failed", (w, h, c, n, k, s, r), repr(e)[:200])
    log(p.name, p.rows, "rows")


def zoo_models(resolution):
    import torchvision.models as tvm

    def lenet5():
        return nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.Tanh(), nn.AvgPool2d(2, 2),
            nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2, 2),
            nn.Flatten(), nn.LazyLinear(120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(),
            nn.Linear(84, 10),
        )

    def fixed_head(model):
        # perfcast's zoo flattens VGG's and AlexNet's features as they are; torchvision's
        # adaptive pool would resize them to 7x7 (6x6) away from 224 px.
        if resolution != 224 and hasattr(model, "avgpool"):
            model.avgpool = nn.Identity()
            first = model.classifier[0] if isinstance(model.classifier[0], nn.Linear) else model.classifier[1]
            idx = 0 if isinstance(model.classifier[0], nn.Linear) else 1
            with torch.no_grad():
                probe = model.features(torch.zeros(1, 3, resolution, resolution))
            model.classifier[idx] = nn.Linear(probe.numel(), first.out_features)
        return model

    return {
        "lenet5": lenet5,
        "alexnet": lambda: fixed_head(tvm.alexnet()),
        "vgg11": lambda: fixed_head(tvm.vgg11()),
        "vgg16": lambda: fixed_head(tvm.vgg16()),
        "resnet18": tvm.resnet18,
        "resnet50": tvm.resnet50,
        "mobilenetv2": tvm.mobilenet_v2,
        "squeezenet1_1": tvm.squeezenet1_1,
        "densenet121": tvm.densenet121,
        "efficientnet_b0": tvm.efficientnet_b0,
        "vit_b_16": tvm.vit_b_16,
    }


def part_zoo_convs(share):
    """Every distinct conv of the torchvision CNNs (depthwise and grouped included)."""
    p = Part("zoo convs", share, "conv.csv", CONV_HEADER)
    seen = set()
    nets = ["mobilenetv2", "efficientnet_b0", "resnet18", "resnet50", "vgg16", "alexnet",
            "squeezenet1_1", "densenet121", "vit_b_16"]
    shapes = []
    for name in nets:
        for res in (224, 112):
            if name == "vit_b_16" and res != 224:
                continue
            model = zoo_models(res)[name]()
            found = []

            def hook(mod, inp, out, found=found):
                x = inp[0]
                found.append((x.shape[1], x.shape[2], x.shape[3], mod.out_channels,
                               mod.kernel_size, mod.padding, mod.stride, mod.groups))

            hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
            with torch.no_grad():
                model(torch.zeros(1, 3, res, res))
            for h in hs:
                h.remove()
            for f in found:
                if f not in seen and not isinstance(f[5], str):
                    seen.add(f)
                    shapes.append((name, f))
    log("zoo convs:", len(shapes), "distinct")
    for batch in (32, 8, 128):
        for name, (c, h, w, k, ks, pad, stride, groups) in shapes:
            if p.late():
                break
            try:
                conv_row(p, f"{name}", torch.float32, batch, c, h, w, k, ks[0], ks[1],
                         list(pad), list(stride), groups)
            except Exception as e:  # noqa: BLE001
                log("zoo conv failed", name, (c, h, w, k, ks, groups), repr(e)[:200])
    log(p.name, p.rows, "rows")


def part_networks(share, dtypes, nets, grid):
    """Whole training steps as a training loop runs them: copy the batch from host memory,
    forward, loss, backward, SGD with momentum; and the forward alone (eval, no grad)."""
    p = Part("networks", share, "networks.jsonl", None)
    for dtype in dtypes:
        for name in nets:
            for res, batches in grid(name):
                for batch in batches:
                    if p.late():
                        log(p.name, p.rows, "rows (budget)")
                        return
                    try:
                        rec = network_step(name, res, batch, dtype)
                        p.write(json.dumps(rec))
                        log(name, res, batch, dtype, f"step {rec['step_ms']:.2f} ms fwd {rec['forward_ms']:.2f}")
                    except Exception as e:  # noqa: BLE001
                        log("network failed", name, res, batch, repr(e)[:300])
                    torch.cuda.empty_cache()
    log(p.name, p.rows, "rows")


def network_step(name, res, batch, dtype):
    chans = 1 if name == "lenet5" else 3
    model = zoo_models(res)[name]()
    if name == "lenet5":
        model(torch.zeros(1, 1, res, res))  # materialise the lazy layer
    model = model.to(DEV)
    params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    host_x = torch.randn(batch, chans, res, res)
    host_y = torch.randint(0, 10, (batch,))
    amp = dtype != torch.float32
    x_dev = host_x.to(DEV)
    y_dev = host_y.to(DEV)

    def fwd_bwd():
        with torch.autocast("cuda", dtype=dtype, enabled=amp):
            loss = F.cross_entropy(model(x_dev), y_dev)
        loss.backward()

    def step():
        x = host_x.to(DEV, non_blocking=False)
        y = host_y.to(DEV, non_blocking=False)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    model.train()
    step_ms, step_all = time_ms(step, warmup=4, reps=12, max_s=3.0)
    fb_ms, _ = time_ms(lambda: (opt.zero_grad(set_to_none=True), fwd_bwd()), warmup=2, reps=8, max_s=2.0)
    fwd_bwd()
    opt_ms, _ = time_ms(opt.step, warmup=2, reps=10, max_s=1.0)
    copy_ms, _ = time_ms(lambda: host_x.to(DEV), warmup=2, reps=10, max_s=1.0)
    model.eval()

    def infer():
        with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=amp):
            model(x_dev)

    fwd_ms, _ = time_ms(infer, warmup=3, reps=10, max_s=2.0)
    torch.cuda.reset_peak_memory_stats()
    model.train()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return {
        "network": name, "resolution": res, "batch": batch,
        "dtype": str(dtype).replace("torch.", ""), "params": params,
        "step_ms": step_ms, "step_all_ms": step_all, "forward_backward_ms": fb_ms,
        "optimizer_ms": opt_ms, "copy_ms": copy_ms, "forward_ms": fwd_ms,
        "peak_bytes": peak, "framework": f"pytorch {torch.__version__} eager, SGD momentum",
    }


def part_neusight(cfg, share):
    p = Part("neusight", share, "neusight.csv", "OPName,B,M,N,K,H,Input_Channel,Output_Channel,Kernel_Szie,Input_Size,Stride,Padding,Latency")
    order = ["add", "ln", "softmax", "gelu", "linear", "bmm", "conv"]
    if "--ops" in sys.argv:
        order = sys.argv[sys.argv.index("--ops") + 1].split(",")
    skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 0
    for op in order:
        rows = cfg[op][skip if op == "linear" else 0:]
        for r in rows:
            if p.late():
                break
            try:
                lat = neusight_op(op, r)
            except Exception as e:  # noqa: BLE001
                log("neusight failed", op, r, repr(e)[:200])
                continue
            cells = {"OPName": op, "Latency": f"{lat:.6f}"}
            keys = {"linear": "BMNK", "bmm": "BMNK", "conv": None}.get(op, "BH")
            if op == "conv":
                for k, v in zip(["B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"], r):
                    cells[k] = v
            else:
                for k, v in zip(keys, r):
                    cells[k] = v
            p.write(",".join(str(cells.get(c, "")) for c in p_header_cols()))
        log(op, "done at", p.rows)
    log(p.name, p.rows, "rows")


def p_header_cols():
    return "OPName,B,M,N,K,H,Input_Channel,Output_Channel,Kernel_Szie,Input_Size,Stride,Padding,Latency".split(",")


def neusight_op(op, r):
    if op == "linear":
        b, m, n, k = r
        lin = nn.Linear(n, k).to(DEV)
        x = rand(b, m, n)
        f = lambda: lin(x)
    elif op == "bmm":
        b, m, n, k = r
        x, y = rand(b, m, n), rand(b, n, k)
        f = lambda: torch.bmm(x, y)
    elif op == "conv":
        b, ci, co, ks, size, stride, pad = r
        conv = nn.Conv2d(ci, co, ks, stride, pad).to(DEV)
        x = rand(b, ci, size, size)
        f = lambda: conv(x)
    else:
        b, h = r
        x = rand(b, h)
        if op == "add":
            y = rand(b, h)
            f = lambda: x + y
        elif op == "ln":
            ln = nn.LayerNorm(h).to(DEV)
            f = lambda: ln(x)
        elif op == "softmax":
            f = lambda: torch.softmax(x, -1)
        else:
            f = lambda: F.gelu(x)
    _, times = time_ms(f, warmup=3, reps=12, max_s=0.6)
    return mean_fastest(times)


LLMS = {
    # name: n_embd, n_head, n_kv_head, n_expanded_embd, gated
    "meta-llama/Llama-2-7b-hf": (4096, 32, 32, 11008, True),
    "meta-llama/Meta-Llama-3-8B": (4096, 32, 8, 14336, True),
    "codellama/CodeLlama-34b-Instruct-hf": (8192, 64, 8, 22016, True),
    "microsoft/phi-2": (2560, 32, 32, 10240, False),
}


def part_llm(share):
    p = Part("llm fp16", share, "llm_fp16.csv", "model,num_tokens,num_tensor_parallel_workers,op,time_ms")
    dt = torch.float16
    for tokens in (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        for model, (d, nh, nkv, ff, gated) in LLMS.items():
            for tp in (1, 2, 4, 8):
                if p.late():
                    log(p.name, p.rows, "rows (budget)")
                    return
                hd = d // nh
                x = rand(tokens, d, dtype=dt)
                ops = {
                    "attn_pre_proj": (rand((nh + 2 * nkv) * hd // tp, d, dtype=dt), x),
                    "attn_post_proj": (rand(d, d // tp, dtype=dt), rand(tokens, d // tp, dtype=dt)),
                    "mlp_up_proj": (rand(ff * (2 if gated else 1) // tp, d, dtype=dt), x),
                    "mlp_down_proj": (rand(d, ff // tp, dtype=dt), rand(tokens, ff // tp, dtype=dt)),
                }
                for name, (wt, inp) in ops.items():
                    t, _ = time_ms(lambda: F.linear(inp, wt), warmup=3, reps=10, max_s=0.5)
                    p.write(f"{model},{tokens},{tp},{name},{t:.6f}")
                if tp == 1:
                    g = torch.ones(d, device=DEV, dtype=dt)
                    t, _ = time_ms(lambda: F.rms_norm(x, (d,), g), warmup=3, reps=10, max_s=0.5)
                    p.write(f"{model},{tokens},{tp},input_layernorm,{t:.6f}")
                    y = rand(tokens, d, dtype=dt)
                    t, _ = time_ms(lambda: x + y, warmup=3, reps=10, max_s=0.5)
                    p.write(f"{model},{tokens},{tp},add,{t:.6f}")
                u = rand(tokens, 2 * ff // tp, dtype=dt)
                if gated:
                    act = lambda: F.silu(u[:, : ff // tp]) * u[:, ff // tp:]
                else:
                    act = lambda: F.gelu(u[:, : ff // tp])
                t, _ = time_ms(act, warmup=3, reps=10, max_s=0.5)
                p.write(f"{model},{tokens},{tp},mlp_act,{t:.6f}")
    log(p.name, p.rows, "rows")


def part_gemm(cfg, share):
    p = Part("deepbench gemm", share, "gemm.csv", "device,mode,precision,M,N,K,A_T,B_T,time_ms")
    for m, n, k, at, bt in cfg["deepbench_gemm"]:
        if p.late():
            break
        a = rand(k, m) if at == "T" else rand(m, k)
        b = rand(n, k) if bt == "T" else rand(k, n)
        aa = a.t() if at == "T" else a
        bb = b.t() if bt == "T" else b
        t, _ = time_ms(lambda: aa @ bb, warmup=3, reps=10, max_s=0.5)
        p.write(f"NV_H100,training,Float,{m},{n},{k},{at},{bt},{t:.5f}")
    log(p.name, p.rows, "rows")


def main():
    fp32_exact()
    props = torch.cuda.get_device_properties(0)
    env = {
        "device": props.name, "sms": props.multi_processor_count,
        "memory_bytes": props.total_memory, "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    # The platform's launch floor: a tiny add, CUDA events, a low quantile.
    a, b = rand(64), rand(64)
    _, times = time_ms(lambda: a + b, warmup=20, reps=200, max_s=2.0)
    env["launch_us_p02"] = times[max(0, int(len(times) * 0.02))] * 1e3
    env["launch_us_median"] = times[len(times) // 2] * 1e3
    json.dump(env, open(os.path.join(OUT, "env.json"), "w"), indent=1)
    log("env", env)
    cfg = json.load(open(os.path.join(HERE, "configs.json")))
    small = lambda n: [(32, [64, 256])] if n == "lenet5" else [(224, [16, 64, 128]), (112, [64])]
    core = ["resnet18", "resnet50", "vgg16", "mobilenetv2", "vgg11", "alexnet", "lenet5"]
    more = ["squeezenet1_1", "densenet121", "efficientnet_b0", "vit_b_16"]
    parts = [
        lambda: part_deepbench_conv(cfg, 45),
        lambda: part_networks(150, [torch.float32], core, small),
        lambda: part_zoo_convs(60),
        lambda: part_neusight(cfg, 70),
        lambda: part_networks(45, [torch.float32], more, lambda n: [(224, [32, 128])]),
        lambda: part_llm(30),
        lambda: part_networks(40, [torch.bfloat16], ["resnet50", "vgg16", "mobilenetv2"], lambda n: [(224, [64, 128])]),
        lambda: part_gemm(cfg, 15),
    ]
    if "--second" in sys.argv:
        # What the first pass had no time for: bmm, the rest of linear, NeuSight's convs, and
        # whole steps at batch 256 and at small inputs.
        big = lambda n: [(224, [256]), (32, [64, 256]), (64, [128])]
        parts = [
            lambda: part_networks(110, [torch.float32], ["resnet18", "resnet50", "mobilenetv2", "vgg16", "vgg11"], big),
            lambda: part_neusight(cfg, 150),
        ]
    for run in parts:
        if time.time() - START > BUDGET:
            log("budget spent")
            break
        try:
            run()
        except Exception:  # noqa: BLE001
            log("part failed:", traceback.format_exc()[-1500:])
    log("done")


if __name__ == "__main__":
    main()

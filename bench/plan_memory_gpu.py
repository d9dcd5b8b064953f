#!/usr/bin/env python3
"""Peak GPU memory of fp32 training steps in PyTorch, to check `perfcast plan`'s memory model
(reference rules) on a real GPU. Prints one JSON object per line:
{"network", "batch", "fwd_bwd_peak_bytes", "step_peak_bytes", "params"}.

    python3 bench/plan_memory_gpu.py

Each run: a model in fp32, Adam (PyTorch's default foreach implementation), loss = sum of the
output (as `perfcast measure` trains; the memory model counts no loss buffers), one step to
create the optimiser state, then a second step with the peak counters reset: `fwd_bwd_peak`
is torch.cuda.max_memory_allocated() over its forward and backward passes, `step_peak` over
the whole step (the optimiser's temporaries included). The networks are the ones perfcast's
zoo describes (torchvision's ResNet-18/50, VGG-16 without classifier dropout, MobileNetV2)
and examples/networks/gpt2-large.json (pre-norm blocks, separate Q/K/V, dropout 0.1).
"""
import json
import math

import torch
import torch.nn as nn
import torchvision


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a, self.dh = a, h // a
        self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.c_proj = nn.Linear(h, h)
        self.fc, self.proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, s, h = x.shape
        y = self.ln_1(x)
        split = lambda t: t.view(b, s, self.a, self.dh).transpose(1, 2)
        q, k, v = split(self.q(y)), split(self.k(y)), split(self.v(y))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dh), dim=-1)
        ctx = (self.drop(att) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.drop(self.c_proj(ctx))
        return x + self.drop(self.proj(nn.functional.gelu(self.fc(self.ln_2(x)))))


class Gpt(nn.Module):
    def __init__(self, layers=36, h=1280, a=20, vocab=50257):
        super().__init__()
        self.blocks = nn.ModuleList(Block(h, a) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def vgg16():
    m = torchvision.models.vgg16()
    m.classifier = nn.Sequential(*[l for l in m.classifier if not isinstance(l, nn.Dropout)])
    return m


def measure(name, make, input_shape, batch):
    torch.cuda.empty_cache()
    model = make().cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, *input_shape, device="cuda")
    peaks = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        model(x).sum().backward()
        torch.cuda.synchronize()
        fwd_bwd = torch.cuda.max_memory_allocated()
        opt.step()
        torch.cuda.synchronize()
        peaks.append((fwd_bwd, torch.cuda.max_memory_allocated()))
    params = sum(p.numel() for p in model.parameters())
    # Everything allocated counts: weights, Adam state, the input batch (the model counts it
    # where the first layer keeps it), activations, gradients, library workspaces.
    print(json.dumps({"network": name, "batch": batch, "params": params,
                      "fwd_bwd_peak_bytes": peaks[1][0],
                      "step_peak_bytes": peaks[1][1]}), flush=True)
    del model, opt, x


if __name__ == "__main__":
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for batch in (32, 64):
        measure("resnet50", torchvision.models.resnet50, (3, 224, 224), batch)
    for batch in (32, 64):
        measure("resnet18", torchvision.models.resnet18, (3, 224, 224), batch)
    for batch in (16, 32):
        measure("vgg16", vgg16, (3, 224, 224), batch)
    for batch in (32, 64):
        measure("mobilenetv2", torchvision.models.mobilenet_v2, (3, 224, 224), batch)
    for batch in (1, 2):
        measure("gpt2-large", Gpt, (1024, 1280), batch)

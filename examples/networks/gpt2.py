#!/usr/bin/env python3
"""Writes a GPT-2-style decoder as a perfcast network JSON (stdout).

    python3 examples/networks/gpt2.py large > examples/networks/gpt2-large.json

Sizes (Radford et al., 2019; Hugging Face `gpt2*` configs): small 12 x 768 (12 heads),
medium 24 x 1024 (16), large 36 x 1280 (20), xl 48 x 1600 (25); 1024 tokens, vocabulary
50257, MLP 4 x width. Each block is pre-norm: ln_1, separate Q, K and V projections (GPT-2
fuses them into one `c_attn`; same FLOPs), Q K^T per head, softmax (the 1/sqrt(d) scale and
the causal mask fused into it, as Megatron-LM's fused kernel does), attention dropout, the
product with V, the output projection, residual dropout and add; ln_2, fc 4h, GELU, fc h,
residual dropout and add. After the blocks: ln_f and the LM head (no bias; its weight is the
token embedding's, so parameters are counted once). The token and position embedding lookups
are not layers perfcast models: the network input is their sum, [tokens, width]; the 1.3 M
position-embedding parameters are therefore not counted (772.7 M of GPT-2 large's 774.0 M).
A `--transformer config.json` importer, once merged, builds the same from a Hugging Face
config.
"""
import json
import sys

SIZES = {"small": (12, 768, 12), "medium": (24, 1024, 16), "large": (36, 1280, 20), "xl": (48, 1600, 25)}


def network(size, tokens=1024, vocab=50257):
    layers_n, h, a = SIZES[size]
    s, dh = tokens, h // a
    layers = []

    def add(name, spec, **extra):
        layers.append({"name": name, **extra, "spec": spec})

    def lin(i, o, bias=True):
        return {"kind": "linear", "tokens": s, "in_features": i, "out_features": o, "bias": bias}

    prev = "input"
    for b in range(layers_n):
        p = f"h.{b}."
        add(p + "ln_1", {"kind": "layernorm", "tokens": s, "features": h}, input_from=prev)
        add(p + "attn.q", lin(h, h))
        add(p + "attn.k", lin(h, h), input_from=p + "ln_1")
        add(p + "attn.v", lin(h, h), input_from=p + "ln_1")
        add(p + "attn.scores", {"kind": "matmul", "heads": a, "m": s, "k": dh, "n": s},
            input_from=p + "attn.q", second_from=p + "attn.k", reshape=True)
        add(p + "attn.softmax", {"kind": "softmax", "shape": [a, s, s]})
        add(p + "attn.attn_dropout", {"kind": "dropout", "shape": [a, s, s]})
        add(p + "attn.context", {"kind": "matmul", "heads": a, "m": s, "k": s, "n": dh},
            second_from=p + "attn.v", reshape=True)
        add(p + "attn.c_proj", lin(h, h), reshape=True)
        add(p + "attn.resid_dropout", {"kind": "dropout", "shape": [1, s, h]})
        add(p + "attn.add", {"kind": "add", "shape": [1, s, h]}, second_from=prev)
        add(p + "ln_2", {"kind": "layernorm", "tokens": s, "features": h})
        add(p + "mlp.c_fc", lin(h, 4 * h))
        add(p + "mlp.gelu", {"kind": "gelu", "shape": [1, s, 4 * h]})
        add(p + "mlp.c_proj", lin(4 * h, h))
        add(p + "mlp.dropout", {"kind": "dropout", "shape": [1, s, h]})
        add(p + "mlp.add", {"kind": "add", "shape": [1, s, h]}, second_from=p + "attn.add")
        prev = p + "mlp.add"
    add("ln_f", {"kind": "layernorm", "tokens": s, "features": h})
    add("lm_head", lin(h, vocab, bias=False))
    return {"name": f"gpt2-{size}", "input": [s, h], "layers": layers}


if __name__ == "__main__":
    size = sys.argv[1] if len(sys.argv) > 1 else "large"
    net = network(size)
    # One layer per line: diffs stay readable.
    print("{")
    print(f'  "name": {json.dumps(net["name"])},')
    print(f'  "input": {json.dumps(net["input"])},')
    print('  "layers": [')
    print(",\n".join("    " + json.dumps(l) for l in net["layers"]))
    print("  ]")
    print("}")

"""The Python package answers what the CLI answers, rejects what the CLI rejects, and is safe
to call from many threads."""

from __future__ import annotations

import json
import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import perfcast

from conftest import GPU_BUNDLE

ELEMENTWISE = ["relu", "gelu", "tanh", "add", "mul", "div", "pow", "add_scalar", "softmax", "sigmoid", "dropout", "copy"]


def random_module(rng: random.Random) -> dict:
    """A random valid module of a kind a GPU network has (some the bundle has no model for)."""
    kind = rng.choice(["conv2d", "linear", "matmul", "layernorm", "embedding", *ELEMENTWISE])
    p2 = lambda lo, hi: 2 ** rng.randint(lo, hi)  # noqa: E731
    if kind == "conv2d":
        k = rng.choice([1, 3, 5, 7])
        cin = p2(2, 9)
        groups = rng.choice([1, 1, 1, cin])
        return {
            "kind": kind,
            "in_channels": cin,
            "out_channels": cin if groups > 1 else p2(3, 9),
            "input_hw": [p2(3, 7)] * 2,
            "kernel": [k, k],
            "stride": [rng.choice([1, 2])] * 2,
            "padding": [k // 2, k // 2],
            "groups": groups,
        }
    if kind == "linear":
        return {"kind": kind, "tokens": p2(0, 9), "in_features": p2(5, 13), "out_features": p2(5, 13)}
    if kind == "matmul":
        return {"kind": kind, "heads": p2(0, 5), "m": p2(4, 10), "k": p2(4, 8), "n": p2(4, 10)}
    if kind == "layernorm":
        return {"kind": kind, "tokens": p2(0, 10), "features": p2(6, 12)}
    if kind == "embedding":
        return {"kind": kind, "tokens": p2(3, 10), "vocab": p2(10, 16), "features": p2(6, 11)}
    return {"kind": kind, "shape": [p2(0, 5), p2(3, 9), p2(3, 10)]}


def test_every_zoo_network_matches_the_cli(gpu_bundle, cli):
    for name in perfcast.zoo_names():
        for phase in ["inference", "training"]:
            py = gpu_bundle.predict_network(name, batch=8, phase=phase)
            out = cli("predict", "--bundle", str(GPU_BUNDLE), "--device", "a100", "--network", name,
                      "--batch", "8", "--phase", phase, "--format", "json")
            assert py.total_ms == out["total_ms"], (name, phase)
            assert py.layer_sum_ms == out["layer_sum_ms"]
            assert [l["ms"] for l in py.raw["layers"]] == [l["ms"] for l in out["layers"]]
            assert py.total_ms > 0


def test_a_thousand_random_modules_match_the_cli(gpu_bundle, cli, tmp_path):
    rng = random.Random(7)
    modules = []
    for _ in range(1000):
        m = random_module(rng)
        m["batch"] = rng.choice([1, 2, 8, 32])
        m["phase"] = rng.choice(["inference", "training"])
        modules.append(m)
    path = tmp_path / "modules.json"
    path.write_text(json.dumps(modules))
    out = cli("predict", "--bundle", str(GPU_BUNDLE), "--device", "a100", "--modules-file", str(path), "--format", "json")
    expected = [row["ms"] for row in out]
    many = gpu_bundle.predict_many(modules)
    assert many.dtype == np.float64 and many.shape == (1000,)
    assert many.tolist() == expected
    one_by_one = [gpu_bundle.predict(m) for m in modules]
    assert one_by_one == expected
    detail = gpu_bundle.predict_detail(modules[0])
    assert detail["ms"] == expected[0] and detail["kind"] == modules[0]["kind"]


def test_plain_dicts_read_directly_answer_as_through_json(gpu_bundle):
    # A dict of plain ints, lists, tuples and bools is read straight into a spec; a context key
    # sends the same module through the JSON path, which must agree on every answer and error.
    rng = random.Random(13)
    modules = [random_module(rng) for _ in range(300)]
    modules += [
        {"kind": "conv2d", "in_channels": 3, "out_channels": 8, "input_hw": (32, 24), "kernel": 3,
         "stride": 2, "padding": (1, 0), "dilation": [2, 1], "groups": 1, "bias": False},
        {"kind": "maxpool2d", "channels": 8, "input_hw": [9, 7], "kernel": [2, 3]},
        {"kind": "avgpool2d", "channels": 8, "input_hw": 16, "kernel": 2, "stride": [2, 1], "padding": 1},
        {"kind": "batchnorm2d", "channels": 16, "input_hw": [8, 8]},
        {"kind": "rmsnorm", "tokens": 4, "features": 64},
        {"kind": "matmul", "m": 64, "k": 32, "n": 16, "trans_a": True, "trans_b": False},
        {"kind": "leaky_relu", "shape": (2, 3, 4)},
        {"kind": "relu", "shape": [2, 3.0, 4]},
        {"kind": "relu", "shape": [2, np.int64(3), 4]},
    ]
    for m in modules:
        via_json = {**m, "batch": 2}
        assert gpu_bundle.predict_detail(m, batch=2) == gpu_bundle.predict_detail(via_json), m
        assert perfcast.describe(m, batch=2) == perfcast.describe(via_json, batch=2)
    assert gpu_bundle.predict_many(modules, batch=2).tolist() == gpu_bundle.predict_many(
        [{**m, "batch": 2} for m in modules]).tolist()
    bad = [
        {"kind": "relu", "shape": [2, True, 4]},
        {"kind": "relu", "shape": [2, 0, 4]},
        {"kind": "relu", "shape": [2, 3]},
        {"kind": "linear", "in_features": 8, "out_features": 8, "bias": 1},
        {"kind": "linear", "in_features": 8, "out_features": 8, "typo": 1},
        {"kind": "conv2d", "in_channels": 3, "out_channels": 8, "input_hw": [4, 4], "kernel": 9},
        {"kind": "Conv2d", "in_channels": 3, "out_channels": 8, "input_hw": 8, "kernel": 3},
    ]
    for m in bad:
        with pytest.raises(perfcast.InputError) as plain:
            gpu_bundle.predict(m)
        with pytest.raises(perfcast.InputError) as general:
            gpu_bundle.predict_many([m])
        assert str(plain.value).split(": ", 1)[1] == str(general.value).split(": ", 1)[1], m


def test_columns_answer_as_the_same_modules_one_by_one(gpu_bundle):
    rng = np.random.default_rng(3)
    n = 500
    fin = 2 ** rng.integers(5, 13, n)
    fout = 2 ** rng.integers(5, 13, n)
    tokens = 2 ** rng.integers(0, 9, n)
    batch = rng.choice([1, 4, 16], n)
    cols = gpu_bundle.predict_columns("linear", in_features=fin, out_features=fout, tokens=tokens, batch=batch)
    dicts = [
        {"kind": "linear", "in_features": int(a), "out_features": int(b), "tokens": int(t), "batch": int(c)}
        for a, b, t, c in zip(fin, fout, tokens, batch)
    ]
    assert cols.tolist() == gpu_bundle.predict_many(dicts).tolist()
    # A list field as an N x D array, and one batch for all.
    shapes = 2 ** rng.integers(2, 9, (n, 3))
    relu = gpu_bundle.predict_columns("relu", shape=shapes, batch=4)
    assert relu.tolist() == [gpu_bundle.predict({"kind": "relu", "shape": s.tolist()}, batch=4) for s in shapes]


def test_an_array_of_configurations_answers_as_the_same_modules_one_by_one(gpu_bundle):
    assert perfcast.config_columns("linear") == ["tokens", "in_features", "out_features", "bias"]
    rng = np.random.default_rng(5)
    n = 400
    config = np.stack(
        [2 ** rng.integers(0, 9, n), 2 ** rng.integers(5, 13, n), 2 ** rng.integers(5, 13, n), rng.integers(0, 2, n)],
        axis=1,
    )
    batch = rng.choice([1, 4, 16], n)
    got = gpu_bundle.predict_array("linear", config, batch=batch, phase="training")
    dicts = [
        {"kind": "linear", "tokens": int(t), "in_features": int(a), "out_features": int(b), "bias": bool(c), "batch": int(k)}
        for (t, a, b, c), k in zip(config, batch)
    ]
    assert got.tolist() == gpu_bundle.predict_many(dicts, phase="training").tolist()
    # One batch for all; a bad row is named.
    one = gpu_bundle.predict_array("linear", config[:3], batch=8)
    assert one.tolist() == [gpu_bundle.predict({**d, "batch": 8}) for d in dicts[:3]]
    with pytest.raises(perfcast.InputError, match="row 1: `in_features`"):
        gpu_bundle.predict_array("linear", [[1, 64, 64, 0], [1, 2.5, 64, 0]])
    with pytest.raises(perfcast.InputError, match="config"):
        gpu_bundle.predict_array("linear", np.zeros((2, 3)))


def test_a_large_array_split_over_threads_answers_in_row_order_and_names_its_first_bad_row(gpu_bundle):
    rng = np.random.default_rng(7)
    n = 9000  # over the rows that are split into shares over the cores
    config = np.stack(
        [2 ** rng.integers(0, 9, n), 2 ** rng.integers(5, 13, n), 2 ** rng.integers(5, 13, n), rng.integers(0, 2, n)],
        axis=1,
    )
    got = gpu_bundle.predict_array("linear", config, batch=2)
    assert got.tolist() == gpu_bundle.predict_array("linear", config[:4000], batch=2).tolist() + \
        gpu_bundle.predict_array("linear", config[4000:], batch=2).tolist()
    assert got[[0, 4567, n - 1]].tolist() == [
        gpu_bundle.predict({"kind": "linear", "tokens": int(t), "in_features": int(a), "out_features": int(b),
                            "bias": bool(c), "batch": 2})
        for t, a, b, c in config[[0, 4567, n - 1]]
    ]
    bad = config.astype(float)
    bad[8000, 1] = 0.5  # not a whole number, in a late share
    bad[6000, 2] = 0  # a zero-width layer, in an earlier one
    with pytest.raises(perfcast.InputError, match="row 6000"):
        gpu_bundle.predict_array("linear", bad)


def test_devices_select_targets(gpu_bundle):
    names = {d["id"] for d in perfcast.devices()}
    assert {"nvidia-h100-80gb-hbm3", "tesla-t4"} <= names
    gemm = {"kind": "linear", "tokens": 512, "in_features": 4096, "out_features": 4096}
    h100 = gpu_bundle.predict(gemm, batch=8, device="h100")
    t4 = gpu_bundle.predict(gemm, batch=8, device="t4")
    assert 0 < h100 < t4
    spec = next(d for d in perfcast.devices() if d["id"] == "tesla-t4")
    spec.pop("id")
    assert gpu_bundle.predict(gemm, batch=8, device=spec) == t4


def test_a_data_type_suffix_predicts_tensor_core_kernels(gpu_bundle):
    gemm = {"kind": "linear", "tokens": 512, "in_features": 4096, "out_features": 4096}
    fp32 = gpu_bundle.predict(gemm, batch=8, device="a100-sxm4-80gb")
    fp16 = gpu_bundle.predict(gemm, batch=8, device="a100-sxm4-80gb:fp16")
    # The fp16 tensor peak is 16x the fp32 one: the GEMM runs several times faster.
    assert 0 < fp16 < fp32 / 3
    with pytest.raises(perfcast.InputError, match="fp8"):
        gpu_bundle.predict(gemm, device="h100:fp8")
    with pytest.raises(perfcast.InputError, match="no `fp16` peak"):
        gpu_bundle.predict(gemm, device="k80:fp16")


def test_bad_queries_raise_input_errors_naming_the_field(gpu_bundle):
    with pytest.raises(perfcast.InputError, match="`kind`: unknown variant `warp_drive`"):
        gpu_bundle.predict({"kind": "warp_drive"})
    with pytest.raises(perfcast.InputError, match="in_features"):
        gpu_bundle.predict({"kind": "linear", "in_features": -3, "out_features": 8})
    with pytest.raises(perfcast.InputError, match="out_features"):
        gpu_bundle.predict({"kind": "linear", "in_features": 8})
    with pytest.raises(perfcast.InputError, match="phase"):
        gpu_bundle.predict({"kind": "relu", "shape": [2, 3, 4]}, phase="sideways")
    with pytest.raises(perfcast.InputError, match="module 1"):
        gpu_bundle.predict_many([{"kind": "relu", "shape": [2, 3, 4]}, {"kind": "relu", "shape": [0, 3, 4]}])
    with pytest.raises(perfcast.InputError, match="row 1"):
        gpu_bundle.predict_columns("linear", in_features=np.array([8, 0]), out_features=np.array([8, 8]))
    with pytest.raises(perfcast.InputError, match="not a finite number"):
        gpu_bundle.predict({"kind": "relu", "shape": [2, float("nan"), 4]})
    for huge in [2**63, 2**64, -(2**63) - 1]:
        with pytest.raises(perfcast.InputError, match=str(huge)):
            gpu_bundle.predict({"kind": "relu", "shape": [2, huge, 4]})
    with pytest.raises(perfcast.InputError, match="unknown device"):
        gpu_bundle.predict({"kind": "relu", "shape": [2, 3, 4]}, device="iphone")
    with pytest.raises(perfcast.InputError, match="seq"):
        gpu_bundle.predict_network(str(GPU_BUNDLE.parents[1] / "examples" / "transformers" / "gpt2.json"))
    assert issubclass(perfcast.InputError, perfcast.Error)


@pytest.mark.parametrize("value", [-1, 0, 1.5, float("nan"), 2**64, "8", True, None])
def test_bad_counts_raise_input_errors_naming_the_value(gpu_bundle, value):
    relu = {"kind": "relu", "shape": [2, 3, 4]}
    with pytest.raises(perfcast.InputError, match="`batch`"):
        gpu_bundle.predict(relu, batch=value)
    with pytest.raises(perfcast.InputError, match="`threads`"):
        gpu_bundle.predict_many([relu], threads=value)
    with pytest.raises(perfcast.InputError, match="`batch`"):
        gpu_bundle.predict_network("lenet5", batch=value)
    gpt2 = GPU_BUNDLE.parents[1] / "examples" / "transformers" / "gpt2.json"
    if value is not None:
        with pytest.raises(perfcast.InputError, match="`seq`"):
            perfcast.network(gpt2, seq=value)
    # numpy's integers are whole numbers too.
    assert gpu_bundle.predict(relu, batch=np.int64(2)) > 0


def test_a_bundle_path_that_is_not_a_path_is_an_input_error():
    with pytest.raises(perfcast.InputError, match="bundle path"):
        perfcast.load_bundle(None)


def test_bundles_that_cannot_load_raise_bundle_errors(tmp_path):
    with pytest.raises(perfcast.BundleError, match="no such bundle directory"):
        perfcast.load_bundle(tmp_path / "nothing-here")
    broken = tmp_path / "gpu"
    shutil.copytree(GPU_BUNDLE, broken)
    model = broken / "linear" / "util.json"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(perfcast.BundleError, match="util.json"):
        perfcast.load_bundle(broken, device="a100")
    assert issubclass(perfcast.BundleError, perfcast.Error)


def test_threads_share_a_bundle_and_the_gil_is_released(gpu_bundle):
    rng = random.Random(11)
    modules = [random_module(rng) for _ in range(2000)]
    serial = gpu_bundle.predict_many(modules).tolist()
    chunks = [modules[i::4] for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(gpu_bundle.predict_many, chunks))
    for i, chunk in enumerate(parallel):
        assert chunk.tolist() == serial[i::4]

    # A Python thread keeps running while a long prediction runs without the GIL.
    n = 200_000
    fin = np.full(n, 1024)
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = ticks
        gpu_bundle.predict_columns("linear", in_features=fin, out_features=fin, tokens=np.arange(1, n + 1) % 512 + 1)
        during = ticks - before
    finally:
        stop.set()
        t.join()
    assert during > 1000, during


def test_networks_from_every_source(gpu_bundle, tmp_path):
    examples = GPU_BUNDLE.parents[1] / "examples" / "transformers"
    gpt2 = perfcast.network(examples / "gpt2.json", seq=128)
    assert len(gpt2) > 50 and "gpt" in gpt2.name.lower()
    p = gpu_bundle.predict_network(gpt2, batch=2)
    assert p.total_ms > 0 and len(p.raw["layers"]) == len(gpt2)
    config = json.loads((examples / "gpt2.json").read_text())
    assert gpu_bundle.predict_network(config, seq=128, batch=2).total_ms == p.total_ms
    # perfcast's network JSON, as a dict and as a file.
    doc = perfcast.network("resnet18").to_dict()
    path = tmp_path / "net.json"
    path.write_text(json.dumps(doc))
    a = gpu_bundle.predict_network(doc, batch=4).total_ms
    assert a == gpu_bundle.predict_network(path, batch=4).total_ms == gpu_bundle.predict_network("resnet18", batch=4).total_ms
    # A zoo network at another resolution is cheaper.
    assert gpu_bundle.predict_network("vgg16@112").total_ms < gpu_bundle.predict_network("vgg16").total_ms


def test_a_gpu_training_step_pays_its_copy_and_update(gpu_bundle):
    step = gpu_bundle.predict_network("resnet18", batch=32, phase="training")
    c = step.composed
    assert c is not None and c["from_spec"]
    # 32 images of 3x224x224 fp32 over the 8 GB/s pageable copy.
    assert c["copy_ms"] == pytest.approx(32 * 3 * 224 * 224 * 4 / 8e6, rel=1e-9)
    assert c["update_ms"] > 0
    assert step.total_ms == pytest.approx(
        step.layer_sum_ms + c["per_run_ms"] + c["update_ms"] + c["copy_ms"], rel=1e-12
    )
    assert 0 < step.roofline_ms <= step.layer_sum_ms
    forward = gpu_bundle.predict_network("resnet18", batch=32)
    assert forward.composed is None and forward.total_ms == forward.layer_sum_ms


def test_layers_are_a_dataframe_when_pandas_is_there(gpu_bundle):
    p = gpu_bundle.predict_network("resnet18", batch=8)
    try:
        import pandas  # noqa: F401
    except ImportError:
        assert isinstance(p.layers, list) and {"name", "kind", "ms"} <= set(p.layers[0])
    else:
        assert list(p.layers["ms"]) == [l["ms"] for l in p.raw["layers"]]
    assert "resnet18" in repr(p)


def test_fusion_matches_the_cli_and_never_exceeds_eager(gpu_bundle, cli):
    config = str(GPU_BUNDLE.parents[1] / "examples" / "transformers" / "bert-base.json")
    eager = gpu_bundle.predict_network(config, seq=128, batch=8)
    assert eager.fusion is None
    assert gpu_bundle.predict_network(config, seq=128, batch=8, fusion="none").total_ms == eager.total_ms
    for policy in ["epilogue", "compile", "engine", "megatron"]:
        p = gpu_bundle.predict_network(config, seq=128, batch=8, fusion=policy)
        out = cli("predict", "--bundle", str(GPU_BUNDLE), "--device", "a100", "--transformer", config,
                  "--seq", "128", "--batch", "8", "--fusion", policy, "--format", "json")
        assert p.total_ms == out["total_ms"], policy
        assert p.fusion["policy"] == policy and p.fusion["eager_total_ms"] == eager.total_ms
        assert p.roofline_ms <= p.total_ms < eager.total_ms
    with pytest.raises(perfcast.InputError, match="unknown fusion policy `xla`"):
        gpu_bundle.predict_network(config, seq=128, batch=8, fusion="xla")

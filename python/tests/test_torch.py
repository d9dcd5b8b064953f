"""The PyTorch path, where torch and onnx are installed (skipped elsewhere)."""

from __future__ import annotations

import pytest

import perfcast

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from conftest import GPU_BUNDLE  # noqa: E402


def test_a_traced_module_predicts_like_its_layers():
    import perfcast.torch as pt

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 32 * 32, 10),
    )
    graph = pt.trace(model, torch.randn(1, 3, 32, 32))
    kinds = [layer["spec"]["kind"] if "spec" in layer else layer["kind"] for layer in graph.to_dict()["layers"]]
    assert "conv2d" in kinds and "linear" in kinds and "relu" in kinds
    bundle = perfcast.load_bundle(GPU_BUNDLE, device="a100")
    small = bundle.predict_network(graph, batch=1).total_ms
    big = bundle.predict_network(graph, batch=64).total_ms
    assert 0 < small < big

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


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_both_exporters_give_the_same_modules_and_total(exporter):
    import perfcast.torch as pt

    if exporter == "dynamo":
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 16 * 16, 10),
    )
    example = torch.randn(1, 3, 16, 16)
    graph = pt.trace(model, example, exporter=exporter)
    reference = pt.trace(model, example, exporter="legacy")
    bundle = perfcast.load_bundle(GPU_BUNDLE, device="a100")
    kinds = lambda g: [l["spec"]["kind"] for l in g.to_dict()["layers"] if l["spec"]["kind"] != "view"]
    assert kinds(graph) == kinds(reference) == ["conv2d", "relu", "conv2d", "linear"]
    # The same work, so the same answer, at a batch the export never saw.
    assert bundle.predict_network(graph, batch=8).total_ms == pytest.approx(
        bundle.predict_network(reference, batch=8).total_ms, rel=1e-12
    )


def test_an_unknown_exporter_is_an_input_error():
    import perfcast.torch as pt

    with pytest.raises(perfcast.InputError, match="exporter"):
        pt.trace(torch.nn.ReLU(), torch.randn(1, 4), exporter="jit")

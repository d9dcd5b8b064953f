"""The quickstart workflow from Python (the `train` feature) on a tiny sweep: it profiles,
trains, writes a bundle and predicts, and the bundle it wrote answers from Python too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import perfcast

# LeNet-5's kinds at toy sizes, timed briefly: seconds, not the quickstart's minutes.
SWEEP = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "tiny.toml"


# CI builds with the feature and sets PERFCAST_EXPECT_TRAIN, so a build without it fails there.
@pytest.mark.skipif(
    not hasattr(perfcast, "quickstart") and not os.environ.get("PERFCAST_EXPECT_TRAIN"),
    reason="built without the `train` feature",
)
def test_the_quickstart_runs_from_python_on_a_tiny_sweep(tmp_path):
    bundle = tmp_path / "bundle"
    report = perfcast.quickstart(
        str(tmp_path / "data"),
        bundle=str(bundle),
        samples=10,
        fast=True,
        budget_s=0.0,
        models=["ridge", "roofline"],
        networks=["lenet5"],
        sweep=str(SWEEP),
    )
    assert report["layers_timed"] is None and report["active_rounds"] == 0
    counts = report["sweeps"][0]["kinds"]
    assert sorted(counts) == ["avgpool2d", "conv2d", "linear", "tanh"]
    assert all(c["measured"] > 0 for c in counts.values())
    assert [(n[0], n[1]) for n in report["networks"]] == [("lenet5", 1), ("lenet5", 8)]
    for _, _, inference_ms, training_ms in report["networks"]:
        assert 0 < inference_ms < training_ms
    # The bundle it wrote answers as the report says.
    forward = perfcast.load_bundle(str(bundle)).predict_network("lenet5", batch=1)
    assert forward.total_ms == pytest.approx(report["networks"][0][2])

    with pytest.raises(perfcast.InputError, match="at least 10"):
        perfcast.quickstart(str(tmp_path / "data"), samples=9)

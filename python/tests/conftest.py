"""Shared fixtures: the repository's GPU bundle and the `perfcast` binary to compare with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_BUNDLE = REPO / "checkpoints" / "gpu"


def _binary() -> Path | None:
    given = os.environ.get("PERFCAST_BIN")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    candidates = [t / "release" / name for t in (target, REPO / "target") for name in ("perfcast", "perfcast-under-test")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    found = shutil.which("perfcast")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def cli():
    """Runs the perfcast binary and returns its parsed JSON output."""
    binary = _binary()
    if binary is None:
        pytest.skip("no perfcast binary: build it (cargo build --release) or set PERFCAST_BIN")

    def run(*args: str) -> dict:
        out = subprocess.run(
            [str(binary), "--no-progress", *args], capture_output=True, text=True, cwd=REPO
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    return run


@pytest.fixture(scope="session")
def gpu_bundle():
    import perfcast

    return perfcast.load_bundle(GPU_BUNDLE, device="a100")

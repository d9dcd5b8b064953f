"""perfcast: predict how long DNN layers and whole networks take on a CPU or GPU, without
running them.

A bundle (``checkpoints/<name>/``, written by ``perfcast quickstart`` or ``perfcast train``)
holds one trained model per module kind. Load it once and ask::

    import perfcast
    bundle = perfcast.load_bundle("checkpoints/gpu", device="a100")
    bundle.predict({"kind": "linear", "in_features": 4096, "out_features": 4096}, batch=64)
    bundle.predict_network("resnet50", batch=32).total_ms

Every answer is the one ``perfcast predict --format json`` gives for the same bundle, to the
bit: the same Rust predictor answers, with the GIL released while it runs.
"""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _perfcast
from ._perfcast import (
    BundleError,
    Error,
    InputError,
    NetworkGraph,
    config_columns,
    describe,
    devices,
    zoo_names,
)

__version__: str = _perfcast.__version__

# Built with the `train` feature (docs/python.md): the quickstart workflow, as the CLI runs it.
if hasattr(_perfcast, "quickstart"):
    quickstart = _perfcast.quickstart

__all__ = [
    "Bundle",
    "BundleError",
    "Error",
    "InputError",
    "NetworkGraph",
    "NetworkPrediction",
    "config_columns",
    "describe",
    "devices",
    "load_bundle",
    "network",
    "zoo_names",
]

Device = Union[str, "os.PathLike[str]", Mapping[str, Any], None]
NetworkSource = Union[str, "os.PathLike[str]", bytes, Mapping[str, Any], NetworkGraph]

_PHASES = ("inference", "training")


def _check_phase(phase: str) -> str:
    if phase not in _PHASES:
        raise InputError(f"`phase` must be 'inference' or 'training', got {phase!r}")
    return phase


# The largest count (batch, threads, seq) the native side takes; past it is a typo, not a job.
_MAX_COUNT = 2**31 - 1


def _count(name: str, value: Any) -> int:
    """A positive whole number for `name`, or InputError naming the value (never the
    TypeError or OverflowError the native layer would raise)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"`{name}` must be a whole number, got {value!r}")
    if not 1 <= int(value) <= _MAX_COUNT:
        raise InputError(f"`{name}` must be between 1 and {_MAX_COUNT}, got {value!r}")
    return int(value)


def _device_arg(device: Device) -> Any:
    return os.fspath(device) if isinstance(device, os.PathLike) else device


def network(
    source: NetworkSource,
    *,
    seq: Optional[int] = None,
    phase: str = "inference",
    lm_head: Optional[bool] = None,
    inputs: Optional[Mapping[str, Sequence[int]]] = None,
    strict: bool = False,
    fuse_conv_bn: bool = False,
) -> NetworkGraph:
    """A network from any source perfcast reads.

    - a zoo name (``"resnet50"``, ``"vgg16@112"``: ``@`` gives the input resolution);
    - an ``.onnx`` path or ONNX bytes (``seq`` fixes symbolic sequence axes, ``inputs`` full
      input shapes by name; ``strict`` makes an op without a perfcast kind an error);
    - a Hugging Face style transformer ``config.json`` path or dict (needs ``seq``; a training
      ``phase`` builds the dropout layers);
    - perfcast's network JSON, as a path or a dict with ``layers``.
    """
    _check_phase(phase)
    if isinstance(source, NetworkGraph):
        return source
    if isinstance(source, (bytes, bytearray)):
        return _perfcast.onnx(bytes(source), seq, _inputs(inputs), strict, fuse_conv_bn)
    if isinstance(source, Mapping):
        if "layers" in source:
            return _perfcast.network_json(dict(source))
        return _transformer(dict(source), seq, lm_head, phase)
    text = os.fspath(source)
    if text.lower().endswith(".onnx"):
        return _perfcast.onnx(text, seq, _inputs(inputs), strict, fuse_conv_bn)
    if text.lower().endswith(".json"):
        try:
            with open(text, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            raise InputError(f"`{text}`: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"`{text}` is not JSON: {e}") from None
        if isinstance(doc, dict) and "layers" in doc:
            return _perfcast.network_json(doc)
        return _transformer(text, seq, lm_head, phase)
    return _perfcast.zoo(text)


def _inputs(inputs: Optional[Mapping[str, Sequence[int]]]) -> Optional[Dict[str, List[int]]]:
    return None if inputs is None else {k: [int(d) for d in v] for k, v in inputs.items()}


def _transformer(config: Any, seq: Optional[int], lm_head: Optional[bool], phase: str) -> NetworkGraph:
    if seq is None:
        raise InputError("a transformer config needs `seq`, the tokens per sample")
    return _perfcast.transformer(config, _count("seq", seq), lm_head, phase == "training")


class NetworkPrediction:
    """A network's predicted latency: the composed total and every layer.

    ``total_ms`` is the network's predicted time (the bundle's composed total when it is
    calibrated for the phase; a GPU training step adds its input copy and optimiser update from
    the device spec, ``composed["from_spec"]``; else the layer sum), ``layer_sum_ms`` the sum
    of the layers, ``roofline_ms`` the least time the device's spec allows for them,
    ``layers`` one row per layer (a pandas DataFrame when pandas is installed, else a list of
    dicts with ``name``, ``module``, ``kind``, ``ms``, ``model``, ``fallback``, ``warnings``).
    ``raw`` is the whole answer as ``perfcast predict --format json`` prints it.
    """

    def __init__(self, raw: Dict[str, Any], import_report: Optional[Dict[str, Any]]) -> None:
        self.raw = raw
        self.import_report = import_report
        self.network: str = raw["network"]
        self.total_ms: float = raw["total_ms"]
        self.layer_sum_ms: float = raw["layer_sum_ms"]
        self.roofline_ms: float = raw.get("roofline_ms", 0.0)
        self.fallback_layers: int = raw["fallback_layers"]
        self.composed: Optional[Dict[str, Any]] = raw.get("composed")
        #: The fusion policy, graph style, kernels and eager total; None for the eager graph.
        self.fusion: Optional[Dict[str, Any]] = raw.get("fusion")
        rows: List[Dict[str, Any]] = raw["layers"]
        try:
            import pandas as pd  # optional
        except ImportError:
            self.layers: Any = rows
        else:
            self.layers = pd.DataFrame(rows)

    def __repr__(self) -> str:
        return (
            f"NetworkPrediction({self.network!r}, total_ms={self.total_ms:.6g}, "
            f"layers={len(self.raw['layers'])}, fallback_layers={self.fallback_layers})"
        )


class Bundle:
    """A loaded predictor bundle. Thread-safe; predictions release the GIL."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], device: Device = None) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise InputError(f"a bundle path must be a string or a path, got {path!r}")
        self.path = Path(path)
        self._native = _perfcast.Bundle(os.fspath(path), _device_arg(device))
        manifest = self._native.manifest()
        self.manifest: Dict[str, Any] = manifest
        self.device: Dict[str, Any] = manifest["device"]
        self.kinds: List[str] = sorted(manifest["kinds"])

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, device={self.device['name']!r}, kinds={len(self.kinds)})"

    def predict(
        self,
        module: Mapping[str, Any],
        *,
        batch: int = 1,
        phase: str = "inference",
        threads: int = 1,
        utilisation: float = 0.0,
        device: Device = None,
    ) -> float:
        """One module's latency, ms. ``module`` is a dict such as
        ``{"kind": "conv2d", "in_channels": 64, "out_channels": 64, "input_hw": [56, 56],
        "kernel": 3, "padding": "same"}`` (the JSON of ``perfcast predict --modules-file``)."""
        # The common call (plain ints in range, a known phase, no device) skips the checks'
        # Python calls, which cost as much as the prediction.
        if (
            type(batch) is int
            and type(threads) is int
            and 1 <= batch <= _MAX_COUNT
            and 1 <= threads <= _MAX_COUNT
            and device is None
            and phase in _PHASES
        ):
            return self._native.predict(module, batch, phase, threads, utilisation, None)
        return self._native.predict(
            module, _count("batch", batch), _check_phase(phase), _count("threads", threads),
            utilisation, _device_arg(device)
        )

    def predict_detail(
        self,
        module: Mapping[str, Any],
        *,
        batch: int = 1,
        phase: str = "inference",
        threads: int = 1,
        utilisation: float = 0.0,
        device: Device = None,
    ) -> Dict[str, Any]:
        """One module's prediction with the model that answered, whether the spec roofline
        answered (``fallback``) and warnings (inputs outside the trained ranges)."""
        return self._native.predict_detail(
            module, _count("batch", batch), _check_phase(phase), _count("threads", threads),
            utilisation, _device_arg(device)
        )

    def predict_many(
        self,
        modules: Iterable[Mapping[str, Any]],
        *,
        batch: int = 1,
        phase: str = "inference",
        threads: int = 1,
        utilisation: float = 0.0,
        device: Device = None,
    ) -> np.ndarray:
        """Many modules' latencies, ms, in order. A module dict may carry its own ``batch``,
        ``phase`` and ``threads``; the keywords are the defaults."""
        out = self._native.predict_many(
            modules, _count("batch", batch), _check_phase(phase), _count("threads", threads),
            utilisation, _device_arg(device)
        )
        return np.frombuffer(out, dtype="<f8")

    def predict_columns(
        self,
        kind: str,
        *,
        batch: Union[int, np.ndarray] = 1,
        phase: str = "inference",
        threads: int = 1,
        utilisation: float = 0.0,
        device: Device = None,
        **columns: Any,
    ) -> np.ndarray:
        """N modules of one kind given as columns, for loops that score thousands of
        candidates: ``bundle.predict_columns("linear", in_features=a, out_features=b,
        batch=c)`` with arrays of N numbers (an N x D array for a list field such as
        ``shape``). Returns N latencies, ms."""
        cols = []
        for name, values in columns.items():
            a = np.asarray(values)
            if a.ndim not in (1, 2):
                raise InputError(f"column `{name}`: expected a 1-D or 2-D array, got {a.ndim} dimensions")
            if not np.issubdtype(a.dtype, np.number):
                raise InputError(f"column `{name}`: not a numeric array ({a.dtype})")
            width = a.shape[1] if a.ndim == 2 else 0
            cols.append((name, a.shape[0], width, np.ascontiguousarray(a, dtype="<f8").tobytes()))
        if np.ndim(batch) == 0:
            scalar, batches = _count("batch", batch), None
        else:
            scalar, batches = 1, np.ascontiguousarray(np.asarray(batch), dtype="<f8").tobytes()
        out = self._native.predict_columns(
            kind, cols, scalar, batches, _check_phase(phase), _count("threads", threads), utilisation,
            _device_arg(device)
        )
        return np.frombuffer(out, dtype="<f8")

    def predict_array(
        self,
        kind: str,
        config: Any,
        *,
        batch: Union[int, np.ndarray] = 1,
        phase: str = "inference",
        threads: int = 1,
        utilisation: float = 0.0,
        device: Device = None,
    ) -> np.ndarray:
        """N modules of one kind given as one N x C array of their configurations, each row
        the kind's :func:`config_columns` in order (whole numbers): the fastest batch entry,
        with no per-row dict. ``batch`` is one number or N of them. Returns N latencies, ms."""
        a = np.asarray(config)
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise InputError(f"`config`: expected an N x C array, got {a.ndim} dimensions")
        if not np.issubdtype(a.dtype, np.number):
            raise InputError(f"`config`: not a numeric array ({a.dtype})")
        if np.ndim(batch) == 0:
            scalar, batches = _count("batch", batch), None
        else:
            scalar, batches = 1, np.ascontiguousarray(np.asarray(batch), dtype="<f8").tobytes()
        out = self._native.predict_array(
            kind, a.shape[0], np.ascontiguousarray(a, dtype="<f8").tobytes(), scalar, batches,
            _check_phase(phase), _count("threads", threads), utilisation, _device_arg(device)
        )
        return np.frombuffer(out, dtype="<f8")

    def predict_network(
        self,
        network_or_source: NetworkSource,
        *,
        batch: int = 1,
        phase: str = "inference",
        threads: int = 1,
        seq: Optional[int] = None,
        device: Device = None,
        fusion: str = "none",
        **source_options: Any,
    ) -> NetworkPrediction:
        """A whole network's latency: a zoo name, an ONNX path or bytes, a transformer config
        (with ``seq``), perfcast's network JSON, or a :class:`NetworkGraph` (see
        :func:`network`). ``fusion`` (``none``, ``epilogue``, ``compile``, ``engine``,
        ``megatron``) predicts the kernels that policy fuses, as ``predict --fusion``."""
        graph = network(network_or_source, seq=seq, phase=phase, **source_options)
        report = graph.import_report
        raw = self._native.predict_network(
            graph, _count("batch", batch), phase, _count("threads", threads), _device_arg(device),
            fusion
        )
        return NetworkPrediction(raw, report)


def load_bundle(path: Union[str, "os.PathLike[str]"] = "checkpoints/local", device: Device = None) -> Bundle:
    """Loads a bundle directory; ``device`` (a known name such as ``"h100"``, a spec dict, or a
    spec JSON path) selects the target of a cross-device GPU bundle."""
    return Bundle(path, device)

"""PyTorch models in: ``perfcast.torch.trace(model, example_inputs)`` exports an ``nn.Module``
to ONNX in memory and imports the graph as perfcast modules (needs ``torch`` and ``onnx``).

The batch axis of every input is exported as symbolic, so the network is per sample and the
batch is ``predict_network(..., batch=N)``'s, as for any ONNX model.
"""

from __future__ import annotations

import io
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from . import InputError, NetworkGraph, _perfcast


def trace(
    model: Any,
    example_inputs: Union[Any, Tuple[Any, ...]],
    *,
    seq: Optional[int] = None,
    input_names: Optional[Sequence[str]] = None,
    opset: int = 17,
    strict: bool = False,
    inputs: Optional[Mapping[str, Sequence[int]]] = None,
    exporter: str = "auto",
) -> NetworkGraph:
    """The perfcast network of ``model`` run on ``example_inputs`` (a tensor or a tuple).

    ``exporter`` picks PyTorch's ONNX exporter: ``"legacy"`` (TorchScript, deprecated since
    PyTorch 2.9), ``"dynamo"`` (``torch.export``; needs ``onnxscript``) or ``"auto"``: the
    legacy one where this PyTorch still has it, else dynamo. Both give the same modules for
    common layers; dynamo's optimiser folds batch norms into convolutions in eval mode.
    """
    if exporter not in ("auto", "legacy", "dynamo"):
        raise InputError(f"`exporter` must be auto, legacy or dynamo, got {exporter!r}")
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise InputError("perfcast.torch.trace needs PyTorch: pip install torch onnx") from e
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    names = list(input_names or [f"input{i}" for i in range(len(args))])
    if len(names) != len(args):
        raise InputError(f"`input_names` has {len(names)} names for {len(args)} inputs")
    buffer = io.BytesIO()
    was_training = model.training
    model.eval()
    try:
        if exporter in ("auto", "legacy"):
            try:
                _export_legacy(torch, model, args, buffer, names, opset)
            except Exception:
                if exporter == "legacy":
                    raise
                buffer = io.BytesIO()
                exporter = "dynamo"
        if exporter == "dynamo":
            batch = torch.export.Dim("batch")
            torch.onnx.export(
                model,
                args,
                buffer,
                dynamo=True,
                input_names=names,
                opset_version=max(opset, 18),  # the dynamo exporter writes opset 18 or later
                dynamic_shapes=tuple({0: batch} for _ in args),
                verbose=False,
            )
    finally:
        model.train(was_training)
    shapes = None if inputs is None else {k: [int(d) for d in v] for k, v in inputs.items()}
    return _perfcast.onnx(buffer.getvalue(), seq, shapes, strict, False)


def _export_legacy(torch: Any, model: Any, args: Tuple[Any, ...], buffer: io.BytesIO,
                   names: Sequence[str], opset: int) -> None:
    """The TorchScript exporter, the batch axis of every input symbolic."""
    export = dict(
        input_names=list(names),
        dynamic_axes={n: {0: "batch"} for n in names},
        opset_version=opset,
    )
    try:
        torch.onnx.export(model, args, buffer, dynamo=False, **export)
    except TypeError:  # torch < 2.5 has no `dynamo` argument
        torch.onnx.export(model, args, buffer, **export)

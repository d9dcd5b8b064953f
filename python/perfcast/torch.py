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
) -> NetworkGraph:
    """The perfcast network of ``model`` run on ``example_inputs`` (a tensor or a tuple)."""
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
        export = dict(
            input_names=names,
            dynamic_axes={n: {0: "batch"} for n in names},
            opset_version=opset,
        )
        try:
            torch.onnx.export(model, args, buffer, dynamo=False, **export)
        except TypeError:  # torch < 2.5 has no `dynamo` argument
            torch.onnx.export(model, args, buffer, **export)
    finally:
        model.train(was_training)
    shapes = None if inputs is None else {k: [int(d) for d in v] for k, v in inputs.items()}
    return _perfcast.onnx(buffer.getvalue(), seq, shapes, strict, False)

"""channels_last (NHWC) layout for conv nets: 4-D weights and the model's 4-D inputs.

Conv kernels in oneDNN (CPU) and cuDNN (tensor cores) are written for NHWC; with NCHW
tensors they convert layouts around every conv. The weights are converted in place
(same ``Parameter`` objects, so the optimizer keeps them) and a forward pre-hook on the
model converts 4-D floating inputs, so the first conv already sees NHWC. Values never
change, only strides, so outputs equal the NCHW model's up to kernel summation order.

Example::

    change = apply_memory_format(resnet, MemoryFormat(channels_last=True))
    resnet(images)        # images converted by the pre-hook
    change.revert()       # weights contiguous (NCHW) again, hook removed
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchsmith.plan import MemoryFormat
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied

_CONVS = (nn.Conv2d, nn.ConvTranspose2d)


def _to_channels_last(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
        return x.contiguous(memory_format=torch.channels_last)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_channels_last(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_channels_last(v) for k, v in x.items()}
    return x


def _restrided(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """The current values (training may have changed them) in the original strides."""
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _input_hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return _to_channels_last(args), _to_channels_last(kwargs)


def apply_memory_format(model: nn.Module, cfg: MemoryFormat) -> Change:
    """Convert ``model``'s 4-D parameters and buffers, and its 4-D inputs, to channels_last.

    >>> m = nn.Sequential(nn.Conv2d(3, 8, 3))
    >>> change = apply_memory_format(m, MemoryFormat(channels_last=True))
    >>> m[0].weight.is_contiguous(memory_format=torch.channels_last)
    True
    """
    change = Change("memory_format", "layout as written (NCHW)")
    if not cfg.channels_last:
        return change
    convs = [name for name, m in model.named_modules() if isinstance(m, _CONVS)]
    if not convs:
        kinds = sorted({type(m).__name__ for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv3d))})
        raise TransformError(
            f"channels_last is a layout for 4-D conv activations, and {type(model).__name__} has no "
            f"Conv2d/ConvTranspose2d (found {', '.join(kinds) or 'no convolutions at all'}).\n"
            "Tip: leave memory_format.channels_last off for this model; it would only add layout copies."
        )
    mark_applied(model, "memory_format", change)
    tensors = [t for t in list(model.parameters()) + list(model.buffers()) if t.dim() == 4]
    for t in tensors:
        stride = t.stride()
        # In place on .data: the Parameter object (held by the optimizer) stays the same.
        t.data = t.data.contiguous(memory_format=torch.channels_last)
        change.on_revert(lambda t=t, stride=stride: setattr(t, "data", _restrided(t.data, stride)))  # type: ignore[misc]  # mypy cannot infer lambdas with default args
    handle = model.register_forward_pre_hook(_input_hook, with_kwargs=True)
    change.on_revert(handle.remove)
    change.targets.extend(convs)
    change.summary = f"channels_last for {len(tensors)} 4-D weights ({len(convs)} convs) and 4-D inputs"
    return change


def _candidates(device: DeviceInfo) -> list[MemoryFormat]:
    return [MemoryFormat(channels_last=True)]


INFO = TransformInfo(
    name="memory_format",
    plan_field="memory_format",
    summary="channels_last (NHWC) layout for conv weights and inputs.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 6,
)

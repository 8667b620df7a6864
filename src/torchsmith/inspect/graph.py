"""Output shapes per module: ``torch.fx`` symbolic tracing with ShapeProp, or forward hooks.

Symbolic tracing runs ``forward`` on Proxy objects, so it fails on data-dependent
Python control flow (``if T > block_size:``) or on unpacking a shape. Such models fall
back to forward hooks, which see only module boundaries, not every op. The result says
which method was used and, for a fallback, why tracing failed.

Example::

    args, kwargs = capture_inputs(model, loss_fn, batch)
    info = trace_shapes(model, args, kwargs)
    info.method, info.module_shapes["blocks.0"]      # ('fx', '(256, 256)')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from torchsmith.text import first_line


@dataclass(frozen=True)
class NodeInfo:
    """One node of a traced graph (``inspect``'s fx trace, ``debug graph``'s fx or export trace)."""

    name: str
    op: str
    """fx opcode: placeholder, call_module, call_function, call_method, get_attr, output."""
    target: str
    shapes: list[list[int]]
    """Shapes of the tensors the node outputs; empty when its value is not a tensor."""
    dtype: str | None
    module: str = ""
    """Qualified name of the module the node belongs to ("" = the root), where the trace knows it."""
    flops: int = 0
    """FLOPs of the node's forward, where they were counted."""

    @property
    def shape(self) -> str | None:
        """The first output's shape as text, e.g. ``(16, 128, 256)``; None for a non-tensor."""
        return str(tuple(self.shapes[0])) if self.shapes else None


@dataclass(frozen=True)
class GraphInfo:
    method: Literal["fx", "hooks"]
    note: str
    """What was traced, or why tracing failed and hooks were used instead."""
    module_shapes: dict[str, str] = field(default_factory=dict)
    """Output shape per module path (``named_modules`` keys), for every module that ran;
    with fx, leaf modules' shapes come from ShapeProp."""
    nodes: list[NodeInfo] = field(default_factory=list)
    """Every fx node in order (empty with hooks)."""


def capture_inputs(model: nn.Module, loss_fn: Callable[[nn.Module, Any], Any], batch: Any) -> tuple[tuple, dict]:
    """The positional and keyword arguments ``loss_fn`` passes to ``model``, recorded by a pre-hook.

    A workload only says ``loss(model, batch)``; what the model itself receives is whatever
    the loss function hands it, so it is observed rather than guessed.
    """
    seen: list[tuple[tuple, dict]] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not seen:
            seen.append((args, kwargs))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            loss_fn(model, batch)
    finally:
        handle.remove()
    if not seen:
        raise ValueError(
            f"the workload's loss function never called the model ({type(model).__name__}.forward did not run).\n"
            "Tip: loss(model, batch) must run the forward pass as model(...)."
        )
    return seen[0]


def _shape(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, torch.Tensor):
        return str(tuple(value.shape)), str(value.dtype).removeprefix("torch.")
    return None, None


def trace_shapes(model: nn.Module, args: tuple, kwargs: dict) -> GraphInfo:
    """Output shapes per module via fx + ShapeProp, falling back to forward hooks."""
    from torch.fx.passes.shape_prop import ShapeProp

    reason = None
    if kwargs:
        reason = f"the model is called with keyword arguments ({', '.join(kwargs)}), which ShapeProp cannot feed"
    else:
        try:
            gm = torch.fx.symbolic_trace(model)
        except Exception as err:  # TraceError, TypeError from Proxy iteration, ...
            reason = (f"torch.fx.symbolic_trace failed: {type(err).__name__}: {first_line(str(err))}"
                      f"{_where(err)}")
    if reason is not None:
        shapes = _hook_shapes(model, args, kwargs)
        return GraphInfo("hooks", f"{reason}; output shapes come from forward hooks on module boundaries.", shapes)
    with torch.no_grad():
        ShapeProp(gm).propagate(*args)
    # fx inlines user-defined modules (only leaves become call_module nodes): hooks fill those in.
    nodes, shapes = [], _hook_shapes(model, args, kwargs)
    for node in gm.graph.nodes:
        meta = node.meta.get("tensor_meta")
        dtype = str(meta.dtype).removeprefix("torch.") if hasattr(meta, "dtype") else None
        target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
        info = NodeInfo(node.name, node.op, target, [list(meta.shape)] if hasattr(meta, "shape") else [], dtype)
        nodes.append(info)
        if node.op == "call_module" and info.shape is not None:
            shapes[node.target] = info.shape
    calls = sum(n.op.startswith("call_") for n in nodes)
    return GraphInfo("fx", f"torch.fx symbolic trace: {len(nodes)} nodes ({calls} calls), shapes from ShapeProp.",
                     shapes, nodes)


def _where(err: BaseException) -> str:
    """' at file.py:123 (`source line`)': the last frame of the model's own code, not torch's."""
    import os
    import traceback

    torch_dir = os.path.dirname(torch.__file__)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(torch_dir)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {os.path.basename(f.filename)}:{f.lineno} (`{(f.line or '').strip()}`)"


def _hook_shapes(model: nn.Module, args: tuple, kwargs: dict) -> dict[str, str]:
    shapes: dict[str, str] = {}
    handles = []
    for name, module in model.named_modules():
        def hook(mod: nn.Module, inputs: Any, output: Any, name: str = name) -> None:
            shape, _ = _shape(output[0] if isinstance(output, (tuple, list)) and output else output)
            if shape is not None:
                shapes.setdefault(name, shape)  # first call: a module reused per step keeps one shape
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return shapes

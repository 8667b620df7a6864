"""In-place activation modules (``nn.ReLU(inplace=True)`` and kin), only where provably safe.

An in-place activation overwrites its input instead of allocating an output: one
activation-sized buffer less while it runs. That lowers the forward peak only when the peak is
reached at that activation (measured: a conv-BN-ReLU stem's peak falls by exactly the ReLU
output); elsewhere it saves a transient and allocator traffic, not peak memory. It is safe only when

1. nothing else reads the input afterwards (else the forward itself changes, silently), and
2. the op that produced the input does not need it for its own backward.

Both are checked on a ``torch.fx`` symbolic trace of the model: the activation's input must
have the activation as its only user, and its producer must be a conv, linear or norm module
or an add (these save their inputs, never their outputs). Activations that fail the check are
left as written; a model that cannot be traced is refused, since safety cannot be shown.

What it does *not* do: lower the bytes saved for backward. A ReLU saves its output either
way; in place, that output simply lives in the producer's buffer.

Example::

    change = apply_inplace(resnet, InPlace(activations=True))
    change.targets      # ['stem.2']
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import torch
from torch import fx, nn

from torchsmith.plan import InPlace
from torchsmith.text import first_line
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied

# Activation modules with an `inplace` flag.
ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.CELU, nn.SELU, nn.SiLU, nn.Hardswish,
               nn.Hardsigmoid, nn.Hardtanh, nn.Mish, nn.Threshold, nn.RReLU)
# Producers whose backward reads their inputs and parameters, not their output.
SAFE_PRODUCERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.BatchNorm1d, nn.BatchNorm2d,
                  nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)
SAFE_FUNCTIONS = (operator.add, torch.add)


def _safe_targets(model: nn.Module, candidates: Mapping[str, nn.Module]) -> tuple[list[str], dict[str, str]]:
    """Names of candidate activations that are safe to run in place, and why the others are not."""
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception as err:  # fx raises many types (TraceError, TypeError on proxies, ...)
        raise TransformError(
            f"in-place activations need proof that no one else reads an activation's input, taken from a "
            f"torch.fx trace; {type(model).__name__} cannot be traced ({type(err).__name__}: "
            f"{first_line(err)[:160]}).\n"
            "Tip: set inplace=True on the activation modules yourself where you know it is safe, or leave it off."
        ) from None
    modules = dict(model.named_modules())
    safe, why_not = [], {}
    for node in graph.nodes:
        if node.op != "call_module" or node.target not in candidates:
            continue
        source = node.args[0] if node.args else None
        if not isinstance(source, fx.Node):
            why_not[node.target] = "its input is not a tensor from the graph"
        elif len(source.users) != 1:
            why_not[node.target] = f"its input is also read by {len(source.users) - 1} other op(s)"
        elif source.op == "call_module" and isinstance(modules.get(source.target), SAFE_PRODUCERS):
            safe.append(node.target)
        elif source.op == "call_function" and source.target in SAFE_FUNCTIONS:
            safe.append(node.target)
        else:
            why_not[node.target] = f"its producer ({source.op} {source.target}) may need it for backward"
    return safe, why_not


def apply_inplace(model: nn.Module, cfg: InPlace) -> Change:
    """Set ``inplace=True`` on activation modules where autograd and the forward allow it.

    >>> m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    >>> apply_inplace(m, InPlace(activations=True)).targets
    ['1']
    """
    change = Change("inplace", "activations allocate their outputs, as written")
    if not cfg.activations:
        return change
    candidates = {n: m for n, m in model.named_modules() if isinstance(m, ACTIVATIONS) and not m.inplace}
    if not candidates:
        others = sorted({type(m).__name__ for m in model.modules()
                         if type(m).__module__.startswith("torch.nn.modules.activation")})
        raise TransformError(
            f"no activation module of {type(model).__name__} can run in place: in-place forms exist for "
            f"ReLU, LeakyReLU, SiLU, ELU, Hardswish and kin, and this model has "
            f"{', '.join(others) or 'no activation modules'} (functional calls such as F.relu are not modules).\n"
            "Tip: leave inplace off; GELU, for instance, has no in-place form in PyTorch."
        )
    safe, why_not = _safe_targets(model, candidates)
    if not safe:
        reasons = "; ".join(f"{n}: {r}" for n, r in sorted(why_not.items())[:4])
        raise TransformError(
            f"none of the {len(candidates)} activation modules can safely run in place ({reasons}).\n"
            "Tip: leave inplace off for this model."
        )
    mark_applied(model, "inplace", change)
    for name in safe:
        module = candidates[name]
        module.inplace = True
        change.on_revert(lambda m=module: setattr(m, "inplace", False))  # type: ignore[misc]  # mypy cannot infer lambdas with default args
        change.targets.append(name)
    skipped = f"; {len(why_not)} left as written (unsafe)" if why_not else ""
    change.summary = f"{len(safe)} activation(s) in place{skipped}"
    return change


def _candidates(device: DeviceInfo) -> list[InPlace]:
    return [InPlace(activations=True)]


INFO = TransformInfo(
    name="inplace",
    plan_field="inplace",
    summary="In-place activation modules where an fx trace shows it is safe (lower forward peak).",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 6,
)

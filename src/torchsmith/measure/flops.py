"""FLOPs of a callable, split into forward and backward, via ``FlopCounterMode``.

``FlopCounterMode`` counts the ops it has formulas for (matmuls, convolutions,
attention): the ops that dominate a training step's arithmetic. Elementwise ops,
reductions and the optimizer count zero, so the figure is the one MFU conventionally
uses. One multiply-add counts as 2 FLOPs.

The split needs no change to the callable: each counted op is attributed to backward
when it runs inside an autograd graph task (``loss.backward()``,
``torch.autograd.grad``), to forward otherwise.

Example::

    def step():
        loss_fn(model(x), y).backward()

    stats = count_flops(step)
    stats.forward, stats.backward, stats.by_module
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from torchsmith.torch_compat import in_backward

__all__ = ["FlopStats", "count_flops"]


@dataclass(frozen=True, kw_only=True)
class FlopStats:
    """FLOPs counted while running a callable once."""

    total: int
    """All counted FLOPs; equals ``forward + backward``."""
    forward: int
    """FLOPs of ops run outside backward."""
    backward: int
    """FLOPs of ops run by the autograd engine (``backward()`` or ``autograd.grad``)."""
    by_module: dict[str, int]
    """FLOPs (forward + backward) per module. With ``model`` given, keyed by its
    ``named_modules`` paths (``""`` is the root, as in :mod:`torchsmith.measure.saved`);
    otherwise as ``FlopCounterMode`` names them: the outermost module by its class
    name, submodules by dotted path under it (``"GPT.blocks.0.attn"``). A module's
    figure includes its submodules', so the values overlap and do not sum to ``total``."""


def _in_backward() -> bool:
    return in_backward()


def _by_model_path(
    counter: FlopCounterMode, model: nn.Module, by_name: dict[str, int]
) -> dict[str, int]:
    # The tracker names modules by where it first met them, not by their path in
    # `model`; its module -> name table translates. It is private, so if a torch
    # release renames it, keep the tracker's names rather than fail.
    known = getattr(counter.mod_tracker, "_known_modules", None)
    if known is None:
        return by_name
    paths: dict[str, int] = {}
    for path, module in model.named_modules():
        name = known.get(module)
        if name is not None and name in by_name:
            paths[path] = by_name[name]
    return paths


def count_flops(fn: Callable[..., Any], *args: Any, model: nn.Module | None = None) -> FlopStats:
    """Run ``fn(*args)`` once and count its FLOPs.

    ``fn`` may run forward only, or forward and backward. It runs eagerly: under a
    dispatch mode, ``torch.compile`` skips compilation, which leaves the math and
    therefore the count unchanged. Pass ``model`` to key ``by_module`` by its module
    paths; modules of ``model`` that ran no counted op are absent.

    Example::

        >>> layer = nn.Linear(64, 32)
        >>> x = torch.randn(8, 64, requires_grad=True)
        >>> stats = count_flops(lambda: layer(x).sum().backward())
        >>> stats.forward, stats.backward  # 2*B*in*out, then 2x that for d_input and d_weight
        (32768, 65536)
    """
    split = {"forward": 0, "backward": 0}

    def attributed(formula: Callable[..., int]) -> Callable[..., int]:
        def counted(*a: Any, out_val: Any = None, **kw: Any) -> int:
            flops = formula(*a, out_val=out_val, **kw)
            split["backward" if _in_backward() else "forward"] += flops
            return flops

        # The registry's formulas already take raw args; tell FlopCounterMode not to
        # wrap them again.
        counted._get_raw = True  # type: ignore[attr-defined]
        return counted

    mapping = {op: attributed(formula) for op, formula in flop_registry.items()}
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        fn(*args)
    counts = counter.get_flop_counts()
    total = sum(counts.get("Global", {}).values())
    by_module = {name: sum(ops.values()) for name, ops in counts.items() if name != "Global"}
    if model is not None:
        by_module = _by_model_path(counter, model, by_module)
    return FlopStats(
        total=total, forward=split["forward"], backward=split["backward"], by_module=by_module
    )

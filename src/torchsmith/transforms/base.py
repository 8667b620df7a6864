"""What every transform shares: the Change it returns and the metadata it registers.

A transform is a function ``apply_x(target, cfg) -> Change``. The :class:`Change` says
exactly what was done (modules wrapped, hooks installed, global flags set) and can undo
it. Applying a transform twice to the same model is refused, never a double wrap.

Each transform module also registers a :class:`TransformInfo`: the plan field it drives,
the devices it applies to, and the candidate values ``tune`` should try. ``tune`` and
the docs read this registry; nothing else enumerates transforms by hand.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from torch import nn


class TransformError(ValueError):
    """A transform that cannot apply here. The message says why and what to do instead."""


@dataclass
class Change:
    """A record of one applied transform, with the means to revert it."""

    name: str
    summary: str
    """What was done, in words, e.g. 'wrapped 4 blocks in checkpoint()'."""
    targets: list[str] = field(default_factory=list)
    """Qualified names of the modules touched, or names of global settings."""
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def on_revert(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def revert(self) -> None:
        """Undo in reverse order of application. Reverting twice does nothing."""
        while self._undo:
            self._undo.pop()()


_APPLIED_ATTR = "_torchsmith_applied"


def mark_applied(model: nn.Module, name: str, change: Change) -> None:
    """Refuse a second application of ``name`` to ``model``; forget it again on revert."""
    applied: set[str] = model.__dict__.setdefault(_APPLIED_ATTR, set())
    if name in applied:
        raise TransformError(
            f"{name} is already applied to this {type(model).__name__}; applying it twice would wrap twice.\n"
            "Tip: revert the first Change (change.revert()) or start from a fresh model."
        )
    applied.add(name)

    def forget() -> None:
        applied.discard(name)
        if not applied:  # leave no trace: a reverted model is structurally the one we were given
            model.__dict__.pop(_APPLIED_ATTR, None)

    change.on_revert(forget)


@dataclass(frozen=True)
class DeviceInfo:
    """What tune needs to know about the device to choose candidates."""

    type: str  # "cpu" | "cuda"
    cores: int = 1
    native_bf16: bool = False


@dataclass(frozen=True)
class TransformInfo:
    """Registry entry: drives ``Plan.<plan_field>`` and proposes candidate values for it."""

    name: str
    plan_field: str
    summary: str
    devices: frozenset[str]
    candidates: Callable[[DeviceInfo], Sequence[Any]]
    """Values of ``Plan.<plan_field>`` worth trying on this device (the baseline value excluded)."""
    companions: Callable[[DeviceInfo, Any], Sequence[dict[str, Any]]] = lambda device, value: ()
    """Changes to other plan fields worth trying together with a candidate ``value``, each as
    one more candidate: a change that pays only in company (DataLoader workers with fewer
    trainer threads on CPU), which a search over one knob at a time would never try."""


_REGISTRY: dict[str, TransformInfo] = {}


def register(info: TransformInfo) -> TransformInfo:
    _REGISTRY[info.name] = info
    return info


def registered_transforms() -> dict[str, TransformInfo]:
    """All transforms, importing every module of this package once so each registers itself."""
    import torchsmith.transforms as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return dict(_REGISTRY)

"""What every transform shares: the Change it returns and the metadata it registers.

A transform is a function ``apply_x(target, cfg) -> Change``. The :class:`Change` says
exactly what was done (modules wrapped, hooks installed, global flags set) and can undo
it. Applying a transform twice to the same model is refused, never a double wrap.

Each transform module also defines a :class:`TransformInfo` as ``INFO``: the plan field it
drives, the devices it applies to, the candidate values ``tune`` should try, what it trades
and where it goes in the search. ``engine.registry`` lists them; ``tune`` and the docs read
that list and nothing else enumerates transforms by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
    threads_as_written: int | None = None
    """Intra-op threads the code runs with as written; None: this process's current count. A script
    tuned from outside runs in a fresh process, with PyTorch's default instead."""
    ranks: int = 1
    """Processes the job trains on (``--nproc-per-node``): the parallel strategy is searched above 1."""


Trade = Literal["speed", "memory"]


@dataclass(frozen=True, kw_only=True)
class TransformInfo:
    """Registry entry: drives ``Plan.<plan_field>`` and proposes candidate values for it.

    Each transform module defines one as ``INFO``; ``engine.registry.TRANSFORMS`` lists them
    all, explicitly. ``tune`` builds its search space from these fields alone: adding a knob
    is one transform module and one line in that list.
    """

    name: str
    plan_field: str
    summary: str
    devices: frozenset[str]
    candidates: Callable[[DeviceInfo], Sequence[Any]]
    """Values of ``Plan.<plan_field>`` worth trying on this device (the baseline value excluded)."""
    trade: Trade
    """What the knob buys. "speed" knobs are always searched; "memory" knobs cost speed and are
    searched only when the best plan breaks the memory limit."""
    rank: Callable[[DeviceInfo], int]
    """Position in the search on this device, lowest first: the knobs that can pay most here and
    cost least to measure go first (bf16 and compile lead on CPUs with native bf16 and on GPUs),
    so a budget that runs out leaves the least promising knobs unsearched."""
    setup_seconds: float = 0.0
    """One-off cost per candidate before its first timed step (compilation), set aside from the
    budget before the candidate is measured."""
    companions: Callable[[DeviceInfo, Any], Sequence[dict[str, Any]]] = lambda device, value: ()
    """Changes to other plan fields worth trying together with a candidate ``value``, each as
    one more candidate: a change that pays only in company (DataLoader workers with fewer
    trainer threads on CPU), which a search over one knob at a time would never try."""

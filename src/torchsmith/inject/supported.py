"""What a plan applied to an unmodified script from outside can hold."""

from __future__ import annotations

from torchsmith.inject.ddp import strategy_refusal
from torchsmith.plan import DDP, Autocast, Plan, Single

UNSUPPORTED_FIELDS = ("microbatching", "parallel", "nonfinite", "auto_microbatch", "saved_tensors",
                      "memory_format", "inplace", "loss_impl")
"""Plan fields the injection cannot apply to a script (they need the step built by torchsmith).
``parallel`` is the exception when it is a ``DDP``: its knobs go into the script's own
DistributedDataParallel (:mod:`torchsmith.inject.ddp`)."""


def unsupported_knobs(plan: Plan) -> list[str]:
    """Fields of ``plan`` that differ from as written but cannot be applied to a script."""
    base = Plan()
    return [f for f in UNSUPPORTED_FIELDS if getattr(plan, f) != getattr(base, f) and not _script_ddp(plan, f)] + (
        ["precision"] if not isinstance(plan.precision, (type(base.precision), Autocast)) else [])


def strategy_note(plan: Plan) -> str:
    """For a plan whose strategy is not DDP: the script owns its strategy (empty for DDP or none)."""
    if isinstance(plan.parallel, (Single, DDP)):
        return ""
    return f" {strategy_refusal(plan.parallel)}."


def _script_ddp(plan: Plan, field: str) -> bool:
    return field == "parallel" and isinstance(plan.parallel, DDP)

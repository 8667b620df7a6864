"""What a plan applied to an unmodified script from outside can hold."""

from __future__ import annotations

from torchsmith.plan import Autocast, Plan

UNSUPPORTED_FIELDS = ("microbatching", "parallel", "nonfinite", "auto_microbatch", "saved_tensors",
                      "memory_format", "inplace", "loss_impl")
"""Plan fields the injection cannot apply to a script (they need the step built by torchsmith)."""


def unsupported_knobs(plan: Plan) -> list[str]:
    """Fields of ``plan`` that differ from as written but cannot be applied to a script."""
    base = Plan()
    return [f for f in UNSUPPORTED_FIELDS if getattr(plan, f) != getattr(base, f)] + (
        ["precision"] if not isinstance(plan.precision, (type(base.precision), Autocast)) else [])

"""Apply a plan's transforms in one fixed, readable order."""

from __future__ import annotations

from torchsmith.debug.nan_sentinel import apply_nonfinite
from torchsmith.debug.oom import apply_auto_microbatch
from torchsmith.dist.strategy import apply_parallel
from torchsmith.engine.parts import StepParts
from torchsmith.plan import Plan
from torchsmith.transforms.base import Change
from torchsmith.transforms.compile import apply_compile
from torchsmith.transforms.microbatching import apply_microbatching
from torchsmith.transforms.optimizer_impl import apply_optimizer_impl
from torchsmith.transforms.precision import apply_precision
from torchsmith.transforms.threads import apply_threads


def apply_plan(plan: Plan, parts: StepParts) -> list[Change]:
    """Apply every transform of ``plan`` to ``parts``; on failure, revert what was applied.

    The order matters:
    1. threads first: every later op, compilation included, runs on the chosen pools;
    2. precision and micro-batching only set fields of the step, so they commute;
    3. compile last among model transforms: it must trace the final module structure
       (memory layout and activation checkpointing change what is traced);
    4. the optimizer implementation is independent of the model's structure;
    5. the distributed wrap (DDP, ZeRO-1, FSDP2) last: it hooks the final module (after
       compile) and ZeRO-1 replaces the optimizer configured in 4.
    """
    changes: list[Change] = []
    steps = [
        lambda: apply_threads(plan.threads),
        lambda: apply_precision(parts, plan.precision),
        lambda: apply_microbatching(parts, plan.microbatching),
        lambda: apply_compile(parts.model, plan.compile),
        lambda: apply_optimizer_impl(parts.optimizer, plan.optimizer),
        lambda: apply_nonfinite(parts, plan.nonfinite),  # debug guards only set fields of the step
        lambda: apply_auto_microbatch(parts, plan.auto_microbatch),
        lambda: apply_parallel(parts, plan.parallel),
    ]
    parts.set_to_none = plan.optimizer.set_to_none
    try:
        for apply in steps:
            changes.append(apply())
    except Exception:
        for change in reversed(changes):
            change.revert()
        raise
    return changes

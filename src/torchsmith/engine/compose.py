"""Apply a plan's transforms in one fixed, readable order."""

from __future__ import annotations

from torchsmith.distributed.strategy import apply_parallel
from torchsmith.engine.auto_microbatch import apply_auto_microbatch
from torchsmith.engine.nonfinite import apply_nonfinite
from torchsmith.plan import Plan
from torchsmith.transforms.activation_checkpoint import apply_checkpointing
from torchsmith.transforms.base import Change
from torchsmith.transforms.compile import apply_compile
from torchsmith.transforms.inplace import apply_inplace
from torchsmith.transforms.loss_impl import apply_loss_impl
from torchsmith.transforms.memory_format import apply_memory_format
from torchsmith.transforms.microbatching import apply_microbatching
from torchsmith.transforms.optimizer_impl import apply_optimizer_impl
from torchsmith.transforms.parts import StepParts
from torchsmith.transforms.precision import apply_precision
from torchsmith.transforms.saved_tensors import apply_saved_tensors
from torchsmith.transforms.threads import apply_threads


def apply_plan(plan: Plan, parts: StepParts) -> list[Change]:
    """Apply every transform of ``plan`` to ``parts``; on failure, revert what was applied.

    The order matters:
    1. threads first: every later op, compilation included, runs on the chosen pools;
    2. memory layout -> in-place activations -> activation checkpointing -> saved-tensor policy:
       the layout goes before anything copies weights (bf16 parameters inherit channels_last);
       in-place safety is proven on an fx trace of the model as written, which checkpointing's
       patched forwards would hide; saved-tensor hooks do not nest, so inside a checkpointed
       block checkpointing's own hooks win and the policy covers the rest of the model;
    3. precision and micro-batching set fields of the step (bf16 parameters also swap the
       Linear/Conv weights for bf16 copies and hook their forwards); they commute; so does the
       chunked loss (loss_impl), which sets the step's loss and reads the head's current weight;
    4. compile last among model transforms: it must trace the final module structure
       (layout, checkpointed forwards, precision hooks); its eager fallback joins parts.recover;
    5. the optimizer implementation is independent of the model's structure;
    6. the distributed wrap (DDP, ZeRO-1, FSDP2) last: it hooks the final module (after
       compile) and ZeRO-1 replaces the optimizer configured in 5.
    """
    changes: list[Change] = []
    steps = [
        lambda: apply_threads(plan.threads),
        lambda: apply_memory_format(parts.model, plan.memory_format),
        lambda: apply_inplace(parts.model, plan.inplace),
        lambda: apply_checkpointing(parts.model, plan.checkpointing),
        lambda: apply_saved_tensors(parts, plan.saved_tensors),
        lambda: apply_precision(parts, plan.precision),
        lambda: apply_microbatching(parts, plan.microbatching),
        lambda: apply_loss_impl(parts, plan.loss_impl),  # swaps lm_head's forward: before compile traces it
        lambda: apply_compile(parts.model, plan.compile, recover=parts.recover),
        lambda: apply_optimizer_impl(parts.optimizer, plan.optimizer),
        lambda: apply_nonfinite(parts, plan.nonfinite),  # step policies: they only set fields of the step
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

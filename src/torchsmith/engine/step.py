"""The training step, and ``prepare`` which builds it from a plan.

``train_step`` is one plain function that reads top to bottom. Transforms never wrap
it; they set fields of :class:`StepParts` (autocast, scaler, micro-batches) or change
the model and optimizer in place, in the fixed order of ``apply_plan``.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from typing import Any

import torch
from torch import nn

from torchsmith.batch import batch_len, split_batch, to_device
from torchsmith.engine.auto_microbatch import next_microbatches
from torchsmith.engine.compose import apply_plan
from torchsmith.measure.oom import attach_explanation, is_oom
from torchsmith.measure.timing import PhaseTimer
from torchsmith.plan import Plan
from torchsmith.transforms.base import Change
from torchsmith.transforms.parts import LossFn, StepParts
from torchsmith.workload import check_scalar_loss


def train_step(parts: StepParts, batch: Any, timer: PhaseTimer | None = None) -> torch.Tensor:
    """Forward, loss, backward and optimizer step on one batch; returns the detached loss.

    The loss is returned as a tensor, not a float: ``.item()`` would be a CPU-GPU sync
    point on every step.
    """
    timer = timer or _NULL_TIMER
    if parts.nonfinite is not None:
        parts.nonfinite.start()  # RNG snapshot: a non-finite step is replayed op by op to name the culprit
    loss_sum = _forward_backward(parts, batch, timer)
    with timer.phase("optimizer"):
        if parts.nonfinite is not None and not parts.nonfinite.step_ok(
                parts.model, loss_sum, lambda: _accumulate(parts, batch, _NULL_TIMER), check_grads=parts.scaler is None,
                params=[p for group in parts.optimizer.param_groups for p in group["params"]]):
            # skip_step: the update, the optimizer state and the schedule are left untouched.
            parts.optimizer.zero_grad(set_to_none=parts.set_to_none)
            return loss_sum
        _update(parts)
    return loss_sum


def _update(parts: StepParts) -> None:
    """The optimizer's update from the accumulated gradients (through the loss scaler, if any), then
    zero_grad and the schedule's step."""
    if parts.scaler:
        parts.scaler.step(parts.optimizer)
        parts.scaler.update()
    else:
        parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=parts.set_to_none)
    if parts.scheduler is not None:
        parts.scheduler.step()


def _forward_backward(parts: StepParts, batch: Any, timer: PhaseTimer) -> torch.Tensor:
    """``_accumulate``; on out-of-memory, explain it, or with auto_microbatch halve and retry."""
    while True:
        try:
            return _accumulate(parts, batch, timer)
        except Exception as err:
            if any(handler(err) for handler in parts.recover):
                parts.optimizer.zero_grad(set_to_none=True)  # e.g. compile fell back to eager: re-run
                continue
            if not is_oom(err):
                raise
            if not parts.auto_microbatch:
                attach_explanation(err, parts.model, parts.optimizer)  # a note on the same exception
                raise
            parts.microbatches = next_microbatches(parts.microbatches, batch_len(batch), err)
        # Outside the except block the failed pass's frames (and activations) are released.
        parts.optimizer.zero_grad(set_to_none=True)  # the retry starts from clean gradients


def _accumulate(parts: StepParts, batch: Any, timer: PhaseTimer) -> torch.Tensor:
    """Forward and backward over the micro-batches, accumulating gradients; the summed loss."""
    micro = split_batch(batch, parts.microbatches)
    total = sum(batch_len(m) for m in micro)
    loss_sum = torch.zeros((), device=parts.device)
    for i, mb in enumerate(micro):
        # All but the last micro-batch keep their gradients local (DDP/FSDP2 no_sync), so the
        # distributed wrap communicates once per optimizer step, not once per micro-batch.
        sync = parts.no_sync if i < len(micro) - 1 else nullcontext
        with timer.phase("forward"), ExitStack() as stack:
            stack.enter_context(sync())
            stack.enter_context(parts.autocast())
            for ctx in parts.forward_contexts:
                stack.enter_context(ctx())
            loss = parts.loss_fn(parts.model, mb)
            check_scalar_loss(loss)  # shape metadata only: no sync
            # Weight each micro-batch's mean loss by its share, so accumulated gradients
            # equal the full batch's.
            weighted = loss * (batch_len(mb) / total) if len(micro) > 1 else loss
        with timer.phase("backward"), sync():
            (parts.scaler.scale(weighted) if parts.scaler else weighted).backward()
        loss_sum += weighted.detach().float()
    return loss_sum


class Step:
    """A prepared training step: ``loss = step(batch)``. Holds the applied changes.

    Example::

        step = torchsmith.prepare(Plan.load("plan.json"), model, optimizer, loss_fn)
        for batch in loader:
            loss = step(batch)
    """

    def __init__(self, parts: StepParts, changes: list[Change]):
        self.parts = parts
        self.changes = changes
        self.timer: PhaseTimer | None = None

    @property
    def model(self) -> nn.Module:
        return self.parts.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.parts.optimizer

    def __call__(self, batch: Any) -> torch.Tensor:
        batch = to_device(batch, self.parts.device)
        return train_step(self.parts, batch, self.timer)

    def forward_backward(self, batch: Any) -> torch.Tensor:
        """The first half of ``step(batch)``: forward and backward (over the plan's micro-batches),
        gradients accumulated, no update; returns the detached loss. For tools that must look at a
        step between its backward and its update (the NaN sentinel of ``debug nan``)::

            loss = step.forward_backward(batch)
            if torch.isfinite(loss):
                step.optimizer_step()
        """
        return _forward_backward(self.parts, to_device(batch, self.parts.device), self.timer or _NULL_TIMER)

    def optimizer_step(self) -> None:
        """The second half of ``step(batch)``: the update (through the loss scaler, if any), zero_grad
        and the schedule's step."""
        _update(self.parts)

    def revert(self) -> None:
        """Undo every transform, last applied first."""
        for change in reversed(self.changes):
            change.revert()

    def describe(self) -> list[str]:
        return [f"{c.name}: {c.summary}" for c in self.changes]


def prepare(plan: Plan, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
            *, scheduler: Any = None, device: torch.device | str | None = None) -> Step:
    """Apply ``plan`` to your model and optimizer and return the training step.

    ``loss_fn(model, batch)`` runs the forward pass and returns a scalar loss. The
    model must already be on its device; the optimizer must hold its parameters.

    Example::

        model = Net().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = torchsmith.prepare(torchsmith.Plan.load("plan.json"), model, optimizer,
                                  lambda m, b: F.cross_entropy(m(b[0]), b[1]))
        for batch in loader:
            loss = step(batch)          # forward, backward, optimizer.step, zero_grad
    """
    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
    parts = StepParts(model=model, optimizer=optimizer, loss_fn=loss_fn,
                      device=torch.device(device), scheduler=scheduler)
    changes = apply_plan(plan, parts)
    return Step(parts, changes)


class _NullTimer(PhaseTimer):
    def phase(self, name: str):  # type: ignore[override]
        return nullcontext()


_NULL_TIMER = _NullTimer()

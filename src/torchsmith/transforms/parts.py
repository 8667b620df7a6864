"""The pieces a training step is made of; step-level transforms edit these."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass
class StepParts:
    """Everything ``train_step`` reads. Transforms set fields here instead of wrapping the step."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: LossFn
    device: torch.device
    scheduler: Any = None
    autocast: Callable[[], AbstractContextManager] = nullcontext
    """Entered around forward + loss of every micro-batch (precision transform)."""
    forward_contexts: list[Callable[[], AbstractContextManager]] = field(default_factory=list)
    """Further contexts around forward + loss, e.g. saved-tensor hooks."""
    scaler: torch.amp.GradScaler | None = None
    """fp16 loss scaling (CUDA)."""
    microbatches: int = 1
    set_to_none: bool = True
    no_sync: Callable[[], AbstractContextManager] = nullcontext
    """Entered around forward and backward of all but the last micro-batch (DDP ``no_sync``)."""
    nonfinite: Any = None
    """``Plan.nonfinite``: a ``debug.nan_sentinel.NonFiniteGuard`` checked before each optimizer step."""
    auto_microbatch: bool = False
    """``Plan.auto_microbatch``: on OOM, double ``microbatches`` and retry the same batch."""
    recover: list[Callable[[BaseException], bool]] = field(default_factory=list)
    """Handlers for an error in forward/backward; one returning True has fixed the cause (compile
    reverted to eager), and the batch is re-run from cleared gradients."""

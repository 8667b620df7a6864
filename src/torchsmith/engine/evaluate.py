"""Validation loss under ``torch.inference_mode``, with the model's mode and RNG restored."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

import torch
from torch import nn

from torchsmith.transforms.parts import LossFn


def evaluate(model: nn.Module, batches: Iterable[Any], loss_fn: LossFn, device: torch.device,
             max_batches: int | None = None) -> float | None:
    """Mean loss over ``batches``; None when there are none.

    inference_mode builds no autograd graph and skips version-counter bookkeeping, so it is
    cheaper than no_grad. The RNG is forked so that evaluating never shifts the training
    run's random stream (which exact resume relies on).
    """
    from torchsmith.batch import to_device
    from torchsmith.transforms.inference import inference

    total, count = torch.zeros((), device=device), 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), inference(model):
        for batch in islice(batches, max_batches):
            total += loss_fn(model, to_device(batch, device)).float()
            count += 1
    return (total / count).item() if count else None

"""Evaluation under ``torch.inference_mode`` with the model in eval mode, restored afterwards.

``inference_mode`` records no autograd graph and skips the version-counter bookkeeping
that ``no_grad`` still does, so evaluation allocates and computes less. ``eval()`` switches
dropout off and makes batch norm use its running statistics. Both are undone on exit,
even when the body raises, so a training loop continues exactly as it was.

This is an evaluation context, not a training-step knob: it has no Plan field and is not
in the tuner's registry. ``engine.evaluate`` uses it.

Example::

    with inference(model):
        logits = model(x)          # logits.grad_fn is None, model.training is False
    # model.training is back to what it was
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def inference(model: nn.Module) -> Iterator[nn.Module]:
    """Run the body in ``torch.inference_mode`` with every submodule in eval mode; restore each module's mode.

    >>> m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    >>> with inference(m):
    ...     y = m(torch.ones(1, 2))
    >>> y.grad_fn is None, m.training, m[1].training
    (True, True, True)
    """
    # Per-module modes: a model may keep some submodules in eval on purpose (frozen batch norm);
    # model.train(was_training) would flip those too.
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            yield model
    finally:
        for module, training in modes:
            module.training = training

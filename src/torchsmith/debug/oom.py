"""Out-of-memory explainer around any code: ``explain_oom``.

Example::

    with torchsmith.explain_oom(model, optimizer) as oom:
        loss_fn(model, batch).backward()
    # on OOM the original exception is re-raised with the explanation as a note;
    # oom.report holds it as data
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from torch import nn

from torchsmith.engine.auto_microbatch import OOMError
from torchsmith.measure.oom import OOMReport, attach_explanation, explain, is_oom

__all__ = ["OOMError", "OOMReport", "explain", "explain_oom", "is_oom"]


class explain_oom(contextlib.AbstractContextManager):  # noqa: N801 - used as a function
    """Context manager: on OOM, re-raise the same exception with an explanation note attached.

    ``.report`` then holds the :class:`OOMReport`. Other errors pass through untouched.

    Example::

        with torchsmith.explain_oom(model, optimizer) as oom:
            step(batch)
    """

    def __init__(self, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None):
        self.model, self.optimizer = model, optimizer
        self.report: OOMReport | None = None

    def __exit__(self, exc_type, err, tb) -> Literal[False]:
        if err is not None and is_oom(err):
            attach_explanation(err, self.model, self.optimizer)
            self.report = getattr(err, "torchsmith_oom", None)
        return False

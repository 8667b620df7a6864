"""GELU and SiLU as autograd Functions that save only their input and recompute the rest.

An activation written out in Python, as nanoGPT's ``NewGELU`` is::

    0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))

makes autograd save every intermediate its ops need for backward: ``x``, ``x ** 2``,
the tanh output, ``0.5 * x``...: four tensors the size of ``x`` (measured)
per call (``x * torch.sigmoid(x)`` saves two). The Functions here save ``x`` alone and
recompute the derivative from it in backward, with ATen's fused backward kernels.

Measured, not assumed (``benchmarks/activations.py``, ``tests/ops``): PyTorch's native
``nn.GELU`` and ``nn.SiLU`` *already* save only their input in eager mode, so against
them these Functions save the same bytes; the gain is against composite activations.
To cut below the native modules, the activation's output, which the next Linear saves,
must go too: that is :mod:`torchsmith.ops.act_linear`, built on the derivatives here.

Example::

    x = torch.randn(16, 128, 1024, requires_grad=True)
    y = gelu(x, approximate="tanh")        # == F.gelu(x, approximate="tanh")
    y.sum().backward()                     # only x was kept for this
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["gelu", "silu", "LeanGELU", "LeanSiLU", "act_forward", "act_backward"]

ACTIVATIONS = ("gelu", "gelu_tanh", "silu")


def act_forward(x: Tensor, kind: str) -> Tensor:
    """``kind(x)`` for kind in ``ACTIVATIONS``, with PyTorch's native kernels."""
    if kind == "silu":
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x, approximate="tanh" if kind == "gelu_tanh" else "none")


def act_backward(grad: Tensor, x: Tensor, kind: str) -> Tensor:
    """``grad * d kind(x) / dx``, recomputed from ``x`` alone, with ATen's fused backward kernels.

    The derivatives, for the record (one elementwise kernel each, no temporaries):
    silu' = s (1 + x (1 - s)) with s = sigmoid(x); exact gelu' = Phi(x) + x phi(x);
    tanh gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
    t = tanh(sqrt(2/pi) (x + 0.044715 x^3)). Written out in Python they would allocate a
    temporary per operation and run several times slower than these kernels.
    """
    if kind == "silu":
        return torch.ops.aten.silu_backward(grad, x)
    return torch.ops.aten.gelu_backward(grad, x, approximate="tanh" if kind == "gelu_tanh" else "none")


def _check(kind: str) -> None:
    if kind not in ACTIVATIONS:
        raise ValueError(f"activation {kind!r} is not one of {ACTIVATIONS}.")


class _LeanActivation(torch.autograd.Function):
    """``y = kind(x)``; saves ``x`` only. Differentiable once (no double backward)."""

    @staticmethod
    def forward(x: Tensor, kind: str) -> Tensor:
        return act_forward(x, kind)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, kind = inputs
        ctx.kind = kind
        ctx.save_for_backward(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y: Tensor):
        (x,) = ctx.saved_tensors
        return act_backward(grad_y, x, ctx.kind), None


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``F.gelu(x, approximate)`` that keeps only ``x`` for backward.

    >>> x = torch.randn(4, requires_grad=True)
    >>> torch.allclose(gelu(x), torch.nn.functional.gelu(x))
    True
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}.")
    return _LeanActivation.apply(x, "gelu_tanh" if approximate == "tanh" else "gelu")


def silu(x: Tensor) -> Tensor:
    """``F.silu(x)`` that keeps only ``x`` for backward.

    >>> x = torch.randn(4, requires_grad=True)
    >>> torch.allclose(silu(x), torch.nn.functional.silu(x))
    True
    """
    return _LeanActivation.apply(x, "silu")


class LeanGELU(nn.Module):
    """Drop-in for ``nn.GELU`` (same ``approximate`` argument) built on :func:`gelu`."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeanSiLU(nn.Module):
    """Drop-in for ``nn.SiLU`` built on :func:`silu`."""

    def forward(self, x: Tensor) -> Tensor:
        return silu(x)

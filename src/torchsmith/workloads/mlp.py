"""mlp: a ~141k-parameter tabular MLP on a teacher-network regression task.

Features are standard normal; targets come from a fixed random teacher network
(a tanh MLP drawn from the workload's own generator) plus Gaussian noise, then
standardised per output. A model that predicts the mean scores MSE ~1.0; the
noise floor is ``noise**2 / (1 + noise**2)`` (~0.01 by default).

Example::

    from torchsmith.workloads.mlp import workload
    w = workload(seed=0)
    x, y = next(iter(w.iter_batches()))      # (256, 32) float32, (256, 4) float32
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.workload import Workload
from torchsmith.workloads._batches import STREAM_DATA, ShuffledBatches, generator

__all__ = ["MLP", "MLPBlock", "make_table", "workload"]


def make_table(
    n: int, features: int, outputs: int, noise: float, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows: features ``(n, features)`` and standardised targets ``(n, outputs)``, both float32."""
    x = torch.randn(n, features, generator=g)
    # Teacher: features -> 64 -> outputs with tanh, weights scaled so the tanh is
    # neither linear nor saturated (pre-activations have unit variance).
    w1 = torch.randn(features, 64, generator=g) / features**0.5
    w2 = torch.randn(64, outputs, generator=g) / 64**0.5
    signal = torch.tanh(1.5 * x @ w1) @ w2  # (n, outputs)
    signal = (signal - signal.mean(0)) / signal.std(0)
    y = signal + noise * torch.randn(n, outputs, generator=g)
    y = (y - y.mean(0)) / y.std(0)  # unit-variance targets: MSE 1.0 = predicting the mean
    return x, y


class MLPBlock(nn.Module):
    """Linear then ReLU: one hidden layer."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(x))  # (B, d_in) -> (B, d_out)


class MLP(nn.Module):
    """Hidden layers in ``self.blocks`` (``features -> width -> ... -> width``), then a linear ``head``."""

    def __init__(self, features: int = 32, width: int = 256, depth: int = 3, outputs: int = 4) -> None:
        super().__init__()
        dims = [features] + [width] * depth
        self.blocks = nn.ModuleList(MLPBlock(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)  # (B, width)
        return self.head(x)  # (B, outputs)


def mlp_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch  # (B, features), (B, outputs) float32
    return F.mse_loss(model(x), y)


def workload(
    seed: int = 0,
    *,
    batch_size: int = 256,
    train_rows: int = 16384,
    val_rows: int = 4096,
    features: int = 32,
    width: int = 256,
    depth: int = 3,
    outputs: int = 4,
    noise: float = 0.1,
    lr: float = 1e-3,
) -> Workload:
    """The built-in tabular regression workload (AdamW).

    >>> w = workload(seed=0, train_rows=1024, val_rows=256)
    >>> w.name, len(w.iter_batches())
    ('mlp', 4)
    """
    g = generator(seed, STREAM_DATA)
    x, y = make_table(train_rows + val_rows, features, outputs, noise, g)
    return Workload(
        name="mlp",
        seed=seed,
        model=lambda: MLP(features=features, width=width, depth=depth, outputs=outputs),
        batches=ShuffledBatches((x[:train_rows], y[:train_rows]), batch_size=batch_size, seed=seed),
        eval_batches=ShuffledBatches(
            (x[train_rows:], y[train_rows:]), batch_size=batch_size, seed=seed, shuffle=False, drop_last=False
        ),
        loss=mlp_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=lr, weight_decay=0.01),
        samples_per_batch=batch_size,
        extras={"task": "regression", "features": features, "outputs": outputs, "noise": noise},
    )

"""A training script with a planted optimizer win: 600 small parameter tensors, stepped by Adam's
for-loop implementation (PyTorch's default for CPU tensors), so ``foreach=True`` (or ``fused``)
removes most of the optimizer's per-tensor Python overhead. A fixed matmul keeps the rest of the
step from being nothing. Its batch sizes the win without adding parameters (a wider matmul adds
optimizer work too). On the 2-core AVX2 VM, with 300 tensors at width 256, ``benchmarks/true_wins.py``
re-measured foreach at 1.40-1.69x and fused at 1.72-3.43x at batch 64 (10 tunes), and foreach at
1.38x (1.12-1.69) at batch 4096 (its proofs there read 1.16-1.28x).

    python benchmarks/scripts/many_params.py [--steps 400] [--tensors 600] [--work 192] [--batch 64]
"""

import argparse
from collections.abc import Callable

import torch
from torch import nn


class ManySmall(nn.Module):
    def __init__(self, tensors: int, work: int):
        super().__init__()
        self.small = nn.ParameterList(nn.Parameter(torch.randn(8) * 0.1) for _ in range(tensors))
        self.big = nn.Linear(work, work)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, work)
        bias = torch.stack(list(self.small)).sum()  # one stack: the forward stays cheap
        return self.big(x).pow(2).mean() + bias.pow(2)


def training_step(tensors: int, work: int, batch: int, **adam: bool) -> Callable[[], None]:
    """One step of this script's loop, ready to call: the model, the input and Adam (the for-loop unless
    ``foreach=True`` or ``fused=True``). ``benchmarks/true_wins.py`` times this same step to size the win."""
    torch.manual_seed(0)
    model = ManySmall(tensors, work)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **adam)  # foreach unset: the for-loop on CPU
    x = torch.randn(batch, work)

    def step() -> None:
        loss = model(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--tensors", type=int, default=600)
    ap.add_argument("--work", type=int, default=192, help="width of the fixed matmul in each step")
    ap.add_argument("--batch", type=int, default=64, help="rows of the fixed matmul's input: more, a smaller win")
    args = ap.parse_args()
    step = training_step(args.tensors, args.work, args.batch)
    for _ in range(args.steps):
        step()
    print(f"many_params done {args.steps}")


if __name__ == "__main__":
    main()

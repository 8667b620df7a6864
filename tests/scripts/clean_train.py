"""The same training as bad_train.py with its four problems fixed (for `torchsmith doctor`).

Batches are slices of in-memory tensors (no per-sample decode), the loss is read every
100 steps only, gradients are set to None, and AdamW runs its foreach implementation.
"""

import argparse
import sys

import torch
from torch import nn


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(4096, 512, generator=g), torch.randn(4096, 1, generator=g)
    # 9 layers, 18 parameter tensors: enough for a per-tensor optimizer loop to cost something.
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(512, 512), nn.ReLU())], nn.Linear(512, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    running = torch.zeros(())
    for step in range(args.steps):
        i = (step * 64) % (len(xs) - 64)
        x, y = xs[i:i + 64], ys[i:i + 64]
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        if (step + 1) % 100 == 0:
            print(f"step {step + 1} loss {(running / 100).item():.4f}")
            running.zero_()
    print("clean_train done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

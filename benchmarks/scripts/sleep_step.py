"""A training script the optimizer and compile knobs cannot change: each step is a 25 ms sleep (an
I/O-bound loader, a remote call) around a tiny model, so they act on ~1% of it. The thread count
can still matter (waking a second OpenMP thread after each sleep): see benchmarks/false_wins.py.

    python benchmarks/scripts/sleep_step.py [--steps 400] [--sleep 0.025]
"""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--sleep", type=float, default=0.025, help="seconds of waiting in each step")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    for _ in range(args.steps):
        time.sleep(args.sleep)  # the step's wait: nothing torch does changes it
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"sleep_step done {args.steps}")


if __name__ == "__main__":
    main()

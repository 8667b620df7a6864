"""A small training script with exactly four known performance problems (for `torchsmith doctor`).

1. num_workers=0 with a slow __getitem__ (it sleeps, as a decode would)  -> data-bound
2. loss.item() every step                                               -> sync-in-loop
3. zero_grad(set_to_none=False)                                          -> grad-not-set-to-none
4. a non-foreach optimizer (foreach=False)                              -> single-tensor-optimizer

Everything else is as it should be: float32, anomaly mode off, all cores used, a model
whose matmuls are large enough not to be dispatch-bound, small activations.
"""

import argparse
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, n: int = 4096, features: int = 512):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(0.002)  # problem 1: a slow decode, on the main process (num_workers=0)
        return self.x[i], self.y[i]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    # 9 layers, 18 parameter tensors: enough for a per-tensor optimizer loop to cost something.
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(512, 512), nn.ReLU())], nn.Linear(512, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)  # problem 4
    loader = DataLoader(SlowDataset(), batch_size=64, shuffle=True, num_workers=0)  # problem 1
    step = 0
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad(set_to_none=False)  # problem 3
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"step {step} loss {loss.item():.4f}")  # problem 2: a sync every step
            step += 1
            if step == args.steps:
                break
    print("bad_train done")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())

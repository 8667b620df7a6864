"""Gradient accumulation: 4 micro-batches of forward and backward per optimizer step.

--planted: the dataset parses each sample from text on every read, in the training process
(num_workers=0): doctor's data-bound rule must find the wait.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()
ACCUMULATE = 4


class Samples(Dataset):
    def __init__(self, n: int, slow: bool):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 256, generator=g), torch.randn(n, 1, generator=g)
        self.slow = slow

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):  # i: the indices of one micro-batch
        if self.slow:
            time.sleep(0.001 * len(i))  # parsing each record, as from CSV lines
        return self.x[i], self.y[i]


torch.manual_seed(0)
data = Samples(8192, args.planted)
# One __getitem__ per micro-batch (a list of indices), not 32 per-sample reads and a collate.
loader = DataLoader(data, sampler=BatchSampler(RandomSampler(data), batch_size=32, drop_last=True), batch_size=None,
                    num_workers=0)
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

step = micro = 0
while step < args.steps:
    for xb, yb in loader:
        loss = F.mse_loss(model(xb), yb) / ACCUMULATE
        loss.backward()
        micro += 1
        if micro % ACCUMULATE == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step == args.steps:
                break
print(f"grad_accum done: {step} steps of {ACCUMULATE} micro-batches")

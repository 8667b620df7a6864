"""A plain PyTorch loop: an MLP regression over a DataLoader, as most tutorials write it.

--planted: the model and the data are float64 (a `torch.set_default_dtype(torch.float64)` left
in, or a numpy array that was never cast): doctor's float64 rule must find it.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
dtype = torch.float64 if args.planted else torch.float32
x, y = torch.randn(4096, 256, dtype=dtype), torch.randn(4096, 1, dtype=dtype)
dataset = TensorDataset(x, y)
# One __getitem__ per batch (a tensor of indices), not 128 per-sample reads and a collate.
loader = DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), batch_size=128, drop_last=True),
                    batch_size=None)
model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 1)).to(dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

step = 0
while step < args.steps:
    for xb, yb in loader:
        loss = F.mse_loss(model(xb), yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step == args.steps:
            break
print(f"plain_loop done: {step} steps, loss {loss.item():.4f}")

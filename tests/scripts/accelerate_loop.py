"""A loop written for Hugging Face Accelerate: prepare(), accelerator.backward(), wrapped optimizer.

--planted: `optimizer.zero_grad(set_to_none=False)` zero-fills every gradient each step
(a habit from before PyTorch 2.0): doctor's grad-not-set-to-none rule must find it.
"""

import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
x, y = torch.randn(4096, 256), torch.randint(0, 10, (4096,))
dataset = TensorDataset(x, y)
loader = DataLoader(dataset, batch_size=128, shuffle=True, drop_last=True)
model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

step = 0
while step < args.steps:
    for xb, yb in loader:
        optimizer.zero_grad(set_to_none=not args.planted)
        loss = F.cross_entropy(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        step += 1
        if step == args.steps:
            break
print(f"accelerate_loop done: {step} steps")

"""Full-batch LBFGS: forward and backward run inside optimizer.step(closure), several times per step.

--planted: autograd anomaly detection left on (`torch.autograd.set_detect_anomaly(True)`, a
NaN hunt that was never undone): doctor's anomaly-mode rule must find it.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
if args.planted:
    torch.autograd.set_detect_anomaly(True)
x = torch.randn(2048, 64)
y = torch.sin(x[:, :1] * 3) + 0.1 * torch.randn(2048, 1)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=10)


def closure():
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


for _step in range(args.steps):
    loss = optimizer.step(closure)
print(f"lbfgs done: {args.steps} steps, loss {loss.item():.4f}")

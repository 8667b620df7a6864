"""A GAN-style loop: two models, two optimizers, each stepped once per cycle of the loop.

doctor counts one cycle (discriminator step, generator step) as one training step and shows
each optimizer's share.

--planted: both optimizers run with foreach=False, a loop over their many parameter tensors
(deep MLPs with biases and norms): doctor's single-tensor-optimizer rule must find it.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()


def mlp(d_in: int, d_out: int, width: int = 256, depth: int = 6) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(d_in, width), nn.LeakyReLU(0.2)]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.LeakyReLU(0.2)]
    return nn.Sequential(*layers, nn.Linear(width, d_out))


torch.manual_seed(0)
G, D = mlp(64, 128), mlp(128, 1)
foreach = not args.planted
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999), foreach=foreach)
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999), foreach=foreach)
real_data = torch.randn(8192, 128)

for step in range(args.steps):
    i = (step * 128) % (len(real_data) - 128)
    real = real_data[i:i + 128]
    z = torch.randn(128, 64)
    # discriminator: real -> 1, fake -> 0
    fake = G(z).detach()
    d_loss = (F.binary_cross_entropy_with_logits(D(real), torch.ones(128, 1))
              + F.binary_cross_entropy_with_logits(D(fake), torch.zeros(128, 1)))
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    # generator: make D say 1 on fakes
    g_loss = F.binary_cross_entropy_with_logits(D(G(z)), torch.ones(128, 1))
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
print(f"gan done: {args.steps} steps")

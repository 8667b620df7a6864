"""A DDP training script in the shape of PyTorch's DDP tutorial, run with torchrun.

    torchrun --nproc-per-node 2 tests/scripts/ddp_loop.py --steps 20

``--kill-rank-if-optimizer-changed R``: rank R SIGKILLs itself at step 2 when the optimizer is not
as written (fused or foreach was set from outside), the way a rank dies of a fault: no
exception, no clean-up, and torchrun tears the group down.
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--kill-rank-if-optimizer-changed", type=int, default=None)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)  # each rank its own shard of the data
x, y = torch.randn(512, 64, generator=g), torch.randint(0, 4, (512,), generator=g)
for step in range(args.steps):
    group = opt.param_groups[0]
    changed = bool(group.get("fused")) or group.get("foreach") is not None
    if args.kill_rank_if_optimizer_changed == rank and changed and step == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    i = torch.randint(0, 512, (64,), generator=g)
    loss = nn.functional.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()

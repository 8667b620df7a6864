"""A DDP training script in the shape of PyTorch's DDP tutorial, run with torchrun.

    torchrun --nproc-per-node 2 tests/scripts/ddp_loop.py --steps 20

``--kill-rank-if-optimizer-changed R``: rank R SIGKILLs itself at step 2 when the optimizer is not
as written (fused or foreach was set from outside), the way a rank dies of a fault: no
exception, no clean-up, and torchrun tears the group down.

``--bucket-cap-mb N``: the script passes ``bucket_cap_mb=N`` to DDP itself. ``--own-hook``: it
registers its own comm hook (``allreduce_hook``) after ``DDP(...)``. ``--observe``: each rank
prints, after its first step, one line ``DDP-OBSERVED {json}`` with what its DDP runs with
(bucket bytes, bucket view, static graph, comm hook). ``--exit-code N``: rank 0 exits with N at
the end. ``--alternate-slow-rank FILE``: run k (counted in FILE) delays rank k % 2 before its
first optimizer step, so which rank steps first alternates from run to run.
"""

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--kill-rank-if-optimizer-changed", type=int, default=None)
p.add_argument("--bucket-cap-mb", type=int, default=None)
p.add_argument("--own-hook", action="store_true")
p.add_argument("--observe", action="store_true")
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--alternate-slow-rank", type=Path, default=None)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
slow_rank = None
if args.alternate_slow_rank is not None:
    run = torch.tensor([int(args.alternate_slow_rank.read_text() or 0) if args.alternate_slow_rank.exists() else 0])
    dist.broadcast(run, 0)  # every rank agrees on this run's number
    if rank == 0:
        args.alternate_slow_rank.write_text(str(int(run) + 1))
    slow_rank = int(run) % 2
torch.manual_seed(0)
extra = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)), **extra)
if args.own_hook:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model.register_comm_hook(None, default_hooks.allreduce_hook)
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
    if step == 0 and slow_rank == rank:
        time.sleep(1.0)  # the other rank ends its first step first
    opt.step()
    if step == 0 and args.observe:
        seen = {"rank": rank, "bucket_bytes_cap": model.bucket_bytes_cap,
                "gradient_as_bucket_view": model.gradient_as_bucket_view, "static_graph": model.static_graph,
                "comm_hook": model._get_ddp_logging_data().get("comm_hook")}
        print("DDP-OBSERVED " + json.dumps(seen), flush=True)
# A barrier first: a rank that tears gloo down while the other still communicates can abort at exit
# ("terminate called without an active exception", exit -6), as distributed/runtime.py's shutdown() says.
dist.barrier()
dist.destroy_process_group()
sys.exit(args.exit_code if rank == 0 else 0)

"""A plain PyTorch loop, as most tutorials write it: residual MLP blocks and a head over a
DataLoader. One script for two kinds of test: doctor (`--planted`) and the script tuner (the
switches below and --observe, where it writes what it saw from inside).

--planted: the model and the data are float64 (a `torch.set_default_dtype(torch.float64)` left
in, or a numpy array that was never cast): doctor's float64 rule must find it.

The other switches plant the behaviours the tuner's tests need: a crash, a hang, a loss that
depends on the thread count (a loss-changing knob), and unseeded noise (a non-reproducible
baseline); --foreach is the script choosing its optimizer implementation itself.
"""

import argparse
import json
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--observe", default=None)
p.add_argument("--planted", action="store_true", help="float64 model and data (doctor's float64 rule)")
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--crash-if-threads", type=int, default=None)
p.add_argument("--hang-if-threads", type=int, default=None)
p.add_argument("--loss-scale-if-threads", type=int, default=None)
p.add_argument("--unseeded-noise", action="store_true")
p.add_argument("--foreach", action="store_true", help="the script chooses its optimizer implementation")
p.add_argument("--write", default=None, help="a file the script writes each run (a side effect)")
args = p.parse_args()

seen = {"autocast": False}


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(3))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        # Also traced by torch.compile: the dict update is replayed at every compiled call.
        if torch.is_autocast_enabled("cpu"):
            seen["autocast"] = True
        for b in self.blocks:
            x = b(x)
        return self.head(x)


torch.manual_seed(0)
dtype = torch.float64 if args.planted else torch.float32
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(4096, 256, generator=g, dtype=dtype), torch.randint(0, 4, (4096,), generator=g))
# One __getitem__ per batch (a tensor of indices), not 128 per-sample reads and a collate.
loader = DataLoader(data, sampler=BatchSampler(RandomSampler(data), batch_size=128, drop_last=True), batch_size=None)
model = Net().to(dtype)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True if args.foreach else None)
step = 0


def observe():
    if args.observe:
        with open(args.observe, "w") as f:
            json.dump(
                {
                    **seen,
                    "compiled": getattr(model, "_compiled_call_impl", None) is not None,
                    # a checkpointed block recomputes its forward in backward: torchsmith wraps it
                    "checkpointed": all("forward" in b.__dict__ for b in model.blocks),
                    "threads": torch.get_num_threads(),
                    "fused": opt.param_groups[0]["fused"],
                    "foreach": opt.param_groups[0]["foreach"],
                    "num_workers": loader.num_workers,
                    "persistent_workers": loader.persistent_workers,
                    "tune_env": os.environ.get("TORCHSMITH_TUNE"),
                    "matmul_precision": torch.get_float32_matmul_precision(),
                    "steps": step,
                },
                f,
            )


try:
    if args.write:
        with open(args.write, "w") as f:
            f.write("side effect\n")
    while step < args.steps:
        for x, y in loader:
            if args.crash_if_threads == torch.get_num_threads() and step == 2:
                raise RuntimeError("planted crash")
            if args.hang_if_threads == torch.get_num_threads() and step == 2:
                time.sleep(3600)
            loss = nn.functional.cross_entropy(model(x).float(), y)
            if args.loss_scale_if_threads == torch.get_num_threads():
                loss = loss * 1.5
            if args.unseeded_noise:
                loss = loss * (1 + int.from_bytes(os.urandom(2), "little") / 65536 * 0.2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
finally:
    observe()
print("plain_loop done", step)
sys.exit(args.exit_code)

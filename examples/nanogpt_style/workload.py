"""The model of train.py written as a torchsmith Workload (for benchmarks/tune_script.py):
the same GPT, the same memmap windows, the same AdamW groups.

    torchsmith tune examples/nanogpt_style/workload.py:workload
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import get_batch, prepare  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def _adamw(params):
    params = [p for p in params if p.requires_grad]  # the groups of GPT.configure_optimizers
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95))


def workload(batch_size=16, block_size=64, n_layer=4, n_head=4, n_embd=128, n_batches=64):
    import torchsmith

    path = prepare()
    g = torch.get_rng_state()
    torch.manual_seed(1337)
    batches = [get_batch(path, block_size, batch_size) for _ in range(n_batches)]
    torch.set_rng_state(g)
    cfg = GPTConfig(block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    return torchsmith.Workload(
        model=lambda: GPT(cfg),
        batches=batches,
        loss=lambda model, b: model(b[0], b[1])[1],
        optimizer=_adamw,
        tokens_per_batch=batch_size * block_size,
        name="nanogpt-style",
    )

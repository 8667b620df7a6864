"""nanoGPT's training loop on CPU: tokens in a numpy memmap, read by `get_batch` with tensor indices
(each `data[i:i+block]` turns a 0-d tensor into an int: `aten::item`, which waits for no device on
a CPU), a small causal transformer, AdamW, a `.item()` loss read for the log.

--planted: `torch.set_num_threads(64 * cores)` (a thread count copied from a 128-core server):
oversubscribed cores, which doctor's threads rule must find by measuring the cores' count. At
16 per core the full suite once measured 32 threads at 0.14-0.15 s a step against 1 thread's
0.12-0.14 s, too close to call, while the other worker loaded the cores. Beside 1 and 3 busy
loops, 1 thread against 16 per core was 3.5-4.6x and 2.7-3.5x, against 64 per core 10-11.5x and
5.8-7.2x (doctor's probe medians, 2-3 runs each of `torchsmith doctor -- python
tests/scripts/nanogpt_memmap.py --planted --steps 30` beside `python -c 'while True: pass'`).
"""

import argparse
import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()
if args.planted:
    torch.set_num_threads(64 * len(os.sched_getaffinity(0)))

block_size, batch_size, vocab, n_embd, n_head, n_layer = 64, 8, 256, 128, 4, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


with tempfile.TemporaryDirectory() as data_dir:
    path = os.path.join(data_dir, "train.bin")
    np.random.default_rng(0).integers(0, vocab, 200_000, dtype=np.uint16).tofile(path)

    def get_batch():
        data = np.memmap(path, dtype=np.uint16, mode="r")  # re-opened per batch, as nanoGPT does
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
        return x, y

    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, foreach=True)
    X, Y = get_batch()
    for it in range(args.steps):
        loss = model(X, Y)
        X, Y = get_batch()  # fetch the next batch while... (on a CPU: before) backward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"iter {it}: loss {loss.item():.4f}")
print("nanogpt_memmap done")

"""A nanoGPT-style training script (CPU configuration): its own argparse, a memmap loader,
AdamW with weight-decay groups, a cosine learning rate, gradient clipping and iteration logs.

    python examples/nanogpt_style/train.py --max-iters 200
    torchsmith tune --budget 5m -- python examples/nanogpt_style/train.py
    torchsmith run --plan plan.json -- python examples/nanogpt_style/train.py

Unmodified by torchsmith: the tuner reaches it from outside. It skips its checkpoint under
TORCHSMITH_TUNE=1, as a script may. The last line reports steps/s measured inside the loop.
"""

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import get_batch, prepare  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--block-size", type=int, default=64)
p.add_argument("--n-layer", type=int, default=4)
p.add_argument("--n-head", type=int, default=4)
p.add_argument("--n-embd", type=int, default=128)
p.add_argument("--max-iters", type=int, default=200)
p.add_argument("--warmup-iters", type=int, default=10, help="learning-rate warm-up, not timing")
p.add_argument("--timing-skip", type=int, default=5, help="iterations left out of the steps/s figure")
p.add_argument("--lr", type=float, default=6e-4)
p.add_argument("--weight-decay", type=float, default=0.1)
p.add_argument("--grad-clip", type=float, default=1.0)
p.add_argument("--log-interval", type=int, default=50)
p.add_argument("--out-dir", default=None)
p.add_argument("--seed", type=int, default=1337)
args = p.parse_args()

torch.manual_seed(args.seed)
data_path = prepare()
model = GPT(GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd))
optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, 0.95))


def get_lr(it):
    if it < args.warmup_iters:
        return args.lr * (it + 1) / (args.warmup_iters + 1)
    ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
    return args.lr * 0.1 + 0.5 * (1 + math.cos(math.pi * ratio)) * args.lr * 0.9


t_start = None
for it in range(args.max_iters):
    if it == args.timing_skip:
        t_start = time.perf_counter()
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)
    x, y = get_batch(data_path, args.block_size, args.batch_size)
    logits, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % args.log_interval == 0:
        print(f"iter {it}: loss {loss.item():.4f}")

if args.out_dir and not os.environ.get("TORCHSMITH_TUNE"):
    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out_dir, "ckpt.pt"))
if t_start is not None:
    timed = args.max_iters - args.timing_skip
    print(f"steps/s {timed / (time.perf_counter() - t_start):.3f}")

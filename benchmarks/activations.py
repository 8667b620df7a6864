"""Saved bytes (and time) of the lean activations and the fused activation + Linear vs stock modules.

Saved bytes are counted exactly with ``saved_tensors_hooks`` (``measure.saved``), per
storage, at gpt-mini's MLP shapes: 16 x 128 tokens, C = 256, hidden 4C = 1024. Time is
the median of interleaved forward + backward repetitions. Compared:

- each activation alone: the lean Function vs PyTorch's native module vs a composite
  written out in Python (nanoGPT's ``NewGELU``, ``x * sigmoid(x)``);
- the MLP ``c_proj(act(c_fc(x)))``: stock modules vs ``ActLinearMLP``;
- the whole gpt-mini model with its MLPs swapped for ``ActLinearMLP``.

    PYTHONPATH=src .venv/bin/python benchmarks/activations.py [--reps 7]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn

from torchsmith.measure.saved import count_saved_tensors
from torchsmith.ops.act_linear import ActLinearMLP
from torchsmith.ops.activations import LeanGELU, LeanSiLU
from torchsmith.workloads.gpt_mini import GPT, GPTConfig, gpt_loss

B, T, C = 16, 128, 256


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CompositeSiLU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class StockMLP(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.c_fc, self.act, self.c_proj = nn.Linear(C, 4 * C), act, nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


def saved_bytes(fn, *args, model=None) -> int:
    with count_saved_tensors(model) as saved:
        fn(*args)
    return saved.result.bytes


def fwd_bwd(fn, x) -> None:
    out = fn(x)
    out.backward(torch.ones_like(out))


def median_times(fns, x, reps) -> list[float]:
    samples = [[] for _ in fns]
    for fn in fns:
        fwd_bwd(fn, x)  # warm-up
    for _ in range(reps):
        for i, fn in enumerate(fns):  # interleaved, so machine noise hits every variant alike
            t0 = time.perf_counter()
            fwd_bwd(fn, x)
            samples[i].append(time.perf_counter() - t0)
    return [statistics.median(s) for s in samples]


def table(title: str, rows: dict[str, nn.Module], x: torch.Tensor, reps: int, base: str) -> None:
    print(f"\n{title}")
    print(f"{'variant':<26} {'saved MiB':>10} {'vs ' + base:>14} {'fwd+bwd ms':>11} {'time':>7}")
    saved = {name: saved_bytes(m, x) for name, m in rows.items()}
    times = dict(zip(rows, median_times(list(rows.values()), x, reps), strict=True))
    for name in rows:
        print(f"{name:<26} {saved[name] / 2**20:>10.2f} {saved[name] / saved[base]:>13.2f}x "
              f"{times[name] * 1e3:>11.2f} {times[name] / times[base] - 1:>+7.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"saved-for-backward bytes, (B, T, C) = ({B}, {T}, {C}), torch {torch.__version__}, "
          f"threads={torch.get_num_threads()}; times: median of {args.reps} interleaved reps (shared machine: noisy)")
    h = torch.randn(B, T, 4 * C, requires_grad=True)
    table("GELU (tanh) on (B, T, 4C)", {"nn.GELU('tanh') [stock]": nn.GELU(approximate="tanh"),
                                        "LeanGELU('tanh')": LeanGELU("tanh"), "NewGELU (composite)": NewGELU()},
          h, args.reps, "nn.GELU('tanh') [stock]")
    table("GELU (erf) on (B, T, 4C)", {"nn.GELU [stock]": nn.GELU(), "LeanGELU": LeanGELU()},
          h, args.reps, "nn.GELU [stock]")
    table("SiLU on (B, T, 4C)", {"nn.SiLU [stock]": nn.SiLU(), "LeanSiLU": LeanSiLU(),
                                 "x * sigmoid(x)": CompositeSiLU()}, h, args.reps, "nn.SiLU [stock]")

    x = torch.randn(B, T, C, requires_grad=True)
    stock = StockMLP(nn.GELU())
    fused = ActLinearMLP(C, 4 * C)
    fused.load_state_dict(stock.state_dict(), strict=False)
    table("MLP c_proj(gelu(c_fc(x))) on (B, T, C)", {"stock MLP": stock, "ActLinearMLP": fused}, x, args.reps,
          "stock MLP")

    cfg = GPTConfig(vocab_size=62, block_size=T, n_layer=4, n_head=4, n_embd=C)
    model = GPT(cfg)
    batch = (torch.randint(0, 62, (B, T)), torch.randint(0, 62, (B, T)))
    before = saved_bytes(gpt_loss, model, batch, model=model)
    for block in model.blocks:
        swapped = ActLinearMLP(C, 4 * C)
        swapped.load_state_dict(block.mlp.state_dict(), strict=False)
        block.mlp = swapped
    after = saved_bytes(gpt_loss, model, batch, model=model)
    print(f"\ngpt-mini (4 blocks) forward + loss: saved {before / 2**20:.1f} MiB stock -> {after / 2**20:.1f} MiB "
          f"with ActLinearMLP ({1 - after / before:.0%} less)")


if __name__ == "__main__":
    main()

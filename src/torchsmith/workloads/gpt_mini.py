"""gpt-mini: a ~3.2M-parameter character GPT on KJV Genesis + Exodus.

The default workload of every command: the corpus ships inside the package, so
it runs offline. Loss starts near ln(vocab) = ln(62) ~ 4.13 and falls below ~2.5
within ~150 AdamW steps on a CPU.

Example::

    from torchsmith.workloads.gpt_mini import workload
    w = workload(seed=0)
    torch.manual_seed(w.seed)
    model = w.model()
    x, y = next(iter(w.iter_batches()))      # (16, 128) int64 each
    w.loss(model, (x, y))                    # scalar, ~4.1 at init
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.workload import Workload
from torchsmith.workloads._batches import STREAM_TRAIN_ORDER, STREAM_VAL, generator
from torchsmith.workloads.gpt_model import GPT, Block, GPTConfig

__all__ = ["GPT", "Block", "GPTConfig", "WindowBatches", "load_corpus", "workload"]

CORPUS = "kjv_genesis_exodus.txt"


@functools.lru_cache(maxsize=1)
def load_corpus() -> str:
    """The packaged corpus text (KJV Genesis + Exodus, public domain, ~366 KB)."""
    return resources.files("torchsmith.workloads").joinpath("data", CORPUS).read_text(encoding="utf-8")


def _encode(text: str) -> tuple[str, torch.Tensor]:
    """Character vocabulary (sorted) and the whole text as int64 ids, shape (N,)."""
    vocab = "".join(sorted(set(text)))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    if text.isascii():
        # A byte -> id lookup table: one tensor op, not a Python loop over 366k chars.
        table = torch.zeros(128, dtype=torch.int64)
        table[torch.tensor([ord(c) for c in vocab])] = torch.arange(len(vocab))
        raw = torch.frombuffer(bytearray(text.encode("ascii")), dtype=torch.uint8)
        return vocab, table[raw.long()]
    return vocab, torch.tensor([stoi[c] for c in text], dtype=torch.int64)


class WindowBatches:
    """Random (x, y) windows from a token stream; one pass = ``num_batches`` batches.

    Window starts are drawn from a generator seeded by ``(seed, epoch)``, so each
    epoch differs yet replays exactly. ``y`` is ``x`` shifted by one token.
    """

    def __init__(
        self,
        data: torch.Tensor,
        *,
        batch_size: int,
        block_size: int,
        num_batches: int,
        seed: int,
        stream: int = STREAM_TRAIN_ORDER,
    ) -> None:
        if data.numel() < block_size + 2:
            raise ValueError(f"token stream of {data.numel()} tokens is too short for block_size={block_size}.")
        self.data = data  # (N,) int64
        self.batch_size = batch_size
        self.block_size = block_size
        self.num_batches = num_batches
        self.seed = seed
        self.stream = stream  # separates the validation draw from the training draws
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = generator(self.seed, self.stream, self.epoch)
        # Draw every start of the epoch up front: the order is fixed before any batch is consumed.
        starts = torch.randint(0, self.data.numel() - self.block_size, (self.num_batches, self.batch_size), generator=g)
        offsets = torch.arange(self.block_size + 1)  # (T+1,)
        for s in starts:  # s: (B,)
            chunk = self.data[s[:, None] + offsets]  # (B, T+1), a fresh contiguous copy
            # Slices of chunk are strided; make them contiguous so y.view(-1) works in the loss.
            yield chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()  # x, y: (B, T) each

    def __repr__(self) -> str:
        return (
            f"WindowBatches(tokens={self.data.numel()}, batch_size={self.batch_size}, "
            f"block_size={self.block_size}, batches={self.num_batches}, epoch={self.epoch})"
        )


def gpt_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy in nats."""
    x, y = batch  # (B, T) int64 each
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def adamw_param_groups(params, weight_decay: float) -> list[dict]:
    """Decay only matrices (>= 2-D: Linear and Embedding weights), not biases or LayerNorm gains."""
    params = [p for p in params if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def warmup_cosine(optimizer: torch.optim.Optimizer, *, warmup: int, total: int, min_ratio: float = 0.1):
    """Linear warm-up over ``warmup`` steps, cosine decay to ``min_ratio * lr`` at ``total``, flat after."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def workload(
    seed: int = 0,
    *,
    batch_size: int = 16,
    block_size: int = 128,
    batches_per_epoch: int = 200,
    eval_batches: int = 8,
    n_layer: int = 4,
    n_head: int = 4,
    n_embd: int = 256,
    dropout: float = 0.0,
    lr: float = 1e-3,
    weight_decay: float = 0.1,
    warmup_steps: int = 20,
    lr_decay_steps: int = 5000,
) -> Workload:
    """The built-in character GPT workload.

    >>> w = workload(seed=0, batches_per_epoch=2)
    >>> w.name, w.tokens_per_batch, len(w.iter_batches())
    ('gpt-mini', 2048, 2)
    """
    text = load_corpus()
    vocab, ids = _encode(text)
    n_train = int(0.9 * ids.numel())  # contiguous 90/10 split: val is unseen text, not shuffled windows
    train, val = ids[:n_train], ids[n_train:]
    cfg = GPTConfig(
        vocab_size=len(vocab), block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd, dropout=dropout
    )

    # A fixed validation set: the same windows every time val_loss is measured.
    val_batches = list(
        WindowBatches(
            val, batch_size=batch_size, block_size=block_size, num_batches=eval_batches, seed=seed, stream=STREAM_VAL
        )
    )

    return Workload(
        name="gpt-mini",
        seed=seed,
        model=lambda: GPT(cfg),  # the engine seeds the global RNG before calling this
        batches=WindowBatches(
            train, batch_size=batch_size, block_size=block_size, num_batches=batches_per_epoch, seed=seed
        ),
        eval_batches=val_batches,
        loss=gpt_loss,
        optimizer=lambda params: torch.optim.AdamW(
            adamw_param_groups(params, weight_decay), lr=lr, betas=(0.9, 0.95)
        ),
        scheduler=lambda opt: warmup_cosine(opt, warmup=warmup_steps, total=lr_decay_steps),
        samples_per_batch=batch_size,
        tokens_per_batch=batch_size * block_size,
        extras={
            "corpus": CORPUS,
            "vocab": vocab,
            "vocab_size": len(vocab),
            "train_tokens": train.numel(),
            "val_tokens": val.numel(),
            "config": dataclasses.asdict(cfg),
        },
    )

"""A nanoGPT-style decoder-only transformer, sized for a CPU.

Transforms find things by name, so the layout is fixed:

- ``model.blocks``: an ``nn.ModuleList`` of identical :class:`Block` s
  (activation checkpointing and per-block compile wrap these);
- ``model.lm_head``: the final ``nn.Linear`` (C -> vocab), *not* tied to ``wte``;
- ``model(idx)`` returns logits ``(B, T, vocab)``; the loss lives in the workload;
- ``model.hidden(idx)`` returns the final-layernormed hidden states ``(B, T, C)``,
  so a fused chunked linear+cross-entropy can skip materialising the logits.

Example::

    model = GPT(GPTConfig(vocab_size=62))
    logits = model(torch.zeros(2, 8, dtype=torch.long))   # (2, 8, 62)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    vocab_size: int
    """Number of distinct tokens (characters here)."""
    block_size: int = 128
    """Longest context in tokens; sizes the learned position table. Attention cost grows as T^2."""
    n_layer: int = 4
    """Transformer blocks. Each adds ~12 * n_embd^2 parameters and one unit of activation memory."""
    n_head: int = 4
    """Attention heads; must divide n_embd. More heads = smaller head dim, same FLOPs."""
    n_embd: int = 256
    """Model width C. Parameters and FLOPs grow as C^2."""
    dropout: float = 0.0
    """Dropout probability. 0 keeps runs bit-comparable across transforms (no RNG in the step)."""
    bias: bool = True
    """Biases in Linear and LayerNorm. False is slightly faster and smaller."""

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}.\n"
                f"Tip: pick n_head from the divisors of {self.n_embd}, e.g. {self.n_embd // 64 or 1}."
            )


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        # One projection for q, k and v: one larger matmul beats three small ones.
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, T, C) -> (B, nh, T, hs): SDPA attends over the last two dims per head.
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # SDPA picks flash / memory-efficient / math kernels by device and dtype;
        # is_causal avoids building a (T, T) mask tensor.
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble heads: (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T, C)
        return x


class GPT(nn.Module):
    """Character GPT. Uses the global RNG for init: seed before constructing, never inside."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # token embeddings
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)  # learned absolute positions
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        # Untied from wte on purpose: keeps lm_head an ordinary Linear that
        # transforms (FSDP, a fused linear+CE) can treat on its own.
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=cfg.bias)
        self.apply(self._init_weights)
        # GPT-2 init: scale residual output projections by 1/sqrt(2 * n_layer) so
        # the residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Final-layernormed hidden states ``(B, T, C)`` for token ids ``idx`` ``(B, T)``."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(
                f"sequence length {T} exceeds block_size={self.config.block_size}.\n"
                f"Tip: crop the input to the last {self.config.block_size} tokens or build with a larger block_size."
            )
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C) + (T, C) broadcasts
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        return self.ln_f(x)  # (B, T, C)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab)`` for token ids ``idx`` ``(B, T)``."""
        return self.lm_head(self.hidden(idx))

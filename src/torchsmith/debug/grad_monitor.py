"""Gradient monitor: per-layer gradient norms over steps, with vanishing and exploding flags.

A layer is a module that owns parameters directly (``blocks.0.attn.c_attn``); its norm is
the L2 norm over its parameters' gradients. Recording is cheap: a post-accumulate-grad hook
per parameter only notes that its gradient arrived (no tensor work, no sync); at the end of
the step one ``torch._foreach_norm`` over all gradients and one over all weights are reduced
per layer on the device and read with **one** transfer per recorded step.

Flags (``report()``):

- **vanishing**: a layer's median ``|grad| / |weight|`` is below ``vanish_ratio``, or below
  ``vanish_rel`` times the best layer's: its weights barely move while others do;
- **exploding**: a layer's norm is non-finite, or jumps above ``spike`` times the median of
  its previous ``window`` recorded norms;
- **no_grad**: a layer with trainable parameters that never received a gradient.

Example::

    monitor = GradMonitor(model, optimizer=optimizer, every=1)   # records before each step()
    for batch in loader:
        loss_fn(model, batch).backward(); optimizer.step(); optimizer.zero_grad()
    report = monitor.report()
    [f.layer for f in report.flags]
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchsmith.debug.nan_sentinel import clean_name


@dataclass(frozen=True)
class GradFlag:
    layer: str
    kind: str
    """"vanishing", "exploding" or "no_grad"."""
    step: int | None
    """The step of the spike (exploding); None for a whole-run verdict."""
    value: float
    """The norm (exploding) or the median grad/weight ratio (vanishing)."""
    reason: str


@dataclass(frozen=True)
class GradReport:
    layers: list[str]
    """Layer names in parameter order (input side first for most models)."""
    steps: list[int]
    grad_norms: list[list[float]]
    """[recorded step][layer] L2 norm of the layer's gradients (nan: no gradient that step)."""
    weight_norms: list[list[float]]
    flags: list[GradFlag] = field(default_factory=list)

    def flagged(self, kind: str) -> list[str]:
        return list(dict.fromkeys(f.layer for f in self.flags if f.kind == kind))


class GradMonitor:
    """Record per-layer gradient norms every ``every`` steps.

    Pass ``optimizer`` to record automatically just before each ``optimizer.step()``; without
    it, call ``record()`` after backward. ``close()`` removes the hooks.
    """

    def __init__(self, model: nn.Module, *, every: int = 1, optimizer: torch.optim.Optimizer | None = None,
                 vanish_ratio: float = 1e-7, vanish_rel: float = 1e-4, spike: float = 10.0, window: int = 8):
        if every < 1:
            raise ValueError(f"every must be >= 1, found {every}.\nTip: every=1 records each step.")
        self.model, self.every = model, every
        self.vanish_ratio, self.vanish_rel, self.spike, self.window = vanish_ratio, vanish_rel, spike, window
        named = [(clean_name(n), p) for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        self.layers = list(dict.fromkeys(n.rpartition(".")[0] or n for n, _ in named))
        index = {name: i for i, name in enumerate(self.layers)}
        self._layer_of = torch.tensor([index[n.rpartition(".")[0] or n] for n, _ in named], dtype=torch.long)
        self._arrived: set[int] = set()
        self._calls = 0
        self.steps: list[int] = []
        self.grad_norms: list[list[float]] = []
        self.weight_norms: list[list[float]] = []
        self._handles = [p.register_post_accumulate_grad_hook(self._arrive(i)) for i, p in enumerate(self.params)]
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(lambda opt, args, kwargs: self.record()))

    def _arrive(self, i: int):
        def hook(p: torch.Tensor) -> None:
            self._arrived.add(i)  # Python only: no kernel, no sync
        return hook

    @torch.no_grad()
    def record(self) -> None:
        """Record this step's norms if it is an ``every``-th step (one device-to-host copy)."""
        self._calls += 1
        arrived, self._arrived = self._arrived, set()
        if (self._calls - 1) % self.every or not self.params:
            return
        device = self.params[0].device
        idx = sorted(i for i in arrived if self.params[i].grad is not None)
        n_layers = len(self.layers)
        sq = torch.zeros(2, n_layers, device=device, dtype=torch.float32)
        got = torch.zeros(n_layers, device=device, dtype=torch.float32)
        if idx:
            layer = self._layer_of[idx].to(device)
            gnorm = torch.stack(torch._foreach_norm([self.params[i].grad for i in idx])).float()  # type: ignore[misc]  # (P,); idx: grads not None
            sq[0].index_add_(0, layer, gnorm * gnorm)
            got.index_add_(0, layer, torch.ones_like(gnorm))
        wnorm = torch.stack(torch._foreach_norm(self.params)).float()  # type: ignore[arg-type]  # torch's stub wants list[Tensor]; no_grad: no per-parameter detach
        sq[1].index_add_(0, self._layer_of.to(device), wnorm * wnorm)
        norms = torch.cat([sq.sqrt(), got[None]]).cpu().tolist()  # the one sync of this step
        self.steps.append(self._calls)
        self.grad_norms.append([g if n > 0 else math.nan for g, n in zip(norms[0], norms[2], strict=True)])
        self.weight_norms.append(norms[1])

    def report(self) -> GradReport:
        """Everything recorded, with the flagged layers."""
        return GradReport(list(self.layers), list(self.steps), [list(r) for r in self.grad_norms],
                          [list(r) for r in self.weight_norms], self._flags())

    def _flags(self) -> list[GradFlag]:
        flags: list[GradFlag] = []
        ratios: dict[str, float] = {}
        for j, layer in enumerate(self.layers):
            col = [row[j] for row in self.grad_norms]
            seen = [(s, g) for s, g in zip(self.steps, col, strict=True) if not math.isnan(g)]
            if col and not seen:
                flags.append(GradFlag(layer, "no_grad", None, math.nan, "never received a gradient"))
                continue
            for k, (s, g) in enumerate(seen):
                past = [v for _, v in seen[max(0, k - self.window):k] if math.isfinite(v)]
                if not math.isfinite(g):
                    flags.append(GradFlag(layer, "exploding", s, g, "gradient norm is not finite"))
                elif len(past) >= 3 and g > self.spike * statistics.median(past) > 0:
                    flags.append(GradFlag(layer, "exploding", s, g,
                                          f"norm {g:.3g} is {g / statistics.median(past):.0f}x "
                                          f"the median {statistics.median(past):.3g} of its last {len(past)} steps"))
            rs = [g / w for (g, w) in ((row[j], wrow[j])
                                       for row, wrow in zip(self.grad_norms, self.weight_norms, strict=True))
                  if math.isfinite(g) and w > 0]
            if rs:
                ratios[layer] = statistics.median(rs)
        best = max(ratios.values(), default=0.0)
        for layer, r in ratios.items():
            if r < self.vanish_ratio or r < self.vanish_rel * best:
                flags.append(GradFlag(layer, "vanishing", None, r, f"median |grad|/|weight| {r:.2e} "
                                      f"(best layer {best:.2e}; thresholds {self.vanish_ratio:g}, "
                                      f"{self.vanish_rel:g}x best)"))
        return flags

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> GradMonitor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

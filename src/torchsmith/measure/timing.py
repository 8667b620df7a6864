"""Per-step phase timing: data wait, forward, backward, optimizer.

On CPU the work is synchronous, so ``perf_counter`` at phase boundaries is exact and
costs well under a microsecond. On CUDA, kernels run asynchronously; the timer then
calls ``torch.cuda.synchronize`` at each boundary (a CPU-GPU sync point), which is
why phase timing on CUDA is opt-in and step-level timing syncs only once per step.

Example::

    timer = PhaseTimer()
    with timer.phase("forward"):
        loss = model(x).sum()
    timer.end_step()
    timer.summary(warmup=0).median["forward"]
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

PHASES = ("data", "forward", "backward", "optimizer")


@dataclass(frozen=True)
class PhaseSummary:
    """Median seconds per phase and per step, over the steps after warm-up."""

    steps: int
    median: dict[str, float]
    step_median: float
    step_times: list[float]


@dataclass
class PhaseTimer:
    sync_cuda: bool = False
    """Synchronise CUDA at every phase boundary (exact phases, slower steps)."""
    steps: list[dict[str, float]] = field(default_factory=list)
    _current: dict[str, float] = field(default_factory=dict)

    def _now(self) -> float:
        if self.sync_cuda:
            torch.cuda.synchronize()  # CPU-GPU sync point: only when phase timing was asked for
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        start = self._now()
        try:
            yield
        finally:
            self._current[name] = self._current.get(name, 0.0) + self._now() - start

    def add(self, name: str, seconds: float) -> None:
        self._current[name] = self._current.get(name, 0.0) + seconds

    def end_step(self) -> dict[str, float]:
        done, self._current = self._current, {}
        done["step"] = sum(done.get(p, 0.0) for p in PHASES)
        self.steps.append(done)
        return done

    def summary(self, warmup: int = 2) -> PhaseSummary:
        timed = self.steps[warmup:] if len(self.steps) > warmup else self.steps[-1:]
        if not timed:
            return PhaseSummary(0, {p: 0.0 for p in PHASES}, 0.0, [])
        median = {p: statistics.median(s.get(p, 0.0) for s in timed) for p in PHASES}
        steps = [s["step"] for s in timed]
        return PhaseSummary(len(timed), median, statistics.median(steps), steps)

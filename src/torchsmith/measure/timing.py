"""Per-step phase timing: data wait, forward, backward, optimizer.

On CPU the work is synchronous, so ``perf_counter`` at phase boundaries is exact and
costs well under a microsecond. On CUDA, kernels run asynchronously: ``sync_cuda`` calls
``torch.cuda.synchronize`` at every phase boundary (a CPU-GPU sync point each), which is
why it is opt-in; ``sync_step`` instead syncs once, at the end of the step, so the step
time is exact while the phases are only the time spent launching their kernels.

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
    sync_step: bool = False
    """Synchronise CUDA once per step, in ``end_step``: the step is timed from its first phase to
    the sync (exact on CUDA), phases are launch times. Ignored when ``sync_cuda`` is set."""
    steps: list[dict[str, float]] = field(default_factory=list)
    _current: dict[str, float] = field(default_factory=dict)
    _started: float | None = None

    def _now(self) -> float:
        if self.sync_cuda:
            torch.cuda.synchronize()  # CPU-GPU sync point: only when phase timing was asked for
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        start = self._now()
        if self._started is None:
            self._started = start
        try:
            yield
        finally:
            self._current[name] = self._current.get(name, 0.0) + self._now() - start

    def add(self, name: str, seconds: float) -> None:
        self._current[name] = self._current.get(name, 0.0) + seconds

    def end_step(self) -> dict[str, float]:
        done, self._current = self._current, {}
        if self.sync_step and not self.sync_cuda and self._started is not None:
            torch.cuda.synchronize()  # CPU-GPU sync point: once per step, so the step time is real
            done["step"] = done.get("data", 0.0) + time.perf_counter() - self._started
        else:
            done["step"] = sum(done.get(p, 0.0) for p in PHASES)
        self._started = None
        self.steps.append(done)
        return done

    def summary(self, warmup: int = 2) -> PhaseSummary:
        timed = self.steps[warmup:] if len(self.steps) > warmup else self.steps[-1:]
        if not timed:
            return PhaseSummary(0, {p: 0.0 for p in PHASES}, 0.0, [])
        median = {p: statistics.median(s.get(p, 0.0) for s in timed) for p in PHASES}
        steps = [s["step"] for s in timed]
        return PhaseSummary(len(timed), median, statistics.median(steps), steps)

"""Measure several plans side by side on one workload, in one process, interleaved.

Each plan gets its own fresh model and optimizer built from the same seed, and sees the
same batches in the same order. Steps are interleaved round-robin (A B C A B C ...), so
a burst of noise on a shared machine hits every plan alike, and the figures that matter
are ratios between plans of the same run.

Because every plan starts from the same seed and sees the same batches, the losses and
final parameters recorded here are also what the numerical-equivalence guard compares.

Example::

    ms = measure_plans(load_workload("mlp"), [Plan(), Plan(threads=Threads(intra_op=1))])
    print(ms[1].step_seconds / ms[0].step_seconds)   # > 1: one thread is slower
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterator, Sequence

import torch

from torchsmith.engine.loop import build_step, resolve_device
from torchsmith.engine.step import Step, to_device
from torchsmith.plan import Plan
from torchsmith.workload import Workload


@dataclass(frozen=True)
class PlanMeasurement:
    plan: Plan
    step_seconds: float | None
    """Median seconds per step (data wait included) over the timed steps."""
    step_times: list[float] = field(default_factory=list)
    first_step_seconds: float | None = None
    """The first step, including one-off costs such as compilation."""
    peak_memory_bytes: int | None = None
    losses: list[float] = field(default_factory=list)
    """Loss of every step, warm-up included, from the same seed and batches as every plan."""
    loss_rel_diff: float | None = None
    """max over steps of |loss - reference loss| / |reference loss|."""
    param_rel_diff: float | None = None
    """||params - reference params|| / ||reference params - initial params||: how far the final
    parameters differ, relative to how far training moved them."""
    error: str | None = None
    """Why the plan could not be measured (a refused transform, an OOM, a failed compile)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def compile_seconds(self) -> float | None:
        if self.first_step_seconds is None or self.step_seconds is None or not self.plan.compile.enabled:
            return None
        return max(0.0, self.first_step_seconds - self.step_seconds)


StepTimer = Callable[[Plan, Callable[[], Any]], float]
"""``clock(plan, run_step) -> seconds``: runs one step of ``plan`` and returns its duration.
Tests replace it to stub the timing source."""


def wall_clock(plan: Plan, fn: Callable[[], Any]) -> float:
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        torch.cuda.synchronize()  # CPU-GPU sync point: kernels are asynchronous, time them to completion
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


@contextmanager
def _threads(plan: Plan) -> Iterator[None]:
    """Thread count is process-global: set each plan's own around each of its steps."""
    before = torch.get_num_threads()
    if plan.threads.intra_op is not None:
        torch.set_num_threads(plan.threads.intra_op)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure_plans(workload: Workload, plans: Sequence[Plan], *, warmup: int = 2, steps: int = 6,
                  device: str | torch.device | None = None, reference: int = 0, measure_memory: bool = True,
                  clock: StepTimer = wall_clock, on_step: Callable[[int, int], None] | None = None,
                  ) -> list[PlanMeasurement]:
    """Measure ``plans`` interleaved over ``warmup + steps`` steps each; compare to ``plans[reference]``.

    A plan that fails to apply or to run is returned with ``error`` set; the others go on.
    ``on_step(done, total)`` reports progress.
    """
    device = resolve_device(device)
    total_steps = warmup + steps
    batches = list(islice(_cycle(workload), total_steps))
    states = [_State.build(workload, plan, device) for plan in plans]
    done, total = 0, total_steps * len(plans)
    for i, batch in enumerate(batches):
        for state in states:
            state.step(batch, clock)
            done += 1
            if on_step:
                on_step(done, total)
    if measure_memory:
        for state in states:
            state.measure_peak(batches[0], device)
    ref = states[reference]
    return [state.result(ref, warmup) for state in states]


def _cycle(workload: Workload) -> Iterator[Any]:
    epoch = 0
    while True:
        source = workload.iter_batches()
        if hasattr(source, "set_epoch"):
            source.set_epoch(epoch)
        yield from source
        epoch += 1


@dataclass
class _State:
    plan: Plan
    step_fn: Step | None
    initial: list[torch.Tensor]
    losses: list[torch.Tensor] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    peak: int | None = None
    error: str | None = None

    @classmethod
    def build(cls, workload: Workload, plan: Plan, device: torch.device) -> "_State":
        try:
            with _threads(plan):
                step_fn = build_step(workload, plan, device)
        except Exception as err:  # refused transform, bad config: recorded, not fatal
            return cls(plan, None, [], error=_describe(err))
        initial = [p.detach().clone() for p in step_fn.model.parameters()]
        return cls(plan, step_fn, initial)

    def step(self, batch: Any, clock: StepTimer) -> None:
        if self.error is not None:
            return
        try:
            with _threads(self.plan):
                moved = to_device(batch, self.step_fn.parts.device)
                self.times.append(clock(self.plan, lambda: self.losses.append(self.step_fn(moved))))
        except Exception as err:
            self.error = _describe(err)

    def measure_peak(self, batch: Any, device: torch.device) -> None:
        if self.error is not None:
            return
        from torchsmith.measure.memory import track_peak_memory

        # One extra step, outside the timed ones: tracking slows a step down. The RNG is
        # forked so this step does not shift any random stream the next one would draw.
        try:
            with torch.random.fork_rng(devices=[]), _threads(self.plan):
                parts = self.step_fn.parts
                with track_peak_memory(device, live=(parts.model, parts.optimizer)) as mem:
                    self.step_fn(batch)
            self.peak = mem.result.peak_bytes
        except Exception as err:
            self.error = _describe(err)

    def result(self, ref: "_State", warmup: int) -> PlanMeasurement:
        if self.error is not None or not self.times:
            return PlanMeasurement(self.plan, None, error=self.error or "no step ran")
        losses = torch.stack(self.losses).float().tolist()
        timed = self.times[warmup:] or self.times[-1:]
        loss_diff = param_diff = None
        if ref.error is None and ref.losses:
            ref_losses = torch.stack(ref.losses).float().tolist()
            loss_diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
            param_diff = _param_rel_diff(self.step_fn, ref.step_fn, ref.initial)
        return PlanMeasurement(
            plan=self.plan, step_seconds=statistics.median(timed), step_times=timed,
            first_step_seconds=self.times[0], peak_memory_bytes=self.peak, losses=losses,
            loss_rel_diff=loss_diff, param_rel_diff=param_diff,
        )


def _param_rel_diff(a: Step, b: Step, initial: list[torch.Tensor]) -> float:
    """Distance between two runs' parameters, relative to the distance training moved them."""
    diff = moved = 0.0
    for pa, pb, p0 in zip(a.model.parameters(), b.model.parameters(), initial):
        pa, pb = pa.detach().float(), pb.detach().float()
        diff += (pa - pb).pow(2).sum().item()
        moved += (pb - p0.float()).pow(2).sum().item()
    return (diff ** 0.5) / max(moved ** 0.5, 1e-12)


def _describe(err: Exception) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__

"""Measure several plans side by side on one workload, in one process, interleaved.

Each plan gets its own fresh model and optimizer built from the same seed, its own batch
source (so a plan's DataLoader arguments take effect, and the time spent waiting for data
counts in its step), and its own copy of the global RNG stream, so every plan sees the same
batches and the same dropout masks as a run of its own would. Steps are interleaved
round-robin (A B C A B C ...), so a burst of noise on a shared machine hits every plan
alike, and the figures that matter are ratios between plans of the same run.

Plans with DataLoader workers are measured one after another instead: interleaved, their
workers would prefetch during the other plans' turns and look faster than they are. Their
step times are bursty (a step that finds a batch ready is fast, the next one waits), so the
figure is then the mean over the timed steps, the throughput, rather than the median, which
would count only the fast steps; and the warm-up also drains the batches prefetched while
the workers started.

Because every plan starts from the same seed and sees the same batches, the losses and
final parameters recorded here are also what the numerical-equivalence guard compares.

Example::

    ms = measure_plans(load_workload("mlp"), [Plan(), Plan(threads=Threads(intra_op=1))])
    ms[1].step_seconds / ms[0].step_seconds   # > 1: one thread is slower
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from torchsmith.engine.loop import build_step, resolve_device
from torchsmith.engine.step import Step
from torchsmith.harness.loss_guard import compare_losses
from torchsmith.plan import Plan
from torchsmith.seeding import rng_state, set_rng_state
from torchsmith.text import first_line
from torchsmith.transforms.base import TransformError
from torchsmith.workload import Workload


@dataclass(frozen=True)
class PlanMeasurement:
    plan: Plan
    step_seconds: float | None
    """Seconds per step (data wait included) over the timed steps: their median, or their mean
    when a plan with DataLoader workers is among those measured (see the module docstring)."""
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
    refused: bool = False
    """The error is a transform refusing this model (``TransformError``), not a failure while running."""
    interleaved: bool = True
    """Its steps ran round-robin with the other plans' (False: one plan after another, with workers)."""

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
                  compare_steps: int | None = None,
                  shard: Callable[[Any], Any] | None = None) -> list[PlanMeasurement]:
    """Measure ``plans`` over ``warmup + steps`` steps each; compare to ``plans[reference]``.

    Losses and parameters are compared over the first ``compare_steps`` steps (None: all of
    them), so the comparison's horizon does not grow with the steps that timing needs.
    A plan that fails to apply or to run is returned with ``error`` set; the others go on.
    ``on_step(done, total)`` reports progress. ``shard(batch)`` is this rank's slice of a global batch,
    inside a process group (``harness.rank_round``); None trains on the whole batch.
    """
    device = resolve_device(device)
    interleave = not any(_has_workers(plan) for plan in plans)
    if not interleave:  # every plan runs the same steps: the guard compares their final parameters
        warmup += max(_prefetch_depth(plan) for plan in plans)
    total_steps = warmup + steps
    if compare_steps is not None and compare_steps >= total_steps:
        compare_steps = None  # every step is compared: the final parameters serve, no copy needed
    states = [_State.build(workload, plan, device, compare_steps, shard) for plan in plans]
    # Interleaved rounds rotate which plan goes first, so no plan always follows the same neighbour.
    rounds = ([states[i % len(states):] + states[:i % len(states)] for i in range(total_steps)] if interleave
              else [[s] * total_steps for s in states])
    done, total = 0, total_steps * len(plans)
    try:
        for group in rounds:
            for state in group:
                state.step(clock)
                done += 1
                if on_step:
                    on_step(done, total)
        if measure_memory:
            for state in states:
                state.measure_peak(device)
    finally:
        for state in states:
            state.close()
    ref = states[reference]
    summary = statistics.median if interleave else statistics.fmean
    return [replace(state.result(ref, warmup, summary), interleaved=interleave) for state in states]


WORKER_BLOCK = 4
"""Steps per pair for plans measured one after another: a pipeline with DataLoader workers is bursty
(a step that finds a batch ready is fast, the next waits), so a pair compares blocks of steps."""


def paired_seconds(reference: PlanMeasurement, m: PlanMeasurement) -> tuple[list[float], list[float]]:
    """The step times of ``reference`` and ``m`` as pairs for a speedup interval (``measure.intervals``).

    A pair is one interleaved round of steps, not one ``measure_plans`` call: step ``i`` of every
    plan ran within the same round-robin round, seconds apart, under the same load, so the pair's
    ratio cancels the machine's drift; and a workload's noise lives from step to step inside the
    process (DESIGN.md, "Measuring honestly"), so steps are the level to repeat at. Counting whole
    calls as pairs would need three calls per candidate before an interval exists, tripling the
    budget. Plans measured one after another (DataLoader workers) pair the means of blocks of
    ``WORKER_BLOCK`` steps instead: their single steps are bursty, and not side by side anyway.
    """
    # A step timed at zero (a coarse clock) has no ratio: its pair is left out.
    kept = [(x, y) for x, y in zip(reference.step_times, m.step_times, strict=False) if x > 0 and y > 0]
    a, b = [x for x, _ in kept], [y for _, y in kept]
    n = len(kept)
    if reference.interleaved and m.interleaved:
        return a, b
    block = min(WORKER_BLOCK, max(n // 2, 1))
    cut = n - n % block
    return ([statistics.fmean(a[i:i + block]) for i in range(0, cut, block)],
            [statistics.fmean(b[i:i + block]) for i in range(0, cut, block)])


def refusal(workload: Workload, plan: Plan, device: str | torch.device | None = None) -> PlanMeasurement | None:
    """Why ``plan`` cannot apply to ``workload`` (a refused transform, a bad config), as an unmeasured
    ``PlanMeasurement`` with ``error`` set, without running a step; None when it applies. Builds the
    model and the batch source, then drops them."""
    state = _State.build(workload, plan, resolve_device(device))
    state.close()
    if state.error is None:
        return None
    return PlanMeasurement(plan, None, error=state.error, refused=state.refused)


def _has_workers(plan: Plan) -> bool:
    return bool(getattr(plan, "loader", None) is not None and plan.loader.num_workers)


def _prefetch_depth(plan: Plan) -> int:
    """Batches the plan's workers hold ready once started (DataLoader's default prefetch_factor is 2)."""
    return (plan.loader.num_workers or 0) * (plan.loader.prefetch_factor or 2) if _has_workers(plan) else 0


@contextmanager
def _own_rng(state: _State) -> Iterator[None]:
    """Run with this plan's own global-RNG stream, then hand the caller's back."""
    outer = rng_state()
    assert state.rng is not None  # only states that built (error is None) run steps
    set_rng_state(state.rng)
    try:
        yield
    finally:
        state.rng = rng_state()
        set_rng_state(outer)


@dataclass
class _State:
    plan: Plan
    step_fn: Step | None
    initial: list[torch.Tensor]
    rng: dict[str, Any] | None = None
    batches: Iterator[Any] | None = None
    first_batch: Any = None
    losses: list[torch.Tensor] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    compare_steps: int | None = None
    shard: Callable[[Any], Any] | None = None
    compared: list[torch.Tensor] | None = None
    """The parameters after ``compare_steps`` steps, when that is fewer than the steps run."""
    peak: int | None = None
    error: str | None = None
    refused: bool = False
    _close: Callable[[], None] | None = None

    @classmethod
    def build(cls, workload: Workload, plan: Plan, device: torch.device, compare_steps: int | None = None,
              shard: Callable[[Any], Any] | None = None) -> _State:
        from torchsmith.transforms.loader import apply_loader

        try:
            with _threads(plan):
                step_fn = build_step(workload, plan, device)  # seeds the global RNG, builds the model
            source, loader_change = apply_loader(workload, plan.loader)
        except Exception as err:  # refused transform, bad config: recorded, not fatal
            return cls(plan, None, [], error=_describe(err), refused=isinstance(err, TransformError))
        initial = [p.clone() for p in full_parameters(step_fn.model)]
        return cls(plan, step_fn, initial, rng=rng_state(), batches=workload.cycle(source),
                   compare_steps=compare_steps, shard=shard, _close=loader_change.revert)

    def step(self, clock: StepTimer) -> None:
        if self.error is not None:
            return
        assert self.step_fn is not None  # None only when build failed (error set)

        def one_step() -> None:
            assert self.step_fn is not None and self.batches is not None  # as above (closures lose narrowing)
            # Waiting for the next batch is part of the step: a data-bound plan pays for it here.
            batch = next(self.batches)
            if self.shard is not None:
                batch = self.shard(batch)
            if self.first_batch is None:
                self.first_batch = batch
            self.losses.append(self.step_fn(batch))

        try:
            with _threads(self.plan), _own_rng(self):
                self.times.append(clock(self.plan, one_step))
        except Exception as err:
            self.error = _describe(err)
            # A transform that checks the first batch (the chunked loss: its targets, its loss as written)
            # refuses there as at apply time: the plan does not apply to this workload, it did not fail.
            self.refused = isinstance(err, TransformError)
            return
        if len(self.losses) == self.compare_steps:  # outside the clock: a copy is not part of the step
            self.compared = [p.clone() for p in full_parameters(self.step_fn.model)]

    def measure_peak(self, device: torch.device) -> None:
        if self.error is not None or self.first_batch is None:
            return
        assert self.step_fn is not None  # None only when build failed (error set)
        from torchsmith.measure.memory import track_peak_memory

        # One extra step on the first batch, outside the timed ones: tracking slows a step down.
        try:
            with _threads(self.plan), _own_rng(self):
                parts = self.step_fn.parts
                with track_peak_memory(device, live=(parts.model, parts.optimizer)) as mem:
                    self.step_fn(self.first_batch)
            self.peak = mem.result.peak_bytes
        except Exception as err:
            self.error = _describe(err)

    def params_compared(self) -> list[torch.Tensor]:
        assert self.step_fn is not None  # called only on states that built and ran
        return self.compared if self.compared is not None else full_parameters(self.step_fn.model)

    def close(self) -> None:
        """Stop this plan's DataLoader workers, if any."""
        if self._close is not None:
            self._close()
            self._close = None

    def result(self, ref: _State, warmup: int, summary: Callable[[list[float]], float]) -> PlanMeasurement:
        if self.error is not None or not self.times:
            return PlanMeasurement(self.plan, None, error=self.error or "no step ran", refused=self.refused)
        losses = torch.stack(self.losses).float().tolist()
        timed = self.times[warmup:] or self.times[-1:]
        loss_diff = param_diff = None
        if ref.error is None and ref.losses:
            ref_losses = torch.stack(ref.losses).float().tolist()
            horizon = self.compare_steps or len(losses)
            # A non-finite loss on either side makes the figure NaN, never a pass (loss_guard.py).
            loss_diff = compare_losses(losses, ref_losses, steps=horizon).rel_diff
            param_diff = param_distance(self.params_compared(), ref.params_compared(), ref.initial)
        return PlanMeasurement(
            plan=self.plan, step_seconds=summary(timed), step_times=timed,
            first_step_seconds=self.times[0], peak_memory_bytes=self.peak, losses=losses,
            loss_rel_diff=loss_diff, param_rel_diff=param_diff,
        )


def full_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    """The model's parameters, detached and whole: FSDP2 holds each as a DTensor shard, which is
    gathered (a collective: every rank of the group calls this in the same order) so that plans with
    different strategies compare parameter by parameter."""
    out = []
    for p in model.parameters():
        full = getattr(p, "full_tensor", None)  # DTensor's; imported lazily, like FSDP2 itself
        out.append((full() if callable(full) else p).detach())
    return out


def param_distance(a: list[torch.Tensor], b: list[torch.Tensor], initial: list[torch.Tensor]) -> float:
    """Distance between two runs' parameters, relative to the distance training moved ``b``'s: NaN
    when a parameter is non-finite.

    Example::

        param_distance([p + 0.1 for p in p0], [p + 1.0 for p in p0], p0)   # 0.9 of the distance b moved
    """
    diff = moved = 0.0
    for pa, pb, p0 in zip(a, b, initial, strict=True):
        pa, pb = pa.detach().float(), pb.detach().float()
        diff += (pa - pb).pow(2).sum().item()
        moved += (pb - p0.float()).pow(2).sum().item()
    if not (math.isfinite(diff) and math.isfinite(moved)):
        return math.nan  # a NaN or Inf parameter: no distance to speak of, and never a pass
    return (diff ** 0.5) / max(moved ** 0.5, 1e-12)


def _describe(err: Exception) -> str:
    first = first_line(str(err))
    return f"{type(err).__name__}: {first}" if first else type(err).__name__

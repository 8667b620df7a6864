"""Each registered transform alone against the eager fp32 baseline, measured side by side.

The candidates come from the transforms' own registry (``engine.space``), so a new
transform shows up here without a change to this file. Every candidate plan differs
from ``Plan()`` in exactly one knob, and all of them run interleaved in one process from
the same seed over the same batches (:func:`torchsmith.harness.compare.measure_plans`),
each paired with its own baseline, step by step.

Example::

    rows = measure_candidates(load_workload("mlp"), steps=4, warmup=1)
    [(r.label, r.speed) for r in rows if r.ok]
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchsmith.engine.registry import registered_transforms
from torchsmith.engine.space import device_info, search_space
from torchsmith.harness.compare import PlanMeasurement, measure_plans
from torchsmith.plan import Plan
from torchsmith.transforms.base import TransformInfo
from torchsmith.workload import Workload


@dataclass(frozen=True)
class TipCandidate:
    transform: str
    plan: Plan

    @property
    def label(self) -> str:
        return self.plan.describe()


@dataclass(frozen=True)
class TipRow:
    """One candidate's figures, as ratios to the baseline of the same run."""

    transform: str
    label: str
    plan: Plan
    speed: float | None
    """Baseline step time / this step time, above 1 is faster: the median over rounds of the
    ratio of the two steps of the same round, which ran seconds apart. Pairing by round cancels
    load that drifts over the run, which a ratio of two medians would not."""
    speed_best: float | None
    """Baseline's fastest step / this plan's fastest step: a second view of ``speed``; where the
    two disagree, a burst of load from other processes hit this pair."""
    memory: float | None
    """This peak memory / the baseline's: below 1 uses less."""
    loss_rel_diff: float | None
    """Largest relative difference of the per-step loss from the baseline's, same batches and seed."""
    param_rel_diff: float | None
    step_seconds: float | None
    peak_memory_bytes: int | None
    compile_seconds: float | None
    error: str | None
    noise: float | None = None
    """Interquartile range / median of the per-round ratios: a speed closer to 1 than this is
    within the machine's noise."""

    @property
    def ok(self) -> bool:
        return self.error is None


def candidates(device: torch.device, only: list[str] | None = None,
               extra: tuple[TransformInfo, ...] = ()) -> list[TipCandidate]:
    """One plan per registered candidate value that applies to ``device``, in the tuner's order.
    ``extra`` adds transforms of your own to the registered ones."""
    known = registered_transforms(extra)
    unknown = sorted(set(only or ()) - set(known))
    if unknown:
        raise ValueError(f"no transform named {', '.join(map(repr, unknown))}; registered: "
                         f"{', '.join(sorted(known))}.\nTip: pass one of those to --only.")
    out = []
    for dim in search_space(device_info(device), extra):
        if only and dim.name not in only:
            continue
        for value in dim.candidates:
            out.append(TipCandidate(dim.name, Plan().replace(**{dim.plan_field: value})))
    return out


def measure_candidates(workload: Workload, *, steps: int = 6, warmup: int = 2, device: Any = None,
                       only: list[str] | None = None, on_step: Callable[[int, int], None] | None = None,
                       ) -> tuple[PlanMeasurement, list[TipRow]]:
    """Measure every candidate against the baseline; return the baseline and one row per candidate.

    Each candidate runs in its own pair with a fresh baseline built from the same seed,
    alternating steps (B C B C ...), so every candidate step has a baseline step beside it,
    seconds apart. On a shared machine load comes in bursts of seconds; a round over all
    candidates at once would spread one burst unevenly over them.
    """
    from torchsmith.engine.loop import resolve_device

    device = resolve_device(device)
    cands = candidates(device, only)
    per_pair, total = 2 * (warmup + steps), 2 * (warmup + steps) * len(cands)
    rows, baselines = [], []
    for i, c in enumerate(cands):
        progress = (lambda done, _, i=i: on_step(i * per_pair + done, total)) if on_step else None
        base, m = measure_plans(workload, [Plan(), c.plan], warmup=warmup, steps=steps, device=device,
                                on_step=progress)
        rows.append(tip_row(c, m, base))
        baselines.append(base)
    if not cands:
        baselines = measure_plans(workload, [Plan()], warmup=warmup, steps=steps, device=device, on_step=on_step)
    return _pool(baselines), rows


def _pool(baselines: list[PlanMeasurement]) -> PlanMeasurement:
    """One baseline figure from the baseline of every pair (same seed and batches, so same losses)."""
    ok = [b for b in baselines if b.ok]
    if not ok:
        return baselines[0]
    times = [t for b in ok for t in b.step_times]
    peaks = [b.peak_memory_bytes for b in ok if b.peak_memory_bytes is not None]
    return dataclasses.replace(ok[0], step_seconds=statistics.median(times), step_times=times,
                               peak_memory_bytes=max(peaks) if peaks else None)


def tip_row(c: TipCandidate, m: PlanMeasurement, base: PlanMeasurement) -> TipRow:
    """One candidate's row: its speed and memory against ``base``'s, measured in the same rounds."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    # Timed steps are listed in round order for every plan: step i of each ran in round i.
    paired = [b / t for b, t in zip(base.step_times, m.step_times, strict=False) if t > 0] if m.ok else []
    return TipRow(
        transform=c.transform, label=c.label, plan=c.plan,
        speed=statistics.median(paired) if paired else None,
        speed_best=ratio(min(base.step_times, default=None), min(m.step_times, default=None)) if m.ok else None,
        memory=ratio(m.peak_memory_bytes, base.peak_memory_bytes) if m.ok else None,
        loss_rel_diff=m.loss_rel_diff, param_rel_diff=m.param_rel_diff,
        step_seconds=m.step_seconds, peak_memory_bytes=m.peak_memory_bytes,
        compile_seconds=m.compile_seconds, error=m.error,
        noise=_spread(paired) if paired else None,
    )


def _spread(values: list[float]) -> float:
    """Interquartile range / median."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(values)

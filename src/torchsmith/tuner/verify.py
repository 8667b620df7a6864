"""``verify``: an independent A/B of a plan against the workload as written, for CI.

The same statistics as ``tune``: the plan and the as-written baseline run interleaved, step by
step, in rounds of fresh models from the same seed; every step is a pair; the rounds pool into a
95% interval of the speedup (``measure.intervals``), and rounds are added while the interval
cannot yet tell whether the plan is slower, as long as the budget allows. The plan is
*measurably slower* only when the whole interval lies below 1.0: a CI gate that fails the build
on a regression, never on noise.

Example::

    result = verify(load_workload("mlp"), Plan.load("plan.json"), budget_seconds=60)
    result.slower        # True: exit 1
    result.interval.describe()   # '1.38x (95% interval 1.29-1.47, 24 pairs)'
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from torchsmith.engine.loop import resolve_device
from torchsmith.harness.compare import PlanMeasurement, StepTimer, measure_plans, wall_clock
from torchsmith.measure.intervals import NOISE_MARGIN, SpeedupInterval, Verdict
from torchsmith.plan import Plan
from torchsmith.tuner.pace import MIN_PROOF_STEPS, Pace
from torchsmith.tuner.rounds import Round, Rounds
from torchsmith.workload import Workload

logger = logging.getLogger(__name__)

MAX_ROUNDS = 4
"""Rounds at most: the first, then up to three more while the interval cannot decide."""


class VerifyError(ValueError):
    """The plan or the workload cannot be measured: a refused transform, a failing step, a tiny budget."""


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    workload: str
    plan: Plan
    interval: SpeedupInterval
    """The plan's speedup over the as-written baseline (> 1: faster), every kept round pooled."""
    rounds: int
    """Rounds measured (each a fresh pair of models, interleaved step by step)."""
    steps_per_round: int
    baseline_step_seconds: float | None
    plan_step_seconds: float | None
    elapsed_seconds: float
    budget_seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return self.interval.verdict(NOISE_MARGIN)

    @property
    def slower(self) -> bool:
        """Measurably slower: the whole 95% interval lies below 1.0 (the exit-1 case)."""
        return self.interval.high < 1.0

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "plan": self.plan.to_dict(), "speedup": self.interval.to_json(),
                "verdict": self.verdict, "slower": self.slower, "rounds": self.rounds,
                "steps_per_round": self.steps_per_round,
                "baseline": {"step_seconds": self.baseline_step_seconds},
                "plan_measured": {"step_seconds": self.plan_step_seconds}, "notes": list(self.notes)}


def verify(workload: Workload, plan: Plan, *, budget_seconds: float = 60.0, device: str | None = None,
           warmup: int = 2, clock: StepTimer = wall_clock) -> VerifyResult:
    """Measure ``plan`` beside the as-written plan within ``budget_seconds``; see the module docstring."""
    start = time.perf_counter()
    dev = resolve_device(device)
    first = _round(workload, [Plan(), plan], warmup=1, steps=2, device=dev, clock=clock)  # warms caches, times a step
    step_s = max((m.step_seconds or 0.0) for m in first) or 1e-3
    pace = Pace.calibrated(budget_seconds, step_s, warmup, 2 * MAX_ROUNDS, start)
    steps = max(pace.steps, MIN_PROOF_STEPS)
    evidence = Rounds()
    while not evidence.rounds or evidence.adaptive(MAX_ROUNDS, goal="no_regression").need_more():
        # A dropped burst can leave the kept pairs short of the cap: the round count bounds the loop too.
        if evidence.rounds and (len(evidence.rounds) >= MAX_ROUNDS or not _time_for(pace, steps)):
            break
        began = time.perf_counter()
        base_m, plan_m = _round(workload, [Plan(), plan], warmup=warmup, steps=steps, device=dev, clock=clock)
        pace.record(time.perf_counter() - began, 2, steps)
        evidence.add(Round(baseline=base_m, reference=base_m, candidate=plan_m))
        logger.info("verify round %d: %s", len(evidence.rounds), evidence.versus_baseline().describe())
    interval = evidence.versus_baseline()
    notes = []
    if len(evidence.kept()) < len(evidence.rounds):
        notes.append("one round was dropped as a burst: its ratio lay outside the interval of the others.")
    if pace.elapsed() > budget_seconds:
        notes.append(f"took {pace.elapsed():.0f} s, over the budget of {budget_seconds:.0f} s: one round is the "
                     "least that measures anything.")
    kept = evidence.kept()[0]
    return VerifyResult(workload=workload.name, plan=plan, interval=interval, rounds=len(evidence.rounds),
                        steps_per_round=steps, baseline_step_seconds=kept.baseline.step_seconds,
                        plan_step_seconds=kept.candidate.step_seconds, elapsed_seconds=pace.elapsed(),
                        budget_seconds=budget_seconds, notes=notes)


def _time_for(pace: Pace, steps: int) -> bool:
    """Another round of both plans still fits the budget."""
    return pace.elapsed() + pace.estimate(2, steps) <= pace.budget_seconds


def _round(workload: Workload, plans: list[Plan], *, warmup: int, steps: int, device: torch.device,
           clock: StepTimer) -> list[PlanMeasurement]:
    ms = measure_plans(workload, plans, warmup=warmup, steps=steps, device=device, clock=clock,
                       measure_memory=False)
    for which, m in zip(("the as-written plan", "the plan"), ms, strict=True):
        if m.error:
            tip = ("check the plan with `torchsmith run WORKLOAD --plan plan.json --steps 1`" if which == "the plan"
                   else "check that `torchsmith run WORKLOAD --steps 1` works")
            raise VerifyError(f"{which} of {workload.name} could not be measured: {m.error}.\nTip: {tip}.")
    return ms

"""``verify``: an independent A/B of a plan against the workload as written, for CI.

The same statistics as ``tune``'s proof: the plan and the as-written baseline run interleaved,
step by step, in rounds of fresh models from the same seed, each round in a fresh process
(``tuner.proof_rounds``); every step is a pair; the rounds pool into a 95% interval of the
speedup (``measure.intervals``), widened by the spread between processes, and rounds are added
while the interval cannot yet tell whether the plan is slower, as long as the budget allows. The plan is
*measurably slower* only when the whole interval lies below 1.0: a CI gate that fails the build
on a regression, never on noise. ``verify(w, Plan())`` measures the plan beside itself, an A/A
run that reads only the machine's noise; ``torchsmith verify`` does not measure such a plan
(``cli.verify.says_as_written``).

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

from torchsmith.engine.loop import resolve_device
from torchsmith.harness.compare import PlanMeasurement, StepTimer, measure_plans, wall_clock
from torchsmith.measure.intervals import NOISE_MARGIN, SpeedupInterval, Verdict
from torchsmith.plan import Plan
from torchsmith.tuner.pace import MIN_PROOF_STEPS, Pace
from torchsmith.tuner.proof_rounds import PROOF_PROCESSES, ProofRounds
from torchsmith.tuner.rounds import Round, Rounds
from torchsmith.workload import Workload

logger = logging.getLogger(__name__)

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
                "as_written": self.plan == Plan(), "verdict": self.verdict, "slower": self.slower,
                "rounds": self.rounds, "steps_per_round": self.steps_per_round,
                "baseline": {"step_seconds": self.baseline_step_seconds},
                "plan_measured": {"step_seconds": self.plan_step_seconds}, "notes": list(self.notes)}


def verify(workload: Workload, plan: Plan, *, budget_seconds: float = 60.0, device: str | None = None,
           warmup: int = 2, clock: StepTimer = wall_clock) -> VerifyResult:
    """Measure ``plan`` beside the as-written plan within ``budget_seconds``; see the module docstring."""
    start = time.perf_counter()
    dev = resolve_device(device)
    # Here first, briefly: the plan applies and runs, and one step's time sizes the rounds.
    first = measure_plans(workload, [Plan(), plan], warmup=1, steps=2, device=dev, clock=clock, measure_memory=False)
    _raise_on_error(first, workload.name)
    step_s = max((m.step_seconds or 0.0) for m in first) or 1e-3
    # Steps per round so that the least rounds, and one more, fit the budget's measured share.
    pace = Pace.calibrated(budget_seconds, step_s, warmup, 2 * (PROOF_PROCESSES + 1), start)
    steps = max(pace.steps, MIN_PROOF_STEPS)
    rounds = ProofRounds.start(workload, dev, pace, compare_steps=None, clock=clock, measure_memory=False)
    evidence = Rounds()
    # The least rounds first (fresh processes bound the noise between them), then more while the
    # interval cannot tell; a dropped burst can leave the kept pairs short: the round count bounds it too.
    while not evidence.rounds or (
            len(evidence.rounds) < rounds.most and rounds.affordable(steps)
            and (len(evidence.rounds) < rounds.least
                 or evidence.adaptive(rounds.most, goal="no_regression").need_more())):
        base_m, plan_m = _round(rounds, [Plan(), plan], steps, workload.name)
        evidence.add(Round(baseline=base_m, reference=base_m, candidate=plan_m))
        logger.info("verify round %d: %s", len(evidence.rounds), evidence.versus_baseline().describe())
    interval = evidence.versus_baseline()
    notes = [n for n in [rounds.note()] if n]
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


def _round(rounds: ProofRounds, plans: list[Plan], steps: int, name: str) -> list[PlanMeasurement]:
    ms = rounds.measure(plans, steps)
    _raise_on_error(ms, name)
    return ms


def _raise_on_error(ms: list[PlanMeasurement], name: str) -> None:
    for which, m in zip(("the as-written plan", "the plan"), ms, strict=True):
        if m.error:
            tip = ("check the plan with `torchsmith run WORKLOAD --plan plan.json --steps 1`" if which == "the plan"
                   else "check that `torchsmith run WORKLOAD --steps 1` works")
            raise VerifyError(f"{which} of {name} could not be measured: {m.error}.\nTip: {tip}.")

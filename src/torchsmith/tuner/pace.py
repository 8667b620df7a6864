"""The search's time budget: what a measurement will cost, and how many steps fit.

Costs are learnt as the search goes (model builds and memory tracking included), never
assumed below the calibrated step time. Every estimate carries a safety factor, and the
final proof is reserved from the start, so the search ends inside its budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

ESTIMATE_SAFETY = 1.2
"""Estimates are inflated by 20%: step times on a shared machine drift upward under load."""
MEASURED_SHARE = 0.7
"""Share of the budget planned for timed steps; the rest covers builds, warm-ups and the proof."""
MIN_STEPS = 3
"""Fewest timed steps a measurement gets; below this a knob is skipped for lack of budget."""
MIN_PROOF_STEPS = 6
"""The proof measures at least this many steps, more than the search if need be."""
MIN_WINDOW_SECONDS = 1.0
"""Fast steps get more than 12 timed steps, up to this much time per plan when the budget allows:
a pipeline with DataLoader workers needs a window of many steps to show its throughput."""
MAX_STEPS_FLOOR = 12
"""The timed steps a plan gets at most, unless the window above asks for more."""
PROCESS_START_GUESS = 5.0
"""Seconds a fresh process takes to import torch and build the workload, until one has been timed."""


@dataclass
class Pace:
    budget_seconds: float
    step_seconds: float
    """Calibrated baseline step time."""
    warmup: int
    steps: int
    """Timed steps per plan the budget allows for the whole search."""
    start: float = field(default_factory=time.perf_counter)
    spent_measuring: float = 0.0
    plan_steps: int = 0
    proof_rounds: int = 1
    """Rounds the final proof reserves: several when each runs in a fresh process (``harness.fresh_round``)."""
    process_start_seconds: float = 0.0
    """What a proof round pays before its first step: a fresh process's start, learnt as rounds run."""
    plan_setup_seconds: float = 0.0
    """What each plan of a measurement costs beyond its steps: its build, and on ranks its DDP or FSDP2
    wrapping and warm-up, learnt from the calibration job (``RankRounds.attach``); 0 in one process, where
    a measurement's time per plan-step covers it."""
    round_start_seconds: float = 0.0
    """What every measurement pays around its steps: a torchrun job's start under ``--nproc-per-node``
    (``tuner.rank_rounds``); 0 when measurements run in this process."""

    @classmethod
    def calibrated(cls, budget_seconds: float, step_seconds: float, warmup: int, plans_to_measure: int,
                   start: float, rounds: int = 0, round_start_seconds: float = 0.0) -> Pace:
        """Steps per plan so that ``plans_to_measure`` plans fit ``MEASURED_SHARE`` of what is left
        after ``rounds`` measurements have paid ``round_start_seconds`` each."""
        spent = time.perf_counter() - start + rounds * round_start_seconds
        steps = int((budget_seconds - spent) * MEASURED_SHARE / (plans_to_measure * step_seconds)) - warmup
        window = max(MAX_STEPS_FLOOR, math.ceil(MIN_WINDOW_SECONDS / step_seconds))
        return cls(budget_seconds, step_seconds, warmup, min(max(steps, MIN_STEPS), window), start=start,
                   round_start_seconds=round_start_seconds)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget_seconds - self.elapsed()

    def record(self, seconds: float, plans: int, steps: int, warmup: int | None = None) -> None:
        """A measurement of ``plans`` plans, ``steps`` timed steps each after ``warmup`` (None: the
        pace's own), took ``seconds``."""
        self.spent_measuring += seconds
        self.plan_steps += plans * ((self.warmup if warmup is None else warmup) + steps)

    def cost_per_plan_step(self) -> float:
        return max(self.step_seconds, self.spent_measuring / max(self.plan_steps, 1))

    def estimate(self, plans: int, steps: int | None = None, setup_seconds: float = 0.0) -> float:
        """Seconds to measure ``plans`` plans (``setup_seconds`` is the one-off cost of all of them)."""
        steps = self.steps if steps is None else steps
        stepping = plans * ((self.warmup + steps) * self.cost_per_plan_step() + self.plan_setup_seconds)
        return stepping * ESTIMATE_SAFETY + setup_seconds + self.round_start_seconds

    def proof_round(self) -> float:
        """Seconds of one round of the proof: the best plan beside the baseline, plus its process start."""
        return self.estimate(2, max(self.steps, MIN_PROOF_STEPS)) + self.process_start_seconds

    def proof_reserve(self) -> float:
        return self.proof_rounds * self.proof_round()

    def affordable(self, seconds: float) -> bool:
        """Can a measurement of ``seconds`` still run, leaving the proof its time?"""
        return self.elapsed() + seconds + self.proof_reserve() <= self.budget_seconds

    def steps_that_fit(self, plans: int, setup_seconds: float = 0.0) -> int | None:
        """The most timed steps (up to the planned ``steps``, at least ``MIN_STEPS``) with which
        ``plans`` plans still fit the budget; None when even ``MIN_STEPS`` do not."""
        for steps in range(self.steps, MIN_STEPS - 1, -1):
            if self.affordable(self.estimate(plans, steps, setup_seconds)):
                return steps
        return None

    def most_that_fit(self, candidates: int, beside: int, setup_seconds: float = 0.0) -> tuple[int, int]:
        """The most of ``candidates`` plans (each with ``setup_seconds`` of one-off cost) that one
        measurement beside ``beside`` other plans can take, and the timed steps each gets; (0, 0)
        when not even one fits."""
        for count in range(candidates, 0, -1):
            steps = self.steps_that_fit(beside + count, setup_seconds * count)
            if steps is not None:
                return count, steps
        return 0, 0

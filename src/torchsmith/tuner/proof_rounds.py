"""Where the rounds of a claim are measured: the final proof of ``tune``, and ``verify``.

A claim must survive re-measurement in another process, so each of its rounds runs in a fresh
process of its own (``harness.fresh_round``: two levels of noise, and the pairs of one process
cannot see the second). From ``PROOF_PROCESSES`` rounds on, the rounds' own ratios widen the
interval by the noise between processes (``tuner.rounds``). A workload built in Python has no
spec to rebuild it from, a stub clock (tests) times only this process, and a child can fail:
then the rounds run here, and :meth:`ProofRounds.note` says what the interval leaves out. On
several ranks (``tune --nproc-per-node``) every round is a fresh torchrun job already
(``tuner.rank_rounds``), and the proof's rounds are those jobs.

Example::

    rounds = ProofRounds.start(workload, device, pace, compare_steps=None, clock=wall_clock)
    ms = rounds.measure([Plan(), best], steps=24)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from torchsmith.harness.compare import PlanMeasurement, StepTimer, measure_plans, wall_clock
from torchsmith.harness.fresh_round import fresh_round
from torchsmith.plan import Plan
from torchsmith.tuner.pace import PROCESS_START_GUESS, Pace
from torchsmith.tuner.rank_rounds import RankRounds
from torchsmith.tuner.rounds import BETWEEN_ROUNDS_FROM
from torchsmith.workload import Workload

log = logging.getLogger(__name__)

PROOF_PROCESSES = BETWEEN_ROUNDS_FROM
"""Fresh processes a claim is measured in at least, budget permitting: the fewest whose ratios
bound the noise between processes."""
EXTRA_ROUNDS = 2
"""Rounds beyond the least, while the interval cannot decide and the budget allows."""


@dataclass
class ProofRounds:
    workload: Workload
    device: torch.device
    pace: Pace
    compare_steps: int | None
    clock: StepTimer
    measure_memory: bool = True
    fresh: bool = True
    """Each round in a fresh process; False once that is impossible or has failed."""
    processes: int = 0
    """Rounds measured in fresh processes so far."""
    in_process: int = 0
    """Rounds measured in this process (no spec, a stub clock, or a child that failed)."""
    ranks: RankRounds | None = None
    """Set under ``--nproc-per-node``: every round is a job on the ranks."""

    @classmethod
    def start(cls, workload: Workload, device: torch.device, pace: Pace, *, compare_steps: int | None,
              clock: StepTimer, measure_memory: bool = True, ranks: RankRounds | None = None) -> ProofRounds:
        """Rounds for ``workload``, in fresh processes when it can be rebuilt there; reserves them in ``pace``."""
        fresh = ranks is not None or (workload.spec is not None and clock is wall_clock)
        if fresh:
            pace.proof_rounds = PROOF_PROCESSES
            # A job on the ranks pays its start in every estimate already (``Pace.round_start_seconds``).
            pace.process_start_seconds = 0.0 if ranks is not None else PROCESS_START_GUESS
        return cls(workload, device, pace, compare_steps, clock, measure_memory, fresh, ranks=ranks)

    @property
    def least(self) -> int:
        """Rounds measured before any decision: the fewest that bound the between-process noise."""
        return PROOF_PROCESSES if self.fresh else 1

    @property
    def most(self) -> int:
        return self.least + EXTRA_ROUNDS

    def measure(self, plans: list[Plan], steps: int) -> list[PlanMeasurement]:
        """One round of ``plans`` (interleaved step by step), in a fresh process when it can be (and
        there is a ratio to measure: the baseline alone is measured here)."""
        began = time.perf_counter()
        warmup = self.pace.warmup
        if self.ranks is not None:
            on_ranks = self.ranks.measure(plans, warmup=warmup, steps=steps, compare_steps=self.compare_steps,
                                          measure_memory=self.measure_memory)
            self.processes += not any(m.error for m in on_ranks)
            return on_ranks
        if self.fresh and len(plans) > 1:
            ms = fresh_round(self.workload.spec, plans, warmup=warmup, steps=steps, device=str(self.device),
                             compare_steps=self.compare_steps, measure_memory=self.measure_memory)
            if ms is not None:
                self.processes += 1
                stepping = len(plans) * (warmup + steps) * self.pace.cost_per_plan_step()
                self.pace.process_start_seconds = max(0.0, time.perf_counter() - began - stepping)
                return ms
            self.fresh, self.pace.process_start_seconds = False, 0.0
        ms = measure_plans(self.workload, plans, warmup=warmup, steps=steps, device=self.device, clock=self.clock,
                           compare_steps=self.compare_steps, measure_memory=self.measure_memory)
        self.pace.record(time.perf_counter() - began, len(plans), steps)
        self.in_process += 1
        return ms

    def affordable(self, steps: int) -> bool:
        """Another round of two plans still fits the budget."""
        cost = self.pace.estimate(2, steps) + self.pace.process_start_seconds
        return self.pace.elapsed() + cost <= self.pace.budget_seconds

    def note(self) -> str | None:
        """What the interval covers, when it leaves out the noise between processes."""
        if self.clock is not wall_clock:
            return None  # a stub clock: nothing here is a measurement of this machine
        if self.in_process and self.processes:
            return (f"{self.processes} round(s) ran in fresh processes, then a fresh process failed (see the log) "
                    f"and {self.in_process} ran in this one: the interval may understate the noise between processes.")
        if self.in_process:
            why = ("a workload built in Python has no spec a fresh process can rebuild it from"
                   if self.workload.spec is None else "a fresh process could not measure it (see the log)")
            return (f"all {self.in_process} round(s) ran in this process ({why}): the interval leaves out the noise "
                    "between processes, which on a shared machine can move a ratio by 10% or more. Tip: load the "
                    "workload by spec (torchsmith.tune('file.py:workload')), and re-check with `torchsmith verify`.")
        if self.processes < PROOF_PROCESSES:
            return (f"the budget allowed {self.processes} fresh process(es), fewer than the {PROOF_PROCESSES} that "
                    "bound the noise between processes: the interval may be too narrow. Tip: a larger --budget.")
        return None

"""Where ``tune --nproc-per-node N`` measures: every round a torchrun job of N ranks.

The search itself runs in this process, unchanged: it decides, the ranks only measure
(``harness.rank_round``), so no decision can diverge between ranks and hang them. Each round pays a
job's start (importing torch on every rank, the rendezvous); the pace learns that cost from the first
round and counts it in every estimate, apart from the cost of the steps.

Example::

    ranks = RankRounds("mlp", nproc=2, device=torch.device("cpu"))
    ms = ranks.measure([Plan(), Plan(parallel=Zero1())], warmup=2, steps=12, compare_steps=None,
                       measure_memory=False)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.harness.rank_round import ROUND_FAILED, rank_round
from torchsmith.plan import Plan
from torchsmith.tuner.pace import Pace

log = logging.getLogger(__name__)

JOB_START_GUESS = 10.0
"""Seconds a torchrun job of a few CPU ranks takes to start and end, until one has been timed."""
HANG_FACTOR = 5.0
"""A round that takes this many times its expected stepping (and at least ``MIN_TIMEOUT``) hangs: killed."""
MIN_TIMEOUT = 120.0


@dataclass
class RankRounds:
    spec: str
    nproc: int
    device: torch.device
    pace: Pace | None = None
    """Set once the calibration has made one; each round then records its cost there."""
    job_start_seconds: float = JOB_START_GUESS
    """What the last round paid around its steps: the job's start and end."""
    rounds: int = 0
    restarts: int = 0
    """Rounds that torchrun had to restart (a rank failed) before they answered."""
    failed: int = 0
    """Rounds that gave no answer."""
    scale_inputs: dict[str, Any] | None = None
    """The scale model's inputs, measured on the ranks by the round that asked for them."""
    calibration: tuple[float, int, int] | None = None
    """``(seconds, plans, plan_steps)`` of the round measured before the pace existed (the A/A)."""

    @property
    def comm_overlaps(self) -> bool:
        """Whether communication can run under compute here (``scale_model.ScaleAssumptions.overlap``):
        NCCL on GPUs can; gloo on a CPU whose cores the ranks' threads fill cannot."""
        return self.device.type == "cuda"

    def attach(self, pace: Pace) -> None:
        """Time every later round against ``pace``, and give it what each plan costs in a job beyond its steps.

        A plan in a job is built, wrapped in DDP or FSDP2 and warmed up before its timed steps: on
        hf-llama at 2 CPU ranks that is about 2.3 s a plan beside 0.2 s a step. Sized from the timed
        step alone, the first knob's job of 12 plans overran a 65 s budget by 7 s and left the proof
        one job. The calibration job (the A/A, before the pace existed) sets it: its time beyond its steps."""
        self.pace = pace
        if self.calibration is not None:
            seconds, plans, plan_steps = self.calibration
            pace.plan_setup_seconds = max(0.0, (seconds - plan_steps * pace.step_seconds) / plans)

    def measure(self, plans: list[Plan], *, warmup: int, steps: int, compare_steps: int | None,
                measure_memory: bool, with_scale_inputs: bool = False) -> list[PlanMeasurement]:
        """One round of ``plans`` on the ranks; every plan failed (``error`` set) when the round did.
        ``with_scale_inputs`` also measures what the scale model needs (``harness.scale_inputs``)."""
        r = rank_round(self.spec, plans, nproc=self.nproc, warmup=warmup, steps=steps, device=str(self.device),
                       compare_steps=compare_steps, measure_memory=measure_memory,
                       timeout_s=self._timeout(len(plans), warmup + steps), with_scale_inputs=with_scale_inputs)
        if r.scale_inputs is not None:
            self.scale_inputs = r.scale_inputs
        self.rounds += 1
        self.restarts += bool(r.restarts)
        if r.error is not None:
            self.failed += 1
        else:
            self.job_start_seconds = max(0.0, r.wall_seconds - r.measure_seconds - r.inputs_seconds)
        if r.error is None:  # a failed job's wall (restarts, a timeout) says nothing of a step's cost
            if self.pace is None:
                self.calibration = (r.measure_seconds, len(plans), len(plans) * (warmup + steps))
            else:
                setup = len(plans) * self.pace.plan_setup_seconds  # counted apart: what is left is stepping
                self.pace.record(max(0.0, r.measure_seconds - setup), len(plans), steps, warmup=warmup)
        if self.pace is not None:
            self.pace.round_start_seconds = self.job_start_seconds
        return r.measurements

    def _timeout(self, plans: int, steps: int) -> float:
        """Seconds after which a round is taken to hang (a rank stuck in a collective) and killed."""
        if self.pace is None:  # the calibration: nothing timed yet
            return 3 * MIN_TIMEOUT
        expected = plans * (steps * self.pace.cost_per_plan_step() + self.pace.plan_setup_seconds)
        return max(MIN_TIMEOUT, HANG_FACTOR * expected)

    def note(self) -> str:
        """What the figures of a search on ranks mean, and what went wrong on the way."""
        text = (f"measured on {self.nproc} ranks ({'NCCL' if self.device.type == 'cuda' else 'gloo'}), each round a "
                "fresh torchrun job: a step's time is the slowest rank's, the loss is the global batch's (the mean "
                "over ranks), memory the largest rank's peak. As written means DDP with PyTorch's defaults.")
        if self.restarts:
            text += f" {self.restarts} round(s) were restarted by torchrun after a rank failed, then answered."
        if self.failed:
            text += f" {self.failed} round(s) failed on the ranks and their candidates are marked failed (see the log)."
        return text


def round_failed(ms: list[PlanMeasurement]) -> bool:
    """True when a whole round across ranks failed (no plan has figures), not one plan."""
    return bool(ms) and all((m.error or "").startswith(ROUND_FAILED) for m in ms)

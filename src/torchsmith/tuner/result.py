"""What ``tune`` returns: every candidate it measured, the winner and the proof."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from torchsmith.distributed.scale_model import ScaleRow
from torchsmith.harness.compare import PlanMeasurement
from torchsmith.measure.intervals import NoiseCalibration, SpeedupInterval
from torchsmith.plan import Plan

Status = Literal["baseline", "accepted", "beaten", "slower", "not distinguishable", "rejected", "failed", "n/a"]
"""n/a: the transform refused to apply to this model (e.g. channels_last without convolutions).
beaten: faster than the best so far (its interval clears the margin), but another value of the same
knob was faster still. slower: its interval over the best so far lies below the win threshold.
not distinguishable: its 95% interval over the best so far straddled the win threshold even after
the extra rounds the budget allowed; not adopted."""


@dataclass(frozen=True)
class Candidate:
    """One plan the tuner measured, compared with the baseline measured beside it."""

    plan: Plan
    knob: str
    """The knob this candidate changed ("baseline" for the as-written plan)."""
    status: Status
    step_seconds: float | None
    speedup: float | None
    """Baseline step time / this plan's step time, both from the same interleaved run."""
    peak_memory_bytes: int | None
    memory_ratio: float | None
    """This plan's peak / the baseline's peak, from the same run."""
    loss_rel_diff: float | None
    param_rel_diff: float | None
    compile_seconds: float | None
    reason: str = ""
    """Why it was rejected, failed or not kept, with the measured numbers."""
    change: str = ""
    """The knob value this candidate tried on top of the best plan so far, e.g. 'compile.enabled=True'."""
    interval: SpeedupInterval | None = None
    """The 95% interval of ``speedup``. Workloads: pairs are interleaved steps beside the baseline, every
    round pooled. Scripts: pairs are fresh processes, one per plan, in alternating order."""

    @property
    def label(self) -> str:
        return self.plan.describe()

    @classmethod
    def from_measurement(cls, m: PlanMeasurement, base: PlanMeasurement, knob: str, status: Status,
                         reason: str = "", change: str = "", interval: SpeedupInterval | None = None) -> Candidate:
        """``interval`` (the speedup over the baseline, with its uncertainty) sets ``speedup`` to its
        estimate; without one, the speedup is the ratio of the two step times."""
        speed = base.step_seconds / m.step_seconds if m.step_seconds and base.step_seconds else None
        if interval is not None:
            speed = interval.estimate
        mem = (m.peak_memory_bytes / base.peak_memory_bytes
               if m.peak_memory_bytes and base.peak_memory_bytes else None)
        return cls(m.plan, knob, status, m.step_seconds, speed, m.peak_memory_bytes, mem,
                   m.loss_rel_diff, m.param_rel_diff, m.compile_seconds, reason, change or m.plan.describe(), interval)


@dataclass
class TuneResult:
    """The tuned plan and the evidence for it.

    ``speedup`` comes from the final side-by-side re-measurement of the winner against the
    as-written baseline, not from the search's own (shorter) measurements.
    """

    workload: str
    plan: Plan
    baseline: Candidate
    best: Candidate
    candidates: list[Candidate]
    throughput_unit: str
    items_per_step: int | None
    budget_seconds: float
    elapsed_seconds: float
    memory_limit_bytes: int | None
    guard: Any
    fingerprint: Any
    device: str
    baseline_losses: list[float] = field(default_factory=list)
    best_losses: list[float] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Knobs not tried, with the reason (budget, not needed)."""
    notes: list[str] = field(default_factory=list)
    warmup_steps: int = 0
    timed_steps: int = 0
    """Steps per candidate in the search: ``warmup_steps`` untimed, then the median of ``timed_steps``."""
    baseline_mfu: float | None = None
    best_mfu: float | None = None
    """Model FLOPs utilisation in the proof: matmul FLOP/s over this machine's measured matmul peak
    for the plan's matmul dtype (fp32 for the baseline, bf16 for a bf16 plan)."""
    noise: NoiseCalibration | None = None
    """The machine's own noise: the as-written plan against itself (A/A), measured first."""
    pooled_noise: NoiseCalibration | None = None
    """The noise pooled over every experiment of the tune (the A/A run, each candidate's pairs, the
    proof): the steadier figure, from many more pairs than the A/A run's. Set by the script tuner,
    whose A/A run is 3 pairs of processes; None where not computed."""
    speedup_interval: SpeedupInterval | None = None
    """The claim: where a re-measurement of ``speedup`` (``torchsmith verify``, fresh processes) lands 95
    times in 100; None when the plan is the as-written one."""
    decided_by: SpeedupInterval | None = None
    """The final proof's 95% interval of the true speedup, which decided the plan (its low end cleared
    the noise margin); narrower than the claim, which adds the re-measurement's own noise."""
    baseline_step_times: list[float] = field(default_factory=list)
    best_step_times: list[float] = field(default_factory=list)
    """Timed step seconds of the baseline and of the plan in the proof, every round: their distributions."""
    ranks: int = 1
    """Processes every measurement ran on (``--nproc-per-node``); above 1, as written means DDP's defaults."""
    scale: list[ScaleRow] = field(default_factory=list)
    """On several ranks: each strategy predicted at ``ranks`` (and measured there) and at 8, 64 and 512
    ranks over ``interconnect`` (``tuner.scale_rows``); empty on one process."""
    interconnect: str | None = None
    """The link assumed past this machine, as given (``--interconnect``)."""

    @property
    def as_written(self) -> bool:
        """True when the returned plan is the workload as written (nothing to change)."""
        return self.plan == Plan()

    @property
    def speedup(self) -> float | None:
        return self.best.speedup

    def throughput(self, c: Candidate) -> float | None:
        """Throughput of ``c``, comparable across candidates: the final baseline measurement scaled
        by ``c``'s speedup over the baseline measured beside it (absolute times from different
        moments of a shared machine are not comparable; side-by-side ratios are)."""
        if not c.speedup or not self.baseline.step_seconds:
            return None
        return (self.items_per_step or 1) / self.baseline.step_seconds * c.speedup

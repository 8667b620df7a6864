"""The tips bench: every transform alone against the baseline, and folklore, measured here.

Example::

    report = run_tips(load_workload("mlp"), steps=4, warmup=1)
    [(r.label, r.speed, r.memory) for r in report.rows]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.measure.fingerprint import MachineFingerprint, machine_fingerprint
from torchsmith.measure.load import load_average
from torchsmith.tips.candidates import TipRow, measure_candidates
from torchsmith.tips.folklore import FolkloreResult, run_folklore
from torchsmith.workload import Workload


@dataclass(frozen=True)
class TipsReport:
    workload: str
    device: str
    machine: MachineFingerprint
    steps: int
    warmup: int
    baseline: PlanMeasurement
    rows: list[TipRow]
    folklore: list[FolkloreResult]
    load_average: tuple[float, float] | None = None
    """1-minute load average before and after the measurement: other processes' share of the cores."""
    finished_utc: str = ""


def run_tips(workload: Workload, *, steps: int = 6, warmup: int = 2, device: Any = None,
             only: list[str] | None = None, folklore: bool = True,
             on_step: Callable[[int, int], None] | None = None,
             on_check: Callable[[str], None] | None = None) -> TipsReport:
    """Measure every registered transform candidate alone, then the folklore checks."""
    from torchsmith.engine.loop import resolve_device

    device = resolve_device(device)
    load_before = load_average()
    baseline, rows = measure_candidates(workload, steps=steps, warmup=warmup, device=device, only=only,
                                        on_step=on_step)
    checks = run_folklore(device, on_check) if folklore else []
    load_after = load_average()
    return TipsReport(workload=workload.name, device=str(device), machine=machine_fingerprint(), steps=steps,
                      warmup=warmup, baseline=baseline, rows=rows, folklore=checks,
                      load_average=((load_before, load_after)
                                    if load_before is not None and load_after is not None else None),
                      finished_utc=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))



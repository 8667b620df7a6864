"""Terminal rendering of ``torchsmith verify``: the interval, and what it means for the gate."""

from __future__ import annotations

from rich.console import Console

from torchsmith.report.console import console, fmt_seconds
from torchsmith.tuner.verify import VerifyResult

_SAYS = {
    "faster": "[green]faster[/]: the whole interval clears the 3% noise margin",
    "not distinguishable": "[yellow]not distinguishable[/] from as written at this noise: not slower",
    "slower": "[red]measurably slower[/]: the whole interval lies below 1.0",
}


def render_verify(r: VerifyResult, out: Console = console) -> None:
    for note in r.notes:
        out.print(f"[yellow]note:[/] {note}")
    out.print(f"verify {r.plan.describe()} on {r.workload}: {r.interval.describe()} vs as written")
    out.print(f"  {_SAYS[r.verdict if not r.slower else 'slower']}")
    out.print(f"  {r.rounds} rounds of {r.steps_per_round} interleaved steps; step "
              f"{fmt_seconds(r.baseline_step_seconds)} as written, {fmt_seconds(r.plan_step_seconds)} with the plan; "
              f"{r.elapsed_seconds:.0f} s of {r.budget_seconds:.0f} s budget")

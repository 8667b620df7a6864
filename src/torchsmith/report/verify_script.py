"""Terminal rendering of ``torchsmith verify PLAN -- python train.py``: the interval and the gate."""

from __future__ import annotations

import shlex

from rich.console import Console

from torchsmith.report.console import console, fmt_seconds

_SAYS = {
    "faster": "[green]faster[/]: the whole interval clears the 3% noise margin",
    "not distinguishable": "[yellow]not distinguishable[/] from as written at this noise: not slower",
    "slower": "[red]measurably slower[/]: the whole interval lies below 1.0",
}


def render_script_verify(r, out: Console = console) -> None:
    """``r``: a ``tuner.script.verify.ScriptVerifyResult``."""
    for note in r.notes:
        out.print(f"[yellow]note:[/] {note}")
    out.print(f"verify {r.plan.describe()} on `{shlex.join(r.command)}`: {r.interval.describe()} vs as written",
              highlight=False)
    out.print(f"  {_SAYS['slower' if r.slower else r.verdict]}")
    out.print(f"  {r.interval.pairs} pairs of fresh processes (B A, A B, ...), {r.window} steps each; step "
              f"{fmt_seconds(r.baseline_seconds)} as written, {fmt_seconds(r.plan_seconds)} with the plan; "
              f"{r.elapsed_seconds:.0f} s of {r.budget_seconds:.0f} s budget")
    if r.loss_note:
        out.print(f"  [yellow]loss:[/] {r.loss_note}")

"""``torchsmith verify PLAN -- python train.py ...``: the script's A/B gate (see torchsmith.tuner.script.verify)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

SLOWER_EXIT = 1
"""Exit code when the plan is measurably slower (its whole interval below 1.0); errors exit 2."""


def verify_script_command(plan_path: Path, command: list[str], *, budget: str, as_json: bool,
                          window: int | None = None, pairs: int | None = None) -> int:
    """Measure the plan against the command as written in fresh process pairs; 0 not slower, 1 slower."""
    import typer

    from torchsmith.cli.common import user_errors
    from torchsmith.inject import python_command
    from torchsmith.plan import Plan
    from torchsmith.report.console import console, error_console
    from torchsmith.report.verify_script import render_script_verify
    from torchsmith.text import parse_duration
    from torchsmith.tuner.script.run import ScriptRunConfig
    from torchsmith.tuner.script.verify import ScriptVerifyConfig, verify_script

    with user_errors():
        plan = Plan.load(plan_path)
        budget_s = parse_duration(budget)
        if budget_s <= 0:
            raise ValueError(f"the time budget must be positive, got {budget!r}.\nTip: pass --budget 2m.")
        cfg = ScriptVerifyConfig(budget_seconds=budget_s)
        if window is not None:  # exactly that many steps: not stretched to the 2 s floor
            cfg = replace(cfg, run=ScriptRunConfig(window=window), min_window_seconds=0.0)
        if pairs is not None:  # the cap, and the least up to 3
            cfg = replace(cfg, min_pairs=min(3, pairs), max_pairs=pairs)
        result = verify_script(plan, python_command(command), cfg)
    render_script_verify(result, error_console if as_json else console)
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    return SLOWER_EXIT if result.slower else 0

"""``torchsmith verify PLAN -- python train.py ...``: the script's A/B gate (see torchsmith.tuner.script.verify)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the module imports torch: not for `torchsmith --help`
    from torchsmith.tuner.script.verify import ScriptVerifyConfig

SLOWER_EXIT = 1
"""Exit code when the plan is measurably slower (its whole interval below 1.0); errors exit 2."""


def verify_script_command(plan_path: Path, command: list[str], *, budget: str, as_json: bool,
                          window: int | None = None, pairs: int | None = None,
                          min_pairs: int | None = None) -> int:
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
        cfg = with_pairs(cfg, pairs=pairs, min_pairs=min_pairs)
        result = verify_script(plan, python_command(command), cfg)
    render_script_verify(result, error_console if as_json else console)
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    return SLOWER_EXIT if result.slower else 0


def with_pairs(cfg: ScriptVerifyConfig, *, pairs: int | None, min_pairs: int | None) -> ScriptVerifyConfig:
    """``--pairs`` (the cap; the least becomes min(3, cap)) and ``--min-pairs`` (the least; the cap is raised
    to it when lower) applied to ``cfg``.

    Example::

        with_pairs(ScriptVerifyConfig(), pairs=None, min_pairs=16)  # 16 pairs at least, and at most
    """
    if pairs is not None:
        cfg = replace(cfg, min_pairs=min(3, pairs), max_pairs=pairs)
    if min_pairs is not None:
        if pairs is not None and min_pairs > pairs:
            raise ValueError(f"--min-pairs {min_pairs} is more than --pairs {pairs}, the most a comparison gets."
                             f"\nTip: drop --pairs, or pass --pairs {min_pairs} or more.")
        cfg = replace(cfg, min_pairs=min_pairs, max_pairs=max(cfg.max_pairs, min_pairs))
    return cfg

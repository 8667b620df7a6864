"""``torchsmith verify PLAN [WORKLOAD | -- command ...]``: is the plan still not slower? A CI gate.

Exit codes: 0 the plan is not slower than as written (faster, or not distinguishable); 1 it is
measurably slower (its whole 95% interval lies below 1.0); 2 an error (a bad plan file, an
unknown workload, a step that fails), said in one line with a Tip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import (
    WORKLOAD_HELP,
    DeviceOption,
    JsonOption,
    PairsOption,
    WindowOption,
    refuse_script_options,
    user_errors,
)

SLOWER_EXIT = 1


@app.command("verify")
def verify_command(
    plan_path: Path = typer.Argument(..., metavar="PLAN", help="The plan.json to check."),
    target: Optional[list[str]] = typer.Argument(
        None, help=WORKLOAD_HELP + " Default: gpt-mini. Or, after --, a command: -- python train.py --its --args"
    ),
    budget: str = typer.Option("1m", "--budget", help="Wall-clock budget for the A/B, e.g. 30s, 2m."),
    as_json: JsonOption = False,
    device: DeviceOption = "auto",
    window: WindowOption = None,
    pairs: PairsOption = None,
    min_pairs: Optional[int] = typer.Option(
        None, "--min-pairs", min=2, help="Scripts: pairs before any decision (default 3). To re-measure a claim "
                                         "the way tune measured it, pass the claim's pair count."),
) -> None:
    """Measure PLAN against the workload as written, interleaved, and state the 95% interval.

    \b
    torchsmith verify plan.json mlp --budget 1m     # exit 1 when the plan is measurably slower
    torchsmith verify plan.json -- python train.py
    torchsmith verify plan.json --min-pairs 11 -- python train.py   # as many pairs as tune's claim
    """
    from torchsmith.cli.run_script import is_command

    args = list(target or [])
    if not is_command(args):
        refuse_script_options(args[0] if args else None, window=window, pairs=pairs, min_pairs=min_pairs)
    if says_as_written(plan_path, args, as_json=as_json):
        raise typer.Exit(0)
    if is_command(args):
        raise typer.Exit(verify_command_form(plan_path, args, budget=budget, as_json=as_json, window=window,
                                             pairs=pairs, min_pairs=min_pairs))
    raise typer.Exit(verify_workload(plan_path, args[0] if args else None, budget=budget, as_json=as_json,
                                     device=device))


def says_as_written(plan_path: Path, args: list[str], *, as_json: bool) -> bool:
    """True, after saying so, when PLAN changes nothing: it is the target as written, so it cannot be
    slower, and measuring it beside itself would test only the machine's noise. A 95% interval is
    built to miss the true ratio (here 1.0) up to 1 time in 20, so a gate that measured it would fail builds on noise
    (``benchmarks/claims_hold.py``: an as-written HF Trainer plan was read 0.89x, 95% interval 0.79-1.00).
    The target is still checked: a misspelt workload, program or script file is an error, not a pass."""
    import shutil

    from torchsmith.cli.run_script import is_command
    from torchsmith.inject import python_command
    from torchsmith.plan import Plan
    from torchsmith.report.console import console, error_console
    from torchsmith.report.tune_json import IDENTITY
    from torchsmith.workload import load_workload

    with user_errors():
        plan = Plan.load(plan_path)
        if plan != Plan():
            return False
        if not is_command(args):
            load_workload(args[0] if args else None)
        elif shutil.which(program := python_command(args)[0]) is None and not Path(program).is_file():
            raise ValueError(f"cannot run `{program}`: no such program on PATH.\nTip: check the command after --.")
        elif (script := first_script(args)) is not None and not Path(script).is_file():
            raise ValueError(f"`{' '.join(args)}`: no such script {script} (from {Path.cwd()}).\n"
                             "Tip: check the command after --.")
    note = f"{plan_path} changes nothing: it is the target as written, so it cannot be slower; nothing was measured."
    (error_console if as_json else console).print(f"verify: {note}", highlight=False)
    if as_json:
        typer.echo(json.dumps({"plan": plan.to_dict(), "as_written": True, "speedup": IDENTITY.to_json(),
                               "verdict": "as written", "slower": False, "notes": [note]}))
    return True


def first_script(command: list[str]) -> str | None:
    """The first ``.py`` word of a command, the script it runs (``python train.py``, ``torchrun
    --nproc-per-node 2 train.py``, ``accelerate launch train.py``); None when there is none
    (``python -m package``)."""
    return next((a for a in command[1:] if a.endswith(".py") and not a.startswith("-")), None)


def verify_workload(plan_path: Path, workload: str | None, *, budget: str, as_json: bool, device: str) -> int:
    from torchsmith.plan import Plan
    from torchsmith.report.console import console, error_console
    from torchsmith.report.verify import render_verify
    from torchsmith.text import parse_duration
    from torchsmith.tuner.verify import verify
    from torchsmith.workload import load_workload

    with user_errors():
        plan = Plan.load(plan_path)
        budget_s = parse_duration(budget)
        if budget_s <= 0:
            raise ValueError(f"the time budget must be positive, got {budget!r}.\nTip: pass --budget 1m.")
        w = load_workload(workload)
        result = verify(w, plan, budget_seconds=budget_s, device=device)
    render_verify(result, error_console if as_json else console)
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    return SLOWER_EXIT if result.slower else 0


def verify_command_form(plan_path: Path, command: list[str], *, budget: str, as_json: bool,
                        window: Optional[int] = None, pairs: Optional[int] = None,
                        min_pairs: Optional[int] = None) -> int:
    """``verify PLAN -- command ...``: the script's A/B, alternating whole processes (B A A B ...)."""
    from torchsmith.cli.verify_script import verify_script_command

    return verify_script_command(plan_path, command, budget=budget, as_json=as_json, window=window, pairs=pairs,
                                 min_pairs=min_pairs)

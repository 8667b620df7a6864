"""``torchsmith tune``: the main job."""

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


@app.command("tune")
def tune_command(
    target: Optional[list[str]] = typer.Argument(
        None, help=WORKLOAD_HELP + " Default: gpt-mini. Or, after --, a command: -- python train.py --its --args"
    ),
    budget: str = typer.Option("5m", "--budget", help="Wall-clock budget for the whole search, e.g. 90s, 5m, 1h."),
    memory_limit: Optional[str] = typer.Option(
        None, "--memory-limit", help="Reject plans whose measured peak exceeds this, e.g. 8GB, 512MiB."
    ),
    out: Path = typer.Option(Path("plan.json"), "--out", help="Where to write the winning plan."),
    report: Optional[Path] = typer.Option(Path("report.html"), "--report", help="Self-contained HTML report."),
    device: DeviceOption = "auto",
    knobs: Optional[str] = typer.Option(
        None, "--knobs", help="Search only these knobs, comma-separated, e.g. threads,compile; parallel (the "
        "strategy, with --nproc-per-node); ddp (a torchrun script's own DDP settings)."
    ),
    window: WindowOption = None,
    pairs: PairsOption = None,
    on_spread: str = typer.Option(
        "guard",
        "--on-spread",
        help="Scripts: if two as-written runs differ in loss, "
        "'guard' (widen the guard by that spread, saying so) or 'refuse'.",
    ),
    nproc_per_node: int = typer.Option(
        1, "--nproc-per-node", min=1, help="Workloads: measure on N torchrun ranks and search the parallel strategy "
        "(DDP settings, ZeRO-1, FSDP2) too. Scripts say it to torchrun: -- torchrun --nproc-per-node N train.py"),
    interconnect: str = typer.Option(
        "100Gbps,5us", "--interconnect", help="With --nproc-per-node: the link assumed past this machine for the "
        "scale table at 8, 64 and 512 ranks, BANDWIDTH,LATENCY (e.g. 400Gbps,2us)."),
    as_json: JsonOption = False,
) -> None:
    """Find the fastest plan for WORKLOAD that keeps the loss unchanged, prove it, write plan.json.

    \b
    torchsmith tune gpt-mini --budget 3m
    torchsmith tune mlp --nproc-per-node 2 --budget 5m
    torchsmith tune --budget 5m -- python train.py --lr 3e-4
    """
    from torchsmith.cli.run_script import is_command
    from torchsmith.text import parse_bytes, parse_duration

    with user_errors():  # a mistyped value is said at once, not after torch and the workload load
        parse_duration(budget)
        parse_bytes(memory_limit)
    args = list(target or [])
    if is_command(args):
        if nproc_per_node > 1:
            with user_errors():
                raise ValueError(f"--nproc-per-node {nproc_per_node} applies to workloads; a script is started by "
                                 "its own command.\nTip: torchsmith tune -- torchrun --nproc-per-node "
                                 f"{nproc_per_node} {' '.join(a for a in args if a not in ('python', 'python3'))}")
        from torchsmith.cli.tune_script import tune_script_command

        return tune_script_command(
            args,
            budget=budget,
            memory_limit=memory_limit,
            out=out,
            report=report,
            knobs=knobs,
            window=window,
            pairs=pairs,
            on_spread=on_spread,
            as_json=as_json,
        )
    workload = args[0] if args else None
    refuse_script_options(workload, window=window, pairs=pairs, on_spread=None if on_spread == "guard" else on_spread)
    from torchsmith.report.console import console, error_console
    from torchsmith.report.tune import render_tune, tune_progress
    from torchsmith.report.tune_html import write_tune_report
    from torchsmith.report.tune_json import tune_json
    from torchsmith.tuner import WorkloadStepError, tune

    with user_errors():
        try:
            with tune_progress(out=error_console if as_json else console) as progress:
                result = tune(
                    workload,
                    budget=budget,
                    memory_limit=memory_limit,
                    out=out,
                    device=device,
                    knobs=knobs.split(",") if knobs else None,
                    on_progress=progress,
                    nproc_per_node=nproc_per_node,
                    interconnect=interconnect,
                )
        except WorkloadStepError as err:
            raise ValueError(str(err)) from None
    report_path = write_tune_report(result, report) if report and report != Path("") else None  # --report "": none
    says = error_console if as_json else console  # --json: stdout holds the JSON object alone
    render_tune(result, says)
    says.print(f"plan written to [bold]{out}[/]" + (f", report to [bold]{report_path}[/]" if report_path else ""))
    launch = f"torchsmith launch --nproc-per-node {nproc_per_node} -- " if nproc_per_node > 1 else "torchsmith "
    says.print(
        f"use it: {launch}run {workload or 'gpt-mini'} --plan {out}   or   "
        "torchsmith.prepare(Plan.load(...), model, optimizer, loss_fn)"
    )
    if as_json:
        typer.echo(json.dumps(tune_json(result)))

"""``torchsmith debug desync``: are the data-parallel replicas still bit-identical?"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, user_errors
from torchsmith.cli.debug import debug_app


@debug_app.command("desync")
def desync_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json; its parallel strategy (default DDP) is used."),
    steps: int = typer.Option(5, "--steps", min=0, help="Training steps before the check."),
    device: DeviceOption = "auto",
) -> None:
    """Train a few steps on every rank, all-gather parameter checksums, and name what differs.

    Run it under torchrun: torchsmith launch --nproc-per-node 2 -- debug desync mlp --steps 5
    """
    from torchsmith.distributed.desync import check_desync
    from torchsmith.distributed.runtime import under_torchrun
    from torchsmith.engine.dist_session import DistSession
    from torchsmith.engine.loop import build_step, resolve_device
    from torchsmith.plan import Plan
    from torchsmith.report.console import console
    from torchsmith.report.dist import render_desync
    from torchsmith.workload import load_workload

    with user_errors():
        if not under_torchrun():
            raise ValueError("debug desync compares ranks, and this process is not part of a torchrun job.\n"
                             "Tip: torchsmith launch --nproc-per-node 2 -- debug desync "
                             f"{workload or 'gpt-mini'} --steps {steps}")
        w = load_workload(workload)
        session = DistSession.from_env(resolve_device(device), None)
        if session is None:
            raise ValueError("debug desync found no distributed environment to join (torchrun's variables are set, "
                             "but init_from_env found no process group).")
        p = session.plan(Plan.load(plan) if plan else Plan())
        step = build_step(w, p, session.ctx.device)
        for batch in islice(w.cycle(), steps):
            step(session.shard(batch))
        report = check_desync(step.model)
    if session.ctx.rank == 0:
        render_desync(report, console)
    raise typer.Exit(0 if report.in_sync else 1)


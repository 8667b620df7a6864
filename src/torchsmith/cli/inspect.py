"""``torchsmith inspect``: parameters, FLOPs, saved bytes per module and a memory estimate."""

from __future__ import annotations

import json
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, JsonOption, user_errors


@app.command("inspect")
def inspect_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    depth: int = typer.Option(3, "--depth", min=0, help="Show modules down to this nesting depth."),
    nodes: bool = typer.Option(False, "--nodes",
                               help="Also list every fx graph node with its shape (when tracing works)."),
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Measure WORKLOAD's model on one batch: parameters, forward/backward FLOPs and bytes saved
    for backward per module, and training memory (parameters, gradients, optimizer state,
    activations) checked against the measured peak of a real step."""
    from torchsmith.inspect import inspect_workload
    from torchsmith.report.console import console
    from torchsmith.report.inspect import inspect_to_dict, render_inspect
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        if as_json:
            result = inspect_workload(w, device=device, depth=depth)
        else:
            with console.status(f"inspecting {w.name}: tracing, counting FLOPs and saved tensors, one measured step"):
                result = inspect_workload(w, device=device, depth=depth)
    if as_json:
        typer.echo(json.dumps(inspect_to_dict(result), indent=2))
    else:
        render_inspect(result, console, show_nodes=nodes)

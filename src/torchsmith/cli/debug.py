"""``torchsmith debug ...``: gradient monitor, NaN sentinel, gradcheck and graph inspection.

The commands live on the sub-Typer ``debug_app``. Another module adds a command with::

    from torchsmith.cli.debug import debug_app

    @debug_app.command("desync")
    def desync_command(...): ...

and is imported from ``cli/__init__.py`` after this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, JsonOption, user_errors

debug_app = typer.Typer(name="debug", no_args_is_help=True, add_completion=False,
                        help="Debug numerics and graphs: gradient norms, NaN/Inf culprits, gradcheck, fx graphs.")
app.add_typer(debug_app, name="debug")


def _load_attr(spec: str, what: str) -> Any:
    """``package.module:attr`` or ``path/to/file.py:attr``, resolved as workload specs are."""
    from torchsmith.workload import import_attr

    return import_attr(spec, f"{what} {spec!r}")


@debug_app.command("grads")
def grads_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    steps: int = typer.Option(30, "--steps", min=1, help="Training steps to record."),
    every: int = typer.Option(1, "--every", min=1, help="Record every K-th step."),
    png: Path = typer.Option(Path("grads.png"), "--png", help="Heatmap of log gradient norm, layer by step."),
    report: Path = typer.Option(Path("grads.html"), "--report", help="Self-contained HTML report."),
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Train WORKLOAD as written, record per-layer gradient norms, flag vanishing and exploding layers."""
    from torchsmith.debug.grad_monitor import GradMonitor
    from torchsmith.engine.loop import build_step, resolve_device
    from torchsmith.plan import Plan
    from torchsmith.report.console import console
    from torchsmith.report.debug import grad_png, grads_html, grads_to_dict, render_grads, step_progress
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        step = build_step(w, Plan(), resolve_device(device))
        monitor = GradMonitor(step.model, optimizer=step.optimizer, every=every)
        batches = w.cycle()
        with step_progress(f"{w.name}: gradient norms", steps, quiet=as_json) as advance:
            for _ in range(steps):
                step(next(batches))
                advance()
        monitor.close()
        result = monitor.report()
        image = grad_png(result)
        for path in (png, report):
            path.parent.mkdir(parents=True, exist_ok=True)
        png.write_bytes(image)
        report.write_text(grads_html(result, f"torchsmith debug grads · {w.name}", image))
    if as_json:
        typer.echo(json.dumps(grads_to_dict(result), indent=2))
        return
    render_grads(result, console)
    console.print(f"heatmap: {png}   report: {report}")


@debug_app.command("nan")
def nan_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    steps: int = typer.Option(20, "--steps", min=1, help="Train at most this many steps."),
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Train WORKLOAD under the NaN/Inf sentinel; at the first non-finite value, name the module and op.

    Exits 1 when a non-finite value was found.
    """
    from torchsmith.batch import to_device
    from torchsmith.debug.nan_sentinel import NaNSentinel
    from torchsmith.engine.loop import build_step, resolve_device
    from torchsmith.plan import Plan
    from torchsmith.report.console import console
    from torchsmith.report.debug import render_finding, step_progress
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        step = build_step(w, Plan(), resolve_device(device))
        batches, finding, done = w.cycle(), None, 0
        with NaNSentinel(step.model) as sentinel, \
                step_progress(f"{w.name}: NaN sentinel", steps, quiet=as_json) as advance:
            for _ in range(steps):
                batch = to_device(next(batches), step.parts.device)  # the copy is not what is watched
                finding = sentinel.watch(lambda: step.forward_backward(batch))  # noqa: B023 - watch calls it before returning
                done += 1
                if finding is not None:
                    break
                step.optimizer_step()
                advance()
    if as_json:
        typer.echo(json.dumps({"workload": w.name, "steps_run": done,
                               "finding": finding.to_dict() if finding else None}, indent=2))
    else:
        render_finding(finding, console, done)
    if finding is not None:
        raise typer.Exit(1)


def _parse_shapes(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(d) for d in part.split("x")) if part.strip() not in ("", "scalar") else ()
                for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--shapes {text!r}: expected comma-separated shapes like 3x4,4 "
                         f"(use 'scalar' for 0-d).") from None


@debug_app.command("gradcheck")
def gradcheck_command(
    target: str = typer.Argument(..., help="module:FunctionOrOp: an autograd.Function subclass, a torch.library "
                                           "custom op, or a callable; also path/to/file.py:Name."),
    inputs: Optional[str] = typer.Option(None, "--inputs",
                                         help="module:factory returning the example inputs (a tuple)."),
    shapes: Optional[str] = typer.Option(None, "--shapes", help="Input shapes, e.g. 3x4,4: random float64 inputs."),
    atol: float = typer.Option(1e-5, "--atol"),
    rtol: float = typer.Option(1e-3, "--rtol"),
    as_json: JsonOption = False,
) -> None:
    """Check a custom backward against finite differences, input by input, plus gradcheck, gradgradcheck and opcheck.

    Inputs are float64. Custom ops also get torch.library.opcheck. Exits 1 when a gradient is wrong.
    """
    from dataclasses import asdict

    from torchsmith.debug.gradcheck import check_gradients
    from torchsmith.report.console import console
    from torchsmith.report.debug import render_gradcheck

    with user_errors():
        fn = _load_attr(target, "target")
        example = None
        if inputs:
            example = _load_attr(inputs, "--inputs")()
            example = tuple(example) if isinstance(example, (tuple, list)) else (example,)
        sig = _parse_shapes(shapes) if shapes else getattr(fn, "example_shapes", None)
        result = check_gradients(fn, example, shapes=sig, atol=atol, rtol=rtol, name=target)
    if as_json:
        typer.echo(json.dumps({**asdict(result), "ok": result.ok, "wrong": result.wrong}, indent=2, default=str))
    else:
        render_gradcheck(result, console)
    if not result.ok:
        raise typer.Exit(1)


@debug_app.command("graph")
def graph_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    max_nodes: int = typer.Option(60, "--max-nodes", min=1, help="Nodes to list in the table."),
    explain: bool = typer.Option(True, "--explain/--no-explain",
                                 help="Count torch.compile graph breaks (dynamo explain)."),
    as_json: JsonOption = False,
) -> None:
    """Trace WORKLOAD's model (fx, or torch.export where fx fails): shapes, FLOPs per node, graph breaks.

    The graph breaks are those torch.compile would hit (torch._dynamo.explain), with their reasons.
    """
    import torch

    from torchsmith.debug.graph import capture_inputs, inspect_graph
    from torchsmith.report.console import console
    from torchsmith.report.debug import graph_to_dict, render_graph
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        torch.manual_seed(w.seed)
        model = w.model()
        batch = next(iter(w.iter_batches()))
        args, kwargs = capture_inputs(model, w.loss, batch)
        if as_json:
            result = inspect_graph(model, args, kwargs, explain=explain)
        else:
            with console.status(f"tracing {w.name}" + (" and counting graph breaks" if explain else "")):
                result = inspect_graph(model, args, kwargs, explain=explain)
    if as_json:
        typer.echo(json.dumps(graph_to_dict(result), indent=2))
    else:
        render_graph(result, console, max_nodes=max_nodes)

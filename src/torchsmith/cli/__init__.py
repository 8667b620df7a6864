"""The command line: parse arguments, call the library, hand results to ``report`` to render.

One module per command group keeps each file short; each registers its commands on ``app``.

Modules:
    bench          ``bench tips``: every optimisation alone, measured side by side
    child_process  a child command in the foreground, SIGINT/SIGTERM forwarded, its exit code passed on
    common         what every command shares: user errors, the shell exit code, ``--device``/``--json``
    data           ``data pack|verify|tune``: packed memory-mapped datasets and loader tuning
    debug          ``debug grads|nan|gradcheck|graph`` on the ``debug_app`` sub-Typer
    desync         ``debug desync``: are the data-parallel replicas still bit-identical?
    doctor         ``doctor``: why training is slow, for a workload or an unmodified script
    inspect        ``inspect``: parameters, FLOPs, saved bytes per module, a memory estimate
    launch         ``launch``: a torchsmith command on several processes or nodes, via torchrun
    run            ``run``: train a workload under a plan
    run_script     ``run --plan plan.json -- cmd``: the script to completion with the plan; is_command
    tune           ``tune``: the main job
    tune_script    ``tune -- cmd``: tune an unmodified script
    verify         ``verify PLAN [WORKLOAD]``: is the plan still not slower? exit 1 if measurably slower (a CI gate)
    verify_script  ``verify PLAN -- cmd``: the script form of the gate
    worker         the entry point torchrun starts in each worker (``@record``)
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="torchsmith",
    help="Measured PyTorch training optimisation: tune a plan, diagnose a slow script, debug numerics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import torch

        try:
            mine = version("torchsmith")
        except PackageNotFoundError:  # run from a source tree without an install
            mine = "unknown (not installed)"
        typer.echo(f"torchsmith {mine} (torch {torch.__version__})")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                help="More library diagnostics on stderr: -v info, -vv debug."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors on stderr."),
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the torchsmith and torch versions and exit."),
) -> None:
    """Measured PyTorch training optimisation."""
    from torchsmith.report.console import configure_logging

    configure_logging(verbose=verbose, quiet=quiet)


# Each import registers that group's commands on `app`.
from torchsmith.cli import bench as _bench  # noqa: E402,F401
from torchsmith.cli import data as _data  # noqa: E402,F401
from torchsmith.cli import debug as _debug  # noqa: E402,F401
from torchsmith.cli import desync as _desync  # noqa: E402,F401  (registers `debug desync`)
from torchsmith.cli import doctor as _doctor  # noqa: E402,F401
from torchsmith.cli import inspect as _inspect  # noqa: E402,F401
from torchsmith.cli import launch as _launch  # noqa: E402,F401
from torchsmith.cli import run as _run  # noqa: E402,F401
from torchsmith.cli import tune as _tune  # noqa: E402,F401
from torchsmith.cli import verify as _verify  # noqa: E402,F401


def main() -> None:
    app()

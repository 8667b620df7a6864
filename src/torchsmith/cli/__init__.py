"""The command line: parse arguments, call the library, hand results to ``report`` to render.

One module per command group keeps each file short; each registers its commands on ``app``.
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

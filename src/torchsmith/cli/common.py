"""What every command shares: turning library errors into one clear message and an exit code."""

from __future__ import annotations

import contextlib

import typer
from rich.markup import escape

from torchsmith.distributed.checkpoint import DistCheckpointError
from torchsmith.engine.auto_microbatch import OOMError
from torchsmith.engine.checkpoint import CheckpointError
from torchsmith.engine.nonfinite import NonFiniteError
from torchsmith.plan import PlanError
from torchsmith.report.console import error_console
from torchsmith.transforms.base import TransformError
from torchsmith.workload import WorkloadError

USER_ERRORS: tuple[type[Exception], ...] = (PlanError, WorkloadError, TransformError, CheckpointError, ValueError,
                                            NonFiniteError, OOMError, DistCheckpointError)
"""Errors whose message is the diagnosis: shown without a traceback."""

WORKLOAD_HELP = ("Built-in name (gpt-mini, cnn-mini, mlp; hf-gpt2, hf-llama, hf-vit, hf-resnet with torchsmith\\[hf]), "
                 "package.module:function or path/to/file.py:function.")


@contextlib.contextmanager
def user_errors():
    """Show a library error's message (which names the fix) and exit 2, instead of a traceback."""
    try:
        yield
    except USER_ERRORS as err:
        error_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        raise typer.Exit(2) from None

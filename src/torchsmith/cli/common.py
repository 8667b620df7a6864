"""What every command shares: turning library errors into one clear message and an exit code, the
exit code of a child process as a shell reports it, and the options several commands declare."""

from __future__ import annotations

import contextlib
from typing import Annotated, Optional

import typer
from rich.markup import escape

from torchsmith.report.console import error_console


def user_error_types() -> tuple[type[Exception], ...]:
    """Errors whose message is the diagnosis: shown without a traceback. Imported when an error is
    raised, not at start: they pull in torch (and torch.distributed.checkpoint), and
    ``torchsmith --help`` should not wait seconds for that."""
    from torchsmith.distributed.checkpoint import DistCheckpointError
    from torchsmith.engine.auto_microbatch import OOMError
    from torchsmith.engine.checkpoint import CheckpointError
    from torchsmith.engine.nonfinite import NonFiniteError

    # PlanError, WorkloadError and TransformError are ValueErrors.
    return (ValueError, CheckpointError, NonFiniteError, OOMError, DistCheckpointError)

DeviceOption = Annotated[str, typer.Option("--device", help="Where a workload runs: cpu, cuda, cuda:1 or auto.")]
"""``device: DeviceOption = "auto"``: the one declaration of ``--device``."""

JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print the result as one JSON object on stdout (progress and tables go to stderr)."
)]
"""``as_json: JsonOption = False``: the one declaration of ``--json``."""

WindowOption = Annotated[Optional[int], typer.Option(
    "--window", min=2, help="Scripts: measured optimizer steps per run, exactly. Default: enough for 2 s of steps "
                            "(at least 10), so that each run outlasts its process's start-up noise."
)]
"""``window: WindowOption = None``: the one declaration of a script run's ``--window``."""

PairsOption = Annotated[Optional[int], typer.Option(
    "--pairs", min=2, help="Scripts: the most alternating process pairs a comparison gets before a close call is "
                           "'not distinguishable' (default: tune 16 in the search and 24 in the final proof, verify "
                           "12); the least is min(3, this). Fewer: "
                           "quicker, coarser decisions."
)]
"""``pairs: PairsOption = None``: the one declaration of ``--pairs``."""

def refuse_script_options(workload: str | None, **given: object) -> None:
    """Say, with exit 2, that a script-only option was given for a workload, instead of ignoring it.

    ``given`` maps each option as typed (``window=...`` for ``--window``) to its value, None when it
    was not given. A workload's steps and rounds are sized by its budget, not by these.

    Example::

        refuse_script_options("mlp", window=None, pairs=8)   # error: --pairs applies to scripts ...
    """
    named = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
    if not named:
        return
    with user_errors():
        raise ValueError(f"{', '.join(named)} {'applies' if len(named) == 1 else 'apply'} to scripts (a command "
                         f"after --); {workload or 'gpt-mini'} is a workload, whose steps and rounds the budget sizes."
                         f"\nTip: drop {' and '.join(named)}, or give the script: -- python train.py")


WORKLOAD_HELP = ("Built-in name (gpt-mini, cnn-mini, mlp; hf-gpt2, hf-llama, hf-vit, hf-resnet with torchsmith\\[hf]), "
                 "package.module:function or path/to/file.py:function.")


@contextlib.contextmanager
def user_errors():
    """Show a library error's message (which names the fix) and exit 2, instead of a traceback."""
    try:
        yield
    except Exception as err:
        # A ValueError is checked first: a mistyped option is then said without importing torch for the rest.
        if not isinstance(err, ValueError) and not isinstance(err, user_error_types()):
            raise
        error_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        raise typer.Exit(2) from None


def shell_exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: its own code, or 128 + N when signal N killed it
    (``subprocess`` reports that death as the negative code -N).

    Example::

        shell_exit_code(subprocess.call(cmd))   # 3 -> 3; killed by SIGKILL (-9) -> 137
    """
    return 128 - returncode if returncode < 0 else returncode

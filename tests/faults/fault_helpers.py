"""Shared pieces of the fault tests: the CLI in-process and tiny workloads."""

import re
from pathlib import Path

import torch
from typer.testing import CliRunner

from terminal_text import unwrapped
from torchsmith.workload import Workload

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cli(*args: str):
    """``torchsmith ARGS`` in this process: (exit code, stdout, stderr)."""
    from torchsmith.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def one_line_error(stderr: str) -> str:
    """The error a user sees: it starts with 'error:' and carries no traceback. Returned with its
    whitespace joined, since the terminal wraps long lines."""
    assert "Traceback" not in stderr, stderr
    assert stderr.startswith("error: "), stderr
    return unwrapped(stderr)


def tiny(name: str = "tiny", lr: float = 0.1, width: int = 4, loss=None, seed: int = 0) -> Workload:
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g)
    batches = [(xs[i:i + 16], ys[i:i + 16]) for i in range(0, 64, 16)]
    return Workload(model=lambda: torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1)),
                    batches=batches, loss=loss or (lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])),
                    optimizer=lambda p: torch.optim.SGD(p, lr=lr), samples_per_batch=16, name=name, seed=seed)


def write_workload_file(path: Path, body: str) -> str:
    path.write_text(body)
    return f"{path}:workload"

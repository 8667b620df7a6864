"""What a script's command says about its processes: ``torchrun --nproc-per-node N ...`` runs N ranks.

The script tuner searches DDP's knobs only for a command that starts several ranks; PyTorch's
launcher also sets ``OMP_NUM_THREADS=1`` in each rank when it starts more than one and the
variable is unset, which is the script's thread count as written.
"""

from __future__ import annotations

import os

_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
_SWITCHES = ("--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path")
"""The launcher's flags that take no value; every other ``--flag`` is followed by its value."""


def launcher_ranks(command: list[str]) -> int:
    """Processes per node the command starts: N for ``torchrun --nproc-per-node N`` (or
    ``python -m torch.distributed.run``), 1 for anything else, for a launcher without the flag
    (its default is one), and for a count only known at run time (``auto``, ``gpu``).

    Example::

        launcher_ranks(["torchrun", "--standalone", "--nproc-per-node=2", "train.py"])  # 2
    """
    args = _launcher_args(command)
    if args is None:
        return 1
    i = 0
    while i < len(args) and args[i].startswith("-"):  # the script and its own arguments follow
        word = args[i]
        name, _, value = word.partition("=")
        if name in _NPROC_FLAGS:
            return _count(value if value else args[i + 1] if i + 1 < len(args) else "")
        i += 1 if value or word in _SWITCHES else 2
    return 1


def threads_as_written(command: list[str], env: dict[str, str] | None = None) -> int | None:
    """``OMP_NUM_THREADS`` each process of the command starts with, when known: the variable when
    set, else 1 under a launcher that starts several ranks (it sets that itself), else None."""
    omp = (os.environ if env is None else env).get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return 1 if launcher_ranks(command) > 1 else None


def _launcher_args(command: list[str]) -> list[str] | None:
    """The launcher's own arguments (those before the script), or None when it is no launcher."""
    if not command:
        return None
    if os.path.basename(command[0]) == "torchrun":
        return command[1:]
    for i, word in enumerate(command[:-1]):
        if word == "-m" and command[i + 1] in _LAUNCHER_MODULES and os.path.basename(command[0]).startswith("python"):
            return command[i + 2:]
    return None


def _count(value: str) -> int:
    return int(value) if value.isdigit() and int(value) > 0 else 1

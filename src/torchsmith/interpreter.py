"""Which Python runs a user's command: ``python`` on PATH need not be the one torchsmith runs in.

A user who installed torchsmith in a virtual environment and did not activate it types
``torchsmith tune -- python train.py``; ``python`` is then the system's, without torch, and the
script dies on its first import. :func:`other_interpreter_tip` names that cause and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def other_interpreter_tip(command: list[str]) -> str | None:
    """A tip when ``command`` starts with a Python that cannot import torch (so not the one
    torchsmith runs in), else None. Called only after the command failed: it starts that Python
    once (about a second)."""
    if not command or not os.path.basename(command[0]).startswith("python"):
        return None
    exe = shutil.which(command[0])
    if exe is None:
        return None
    # Not compared by real path: every venv's python links to the same base binary.
    try:
        probe = subprocess.run([exe, "-c", "import torch"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode == 0:
        return None
    rest = " ".join(command[1:])
    return (f"`{command[0]}` here is {exe}, which cannot import torch; torchsmith runs in {sys.executable}.\n"
            f"Tip: name that interpreter: -- {sys.executable} {rest}, or activate its environment first.")

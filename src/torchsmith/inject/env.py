"""The environment that runs an unmodified script with something injected at start-up.

One builder for every command that injects: our ``sitecustomize`` first on ``PYTHONPATH`` (and
this source tree, when torchsmith is not installed), the request as JSON under its key.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

PLAN_ENV_KEY = "TORCHSMITH_PLAN"
"""A plan to apply (``tune``, ``run --plan``, ``verify``): read by :mod:`torchsmith.inject.plan_injection`."""
DOCTOR_ENV_KEY = "TORCHSMITH_DOCTOR"
"""A doctor capture to install: read by ``torchsmith.profile.capture_hook``."""
TUNE_ENV_KEY = "TORCHSMITH_TUNE"
"""Set to "1" in measured runs, so a script can skip its own saving."""
INJECT_DIR = Path(__file__).resolve().parent / "_site"
"""Put first on the script's PYTHONPATH: its sitecustomize installs what the keys above ask for."""


def script_env(key: str, spec: dict[str, Any], base: dict[str, str] | None = None, *,
               tuning: bool = False) -> dict[str, str]:
    """The environment of ``base`` (default: this process's) with ``spec`` injected under ``key``.

    Example::

        subprocess.call(cmd, env=script_env(PLAN_ENV_KEY, {"plan": plan.to_dict()}))
    """
    env = dict(os.environ if base is None else base)
    paths = [str(INJECT_DIR)]
    package_root = INJECT_DIR.parent.parent.parent  # holds the `torchsmith` package
    if package_root.name not in ("site-packages", "dist-packages"):
        paths.append(str(package_root))  # a source checkout: let the script's Python import torchsmith
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[key] = json.dumps(spec)
    if tuning:
        env[TUNE_ENV_KEY] = "1"
    env.setdefault("PYTHONUNBUFFERED", "1")  # the script's output interleaves with ours in order
    return env


def python_command(args: list[str]) -> list[str]:
    """``python`` as the first word means this interpreter when no other python is on PATH."""
    if args and args[0] in ("python", "python3") and shutil.which(args[0]) is None:
        return [sys.executable, *args[1:]]
    return args

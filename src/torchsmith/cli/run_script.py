"""``torchsmith run --plan plan.json -- python train.py ...``: the script, to completion, with the plan injected."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional


def is_command(args: list[str]) -> bool:
    """``run``/``tune`` arguments that name a command (given after ``--``) rather than a workload.

    Several words are a command; one word is a command only if it is a program or a file and not a
    workload name or spec, so ``run nope-workload`` still says the workload does not resolve."""
    import os
    import shutil

    from torchsmith.workload import BUILTIN_WORKLOADS

    if len(args) != 1:
        return len(args) > 1
    word = args[0]
    if word in BUILTIN_WORKLOADS or ":" in word:
        return False
    return shutil.which(word) is not None or os.path.isfile(word)


def run_script_command(command: list[str], plan_path: Optional[Path]) -> int:
    """Run ``command`` with the plan injected; return its exit code (killed by signal N: 128 + N, as a shell)."""
    from torchsmith.cli.child_process import run_forwarding_signals
    from torchsmith.cli.common import user_errors
    from torchsmith.inject import PLAN_ENV_KEY, python_command, script_env, strategy_note, unsupported_knobs
    from torchsmith.plan import Plan
    from torchsmith.report.console import error_console

    with user_errors():
        plan = Plan.load(plan_path) if plan_path else Plan()
        bad = unsupported_knobs(plan)
        if bad:
            raise ValueError(f"{plan_path}: {', '.join(bad)} cannot be applied to a script from outside; "
                             f"they need the training step built by torchsmith.{strategy_note(plan)}\n"
                             "Tip: tune the script itself (torchsmith tune -- python train.py) for a plan it can "
                             "take, or use torchsmith.prepare(plan, model, optimizer, loss_fn) in the script.")
        cmd = python_command(command)
        try:
            # SIGINT/SIGTERM to torchsmith reach the script too, and its exit code comes back.
            code = run_forwarding_signals(cmd, env=script_env(PLAN_ENV_KEY, {"plan": plan.to_dict()}))
        except FileNotFoundError:
            raise ValueError(f"cannot run `{cmd[0]}`: no such program on PATH.\n"
                             f"Tip: name the interpreter by path, e.g. -- {sys.executable} train.py") from None
    if code > 128 and code - 128 in signal.valid_signals():
        error_console.print(f"the script exited {code} ({signal.Signals(code - 128).name})", highlight=False)
    return code

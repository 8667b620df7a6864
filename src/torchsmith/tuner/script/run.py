"""One measured run of an unmodified script under a plan (the unit ``tune -- python train.py`` repeats).

The script runs in a fresh process with the plan injected (see
:mod:`torchsmith.inject.plan_injection`); it ends itself after ``warmup + window`` optimizer steps and
leaves ``result.json``: step end times, the loss of every step, the knobs it applied and the files
it opened for writing. A run that crashes, ends early or outlives its time limit comes back with
``error`` set, never as an exception, so the search goes on.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from torchsmith.inject.env import PLAN_ENV_KEY, script_env
from torchsmith.inject.outcome import KnobOutcome
from torchsmith.plan import Plan
from torchsmith.text import first_line

EXIT_GRACE_SECONDS = 20.0
"""After result.json is written, how long the script may take to exit (DataLoader workers, its own
`finally` blocks) before it is stopped; the measurement is kept either way."""


@dataclass(frozen=True, kw_only=True)
class ScriptRunConfig:
    """How each run of the script is measured."""

    warmup: int = 3
    """Optimizer steps before the measured window: step 1 runs as written (the model knobs go on
    at its end) and step 2 carries compilation."""
    window: int = 10
    """Measured optimizer steps. More steps: steadier throughput, longer runs."""
    seed: int = 0
    """Seed for torch, numpy and random at process start, the same for every run."""
    timeout_s: float = 600.0
    """A run still going after this many seconds is stopped and reported as hung."""
    short_ok: bool = False
    """Accept a run that ended on its own (exit code 0) before the window, with at least two
    measured steps: the script has no more steps, and its window is all of them."""


@dataclass
class ScriptRun:
    plan: Plan
    step_seconds: float | None = None
    """Median over the window of the time from one optimizer step's end to the next (data wait,
    forward, backward and update), measured inside the process."""
    steps_per_second: float | None = None
    """Window steps / the window's span, measured inside the process (not process wall time)."""
    losses: list[float] = field(default_factory=list)
    applied: dict[str, KnobOutcome] = field(default_factory=dict)
    """knob -> what the injection did with it, as the script's process reported it."""
    written_files: list[str] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    wall_seconds: float = 0.0
    exit_code: int | None = None
    error: str | None = None
    steps: int = 0
    """Optimizer steps the run made (``warmup + window``, or fewer when the script ended first)."""
    step_times: list[float] = field(default_factory=list)
    """Seconds of each measured step, in order: the distribution ``step_seconds`` is the median of."""
    facts: dict = field(default_factory=dict)
    optimizer_share: float | None = None
    """The median measured step's time inside ``optimizer.step``, over the median step (CPU only)."""

    @property
    def ok(self) -> bool:
        return self.error is None


def run_script(command: list[str], plan: Plan, cfg: ScriptRunConfig = ScriptRunConfig(), *,
               env: dict[str, str] | None = None) -> ScriptRun:
    """Run ``command`` once with ``plan`` injected and measure its window (see the module docstring)."""
    run = ScriptRun(plan=plan)
    with tempfile.TemporaryDirectory(prefix="torchsmith-tune-") as tmp:
        spec = {"plan": plan.to_dict(), "out_dir": tmp, "warmup": cfg.warmup, "window": cfg.window, "seed": cfg.seed}
        log_path = Path(tmp) / "output.log"
        result_path = Path(tmp) / "result.json"
        start = time.perf_counter()
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(command, env=script_env(PLAN_ENV_KEY, spec, env, tuning=True), stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            except FileNotFoundError:
                run.error = f"cannot run `{command[0]}`: no such program on PATH"
                return run
            hung = _wait(proc, result_path, cfg.timeout_s)
        run.wall_seconds = time.perf_counter() - start
        run.exit_code = proc.returncode
        if result_path.exists():
            run.facts = json.loads(result_path.read_text())
        _read_facts(run, cfg)
        output = log_path.read_text(errors="replace")
    steps = run.facts.get("steps", 0)
    needed = cfg.warmup + cfg.window
    if run.facts.get("window_done") or (cfg.short_ok and not hung and not run.exit_code and run.step_seconds):
        return run
    if hung:
        run.error = (f"hung: still running after its time limit of {cfg.timeout_s:.0f} s, before the end of "
                     f"its {needed}-step window; stopped")
    elif run.exit_code:
        run.error = f"crashed with exit code {run.exit_code} after {steps} steps: {_last_error(output)}"
    elif not run.facts:
        run.error = ("exited without calling torch.optim.Optimizer.step(): no training steps to measure")
    else:
        run.error = (f"the script ended after {steps} optimizer steps; a run needs {needed} "
                     f"({cfg.warmup} warm-up + {cfg.window} measured). Tip: pass --window {max(1, steps - cfg.warmup)}"
                     " or let the script run longer")
    return run


def _wait(proc: subprocess.Popen, result_path: Path, timeout_s: float) -> bool:
    """Wait for the process; True when it had to be stopped for running past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    grace_until = None
    while proc.poll() is None:
        now = time.monotonic()
        if grace_until is None and result_path.exists():
            grace_until = now + EXIT_GRACE_SECONDS
        if (grace_until is not None and now > grace_until) or now > deadline:
            _stop(proc)
            return grace_until is None or now > deadline and not result_path.exists()
        time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen) -> None:
    """The whole process group: the script, its DataLoader workers and any helper it started."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_facts(run: ScriptRun, cfg: ScriptRunConfig) -> None:
    f = run.facts
    run.losses = f.get("losses", [])
    run.applied = {k: KnobOutcome.from_json(v) for k, v in f.get("applied", {}).items()}
    # Files gone when the run ended were its temporary files (tempfile's probes, cache writes
    # renamed into place): not side effects a user needs to know about.
    run.written_files = [p for p in f.get("written_files", []) if os.path.exists(p)]
    run.peak_memory_bytes = f.get("peak_memory_bytes")
    run.steps = f.get("steps", 0)
    ends = f.get("step_ends", [])[cfg.warmup - 1:] if cfg.warmup >= 1 else f.get("step_ends", [])
    if len(ends) >= 2:
        durations = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        run.step_times = durations
        run.step_seconds = statistics.median(durations)
        run.steps_per_second = (len(ends) - 1) / (ends[-1] - ends[0])
        inside = f.get("optimizer_step_seconds", [])[cfg.warmup:]  # the same steps the durations are of
        if inside and run.step_seconds:
            run.optimizer_share = min(1.0, statistics.median(inside) / run.step_seconds)


def _last_error(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    for line in reversed(lines):  # the exception line of a traceback, else the last line printed
        if "Error" in line or "Exception" in line:
            return first_line(line.strip())
    return first_line(lines[-1].strip()) if lines else "no output"


def window_for(probe: ScriptRun, cfg: ScriptRunConfig, *, min_seconds: float, max_window: int) -> int:
    """Measured steps per run: enough for ``min_seconds`` of steps at the ``probe`` run's step time
    (never fewer than ``cfg.window``, at most ``max_window``), and no more than the script has.

    Example::

        window_for(probe, ScriptRunConfig(window=10), min_seconds=2.0, max_window=2000)  # 0.01 s steps: 200
    """
    step = probe.step_seconds or min_seconds
    window = max(cfg.window, min(max_window, math.ceil(min_seconds / step)))
    if probe.ok and probe.steps < cfg.warmup + cfg.window:  # the script ended before the probe's window
        window = max(1, probe.steps - cfg.warmup)
    return window

"""``doctor``: capture a window of steps, analyse the trace, run the rules, optionally verify fixes.

Two ways in, one analysis:

- :func:`doctor_workload` trains a workload in this process for the window's steps;
- :func:`doctor_script` runs an unmodified command (``["python", "train.py", ...]``) with
  the start-up hook on ``PYTHONPATH``; its output and exit code pass through.

Example::

    report = doctor_workload(load_workload("mlp"), CaptureConfig(active=3))
    [f.rule for f in report.findings]
    verify(load_workload("mlp"), report)      # re-measure each knob-mapped fix
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torchsmith.inject.env import DOCTOR_ENV_KEY, script_env
from torchsmith.interpreter import other_interpreter_tip
from torchsmith.plan import Plan
from torchsmith.profile.analysis import TraceAnalysis, analyse_trace
from torchsmith.profile.capture import MAX_ACTIVE_STEPS, CaptureConfig, Facts, StepCapture
from torchsmith.profile.rules import DoctorContext, Finding, diagnose
from torchsmith.profile.thread_probe import MAX_PROBE_STEPS
from torchsmith.text import first_line
from torchsmith.workload import Workload


class DoctorError(ValueError):
    """Nothing to diagnose: the script never stepped an optimizer, or ended before the window."""

    exit_code: int = 0
    """The script's exit code, where a script ran."""


@dataclass(frozen=True)
class Verification:
    rule: str
    plan: str
    baseline_seconds: float | None
    fixed_seconds: float | None
    loss_rel_diff: float | None = None
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if self.baseline_seconds and self.fixed_seconds:
            return self.baseline_seconds / self.fixed_seconds
        return None


@dataclass
class DoctorReport:
    target: str
    mode: str
    analysis: TraceAnalysis
    facts: Facts
    findings: list[Finding]
    memory: dict[str, int] | None
    trace_path: Path | None = None
    trace_note: str = ""
    """The caps on the capture, stated: steps recorded and trace size."""
    exit_code: int | None = None
    verified: list[Verification] = field(default_factory=list)
    interrupted: bool = False
    """The script was stopped by Ctrl-C (SIGINT); the report covers what was captured until then."""

    @property
    def partial(self) -> bool:
        """Fewer steps were recorded than the window asked for (the script ended inside it)."""
        return self.facts.steps_recorded < int(self.facts.config.get("active", 0))

    @property
    def crashed(self) -> bool:
        return bool(self.exit_code) and not self.interrupted


def doctor_workload(workload: Workload, cfg: CaptureConfig | None = None, *, plan: Plan | None = None,
                    device: str | None = None, trace: str | os.PathLike | None = None) -> DoctorReport:
    """Train ``workload`` for the window's steps under ``plan`` while capturing; diagnose it."""
    from torchsmith.engine.loop import run

    cfg = cfg or CaptureConfig()
    # Two wait steps: the engine tracks peak memory (itself a profiler) on its second step, so
    # the third is the one that shows the step time without any profiler.
    cfg = dataclasses.replace(cfg, wait=max(cfg.wait, 2))
    plan = plan or Plan()
    with tempfile.TemporaryDirectory(prefix="torchsmith-doctor-") as tmp:
        # Room for the thread probe's close call (up to 3 counts x MAX_PROBE_STEPS); what the probe
        # leaves unused runs unprofiled after it.
        probe_room = 3 * MAX_PROBE_STEPS if cfg.probe_threads else 0
        with StepCapture(cfg, tmp) as capture:
            run(workload, plan, steps=cfg.steps_needed + probe_room, device=device, allow_nonfinite=True)
        return _report(workload.name, "workload", capture.facts, Path(tmp), trace, plan=plan)


def doctor_script(command: list[str], cfg: CaptureConfig | None = None, *,
                  trace: str | os.PathLike | None = None, env: dict[str, str] | None = None) -> DoctorReport:
    """Run ``command`` unmodified with the capture hooked in at interpreter start-up.

    Raises :class:`DoctorError` (carrying ``exit_code``) when there is nothing to diagnose.
    A Ctrl-C stops the script, not the doctor: what was captured is still analysed.
    """
    cfg = cfg or CaptureConfig()
    with tempfile.TemporaryDirectory(prefix="torchsmith-doctor-") as tmp:
        try:
            code, interrupted = _run_child(command, _script_env(tmp, cfg, env))
        except FileNotFoundError:
            raise DoctorError(f"cannot run `{command[0]}`: no such program on PATH.\n"
                              f"Tip: name the interpreter by path, e.g. -- {sys.executable} train.py") from None
        facts_path = Path(tmp) / "facts.json"
        shown = " ".join(command)
        if not facts_path.exists():
            tip = (other_interpreter_tip(command) if code else None) or (
                "Tip: doctor finds steps through Optimizer.step; a script that updates parameters by hand or "
                "only runs inference has none. Describe it as a workload: torchsmith doctor mymod:workload")
            err = DoctorError(
                f"`{shown}` exited with code {code} and never called torch.optim.Optimizer.step(), so there "
                f"were no training steps to profile.\n{tip}")
            err.exit_code = code
            raise err
        facts = Facts.from_json(facts_path.read_text())
        if not (Path(tmp) / "trace.json").exists() or (not facts.window_done and not facts.steps_recorded):
            err = DoctorError(
                f"`{shown}` ran {facts.steps_seen} optimizer steps and exited (code {code}) before the "
                f"profiled window; the window needs {cfg.steps_needed} (1 first step + {cfg.wait} wait + "
                f"{cfg.warmup} warmup + {cfg.active} recorded).\n"
                f"Tip: run the script for more steps, or pass "
                f"--steps {max(1, facts.steps_seen - 1 - cfg.wait - cfg.warmup)}.")
            err.exit_code = code
            raise err
        report = _report(shown, "script", facts, Path(tmp), trace)
        report.exit_code = code
        report.interrupted = interrupted
        return report


INTERRUPT_GRACE_S = 2.0
"""After a Ctrl-C, how long the script gets to stop on its own before it is sent SIGINT itself."""


def _run_child(command: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run the script; (exit code, whether a Ctrl-C stopped it).

    A terminal's Ctrl-C reaches the whole foreground group: the script stops (its exit hook
    writes the captured window) while this process waits for it instead of dying with it. A
    SIGINT sent to this process alone is passed on to the script after INTERRUPT_GRACE_S.
    """
    proc = subprocess.Popen(command, env=env)
    if threading.current_thread() is not threading.main_thread():
        return proc.wait(), False
    interrupted_at: list[float] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted_at.append(time.monotonic()))
    forwarded = False
    try:
        while True:
            try:
                code = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if interrupted_at and not forwarded and time.monotonic() - interrupted_at[0] > INTERRUPT_GRACE_S:
                    proc.send_signal(signal.SIGINT)
                    forwarded = True
    finally:
        signal.signal(signal.SIGINT, previous)
    return code, bool(interrupted_at) or code == -signal.SIGINT


def report_capture(capture: StepCapture, target: str, *, trace: str | os.PathLike | None = None) -> DoctorReport:
    """Diagnose a window captured in this process (a framework callback's), once ``capture.finish()`` ran."""
    facts, cfg = capture.facts, capture.cfg
    if not capture.trace_path.exists() or (not facts.window_done and not facts.steps_recorded):
        raise DoctorError(
            f"the run made {facts.steps_seen} optimizer steps; the doctor window needs {cfg.steps_needed} "
            f"(1 first + {cfg.wait} wait + {cfg.warmup} warmup + {cfg.active} recorded).\n"
            "Tip: train for more steps, or give the callback a smaller window: capture=CaptureConfig(active=1).")
    return _report(target, "script", facts, capture.out_dir, trace)


def verify(workload: Workload, report: DoctorReport, *, steps: int = 6, device: str | None = None,
           on_step=None) -> list[Verification]:
    """Measure each knob-mapped fix against the baseline, interleaved in one process."""
    from torchsmith.harness.compare import measure_plans

    base = _baseline_of(report)
    todo = [(f, f.verify_plan) for f in report.findings if f.verify_plan is not None]
    # Loader fixes act on the data wait, which measure_plans leaves out (it pre-fetches the
    # batches): those run through the engine, whose step time includes the wait.
    loader = [(f, plan) for f, plan in todo if plan.loader != base.loader]
    step_fixes = [(f, plan) for f, plan in todo if (f, plan) not in loader]
    out: dict[str, Verification] = {}
    if step_fixes:
        ms = measure_plans(workload, [base] + [plan for _, plan in step_fixes], warmup=2, steps=steps,
                           device=device, measure_memory=False, on_step=on_step)
        for (f, _), m in zip(step_fixes, ms[1:], strict=True):
            out[f.rule] = Verification(f.rule, m.plan.describe(), ms[0].step_seconds, m.step_seconds,
                                       m.loss_rel_diff, m.error)
    for f, plan in loader:
        out[f.rule] = _verify_by_runs(workload, f, plan, base, steps, device)
    report.verified = [out[f.rule] for f, _ in todo]
    return report.verified


def _verify_by_runs(workload: Workload, finding: Finding, fix: Plan, base: Plan, steps: int,
                    device: str | None) -> Verification:
    """Baseline and fix as whole engine runs, alternated A B A B; median step time (data wait included)."""
    from torchsmith.engine.loop import run

    times: dict[int, list[float]] = {0: [], 1: []}
    losses: dict[int, list[float]] = {}
    try:
        for _ in range(2):
            for i, plan in enumerate((base, fix)):
                result = run(workload, plan, steps=2 + steps, device=device, allow_nonfinite=True)
                times[i].append(result.phases.step_median)
                losses.setdefault(i, result.losses)
    except Exception as err:  # e.g. the workload has no loader factory: reported, not fatal
        return Verification(finding.rule, fix.describe(), None, None,
                            error=f"{type(err).__name__}: {first_line(err)}")
    diff = max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses[1], losses[0], strict=False)), default=None)
    return Verification(finding.rule, fix.describe(), min(times[0]), min(times[1]), diff)


def _baseline_of(report: DoctorReport) -> Plan:
    return Plan.from_dict(report.facts.config.get("plan")) if report.facts.config.get("plan") else Plan()


def _report(target: str, mode: str, facts: Facts, tmp: Path, trace: str | os.PathLike | None,
            plan: Plan | None = None) -> DoctorReport:
    cfg = CaptureConfig(**{k: v for k, v in facts.config.items() if k in CaptureConfig.__dataclass_fields__})
    if plan is not None:
        facts.config["plan"] = plan.to_dict()
    analysis = analyse_trace(tmp / "trace.json", steps=None if facts.window_done else facts.steps_recorded)
    ctx = DoctorContext(analysis, facts, mode, plan, target if mode == "workload" else "mymod:workload")  # type: ignore[arg-type]
    kept, note = keep_trace(tmp / "trace.json", trace, cfg, len(analysis.steps))
    return DoctorReport(target, mode, analysis, facts, diagnose(ctx), ctx.memory(), kept, note)


def keep_trace(src: Path, dest: str | os.PathLike | None, cfg: CaptureConfig, steps: int) -> tuple[Path | None, str]:
    """Copy the trace to ``dest`` within the size cap (Python frames dropped above it); state the caps."""
    size = src.stat().st_size
    cap = int(cfg.max_trace_mb * 1e6)
    note = (f"{steps} step(s) recorded (cap {MAX_ACTIVE_STEPS}), trace {size / 1e6:.1f} MB "
            f"(cap {cfg.max_trace_mb:.0f} MB)")
    if dest is None:
        return None, note
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if size <= cap:
        shutil.copyfile(src, dest)
        return dest, note
    data = json.loads(src.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "python_function"]
    dest.write_text(json.dumps(data))
    return dest, note + f"; Python frames dropped to fit: {dest.stat().st_size / 1e6:.1f} MB kept"


def _script_env(out_dir: str, cfg: CaptureConfig, base: dict[str, str] | None = None) -> dict[str, str]:
    return script_env(DOCTOR_ENV_KEY, {"out_dir": out_dir, "config": asdict(cfg)}, base)

"""``torchsmith verify PLAN -- python train.py``: is the plan slower than the script as written?

An independent A/B in fresh processes, with the tuner's statistics: a probe run sizes the window
(at least ``min_window_seconds`` of steps), then alternating pairs (as written, plan) until the
interval lies wholly above or below 1.0, the pair cap, or the budget. A CI gate: the plan is
"measurably slower" only when the whole interval is below 1.0. Given ``Plan()`` it measures the
script beside itself (A/A: the machine's noise); ``torchsmith verify`` does not measure such a plan.

Example::

    from torchsmith.tuner.script.verify import verify_script
    result = verify_script(Plan.load("plan.json"), ["python", "train.py"], budget_seconds=120)
    result.interval.describe(), result.slower
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from torchsmith.inject.supported import strategy_note, unsupported_knobs
from torchsmith.measure.intervals import NOISE_MARGIN, AdaptivePairs, SpeedupInterval, Verdict
from torchsmith.plan import Plan
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.script.guard import script_guard_rejection
from torchsmith.tuner.script.pairs import compare_in_pairs
from torchsmith.tuner.script.run import ScriptRun, ScriptRunConfig, run_script, window_for


class ScriptVerifyError(ValueError):
    """The comparison could not be made: the plan does not apply, or a run failed."""


@dataclass(frozen=True, kw_only=True)
class ScriptVerifyConfig:
    """How ``verify PLAN -- cmd`` measures."""

    budget_seconds: float = 120.0
    """Wall-clock budget: pairs stop when the next one would not fit (at least ``min_pairs`` run)."""
    run: ScriptRunConfig = ScriptRunConfig()
    """Each run's warm-up, shortest window, seed and time limit."""
    min_window_seconds: float = 2.0
    """Each run measures at least this many seconds of steps (or every step the script has)."""
    max_window: int = 2000
    """Cap on measured steps per run."""
    min_pairs: int = 3
    """Pairs before any decision."""
    max_pairs: int = 12
    """Pairs at most; a plan still straddling 1.0 there is "not distinguishable" (not slower)."""
    guard: GuardConfig = GuardConfig()
    """The loss comparison stated beside the speed (verify judges speed; the loss is reported)."""


@dataclass
class ScriptVerifyResult:
    command: list[str]
    plan: Plan
    interval: SpeedupInterval
    """The plan's speedup over the script as written (> 1: faster), over fresh-process pairs."""
    baseline_seconds: float
    plan_seconds: float
    """Median step seconds of each side over its runs."""
    window: int
    elapsed_seconds: float
    budget_seconds: float
    loss_note: str = ""
    """How the plan's losses compare with the as-written run's (empty: within the guard's tolerance)."""
    notes: list[str] = field(default_factory=list)

    @property
    def slower(self) -> bool:
        """Measurably slower: the whole interval lies below 1.0."""
        return self.interval.high < 1.0

    @property
    def verdict(self) -> Verdict:
        return self.interval.verdict(NOISE_MARGIN)

    def to_json(self) -> dict[str, Any]:
        """The workload verify's shape, with the command and the pairs of processes in place of rounds."""
        return {"command": self.command, "plan": self.plan.to_dict(), "speedup": self.interval.to_json(),
                "as_written": self.plan == Plan(), "verdict": self.verdict, "slower": self.slower,
                "pairs": self.interval.pairs, "window": self.window,
                "baseline": {"step_seconds": self.baseline_seconds},
                "plan_measured": {"step_seconds": self.plan_seconds}, "loss_note": self.loss_note,
                "notes": list(self.notes)}


def verify_script(plan: Plan, command: list[str], cfg: ScriptVerifyConfig = ScriptVerifyConfig(), *,
                  env: dict[str, str] | None = None) -> ScriptVerifyResult:
    """Measure ``plan`` against ``command`` as written in alternating process pairs; see the module docstring.

    Raises :class:`ScriptVerifyError` when the plan cannot be applied to a script, the script as
    written fails, or a run under the plan fails.
    """
    shown = " ".join(command)
    bad = unsupported_knobs(plan)
    if bad:
        raise ScriptVerifyError(f"{', '.join(bad)} cannot be applied to a script from outside; they need the "
                                f"training step built by torchsmith.{strategy_note(plan)}\nTip: verify a plan that "
                                "`torchsmith tune -- python train.py` wrote for this script.")
    start = time.perf_counter()
    run_cfg = replace(cfg.run, short_ok=True)
    probe = run_script(command, Plan(), run_cfg, env=env)
    if not probe.ok:
        raise ScriptVerifyError(f"`{shown}` as written: {probe.error}.\nTip: check it runs on its own: {shown}")
    window = window_for(probe, run_cfg, min_seconds=cfg.min_window_seconds, max_window=cfg.max_window)
    run_cfg = replace(run_cfg, window=window, timeout_s=max(cfg.run.timeout_s, 4 * probe.wall_seconds))
    pair_cost = 2 * (probe.wall_seconds + max(0, window - cfg.run.window) * (probe.step_seconds or 0.0))
    decide = AdaptivePairs(min_pairs=cfg.min_pairs, max_pairs=cfg.max_pairs, goal="no_regression")

    def run(p: Plan, label: str) -> ScriptRun:
        return run_script(command, p, run_cfg, env=env)

    out = compare_in_pairs(
        run, Plan(), plan, decide, reference_label="as written",
        afford_pair=lambda: decide.pairs < cfg.min_pairs
        or time.perf_counter() - start + pair_cost <= cfg.budget_seconds)
    if out.stopped_by is not None:
        raise ScriptVerifyError(f"`{shown}` under {plan.describe()}: {out.stopped_by.error}.\n"
                                "Tip: run it yourself to see the error: torchsmith run --plan PLAN -- " + shown)
    iv = out.interval()
    if iv is None:
        raise ScriptVerifyError(f"`{shown}` as written failed beside every run of the plan: no pair to compare.\n"
                                f"Tip: check it runs on its own: {shown}")
    why, _ = script_guard_rejection(out.candidate[0].losses, out.reference[0].losses, cfg.guard)
    notes = [f"budget: stopped at {out.pairs} pairs"] if out.out_of_budget else []
    return ScriptVerifyResult(
        command=list(command), plan=plan, interval=iv,
        baseline_seconds=statistics.median(r.step_seconds or 0.0 for r in out.reference),
        plan_seconds=statistics.median(r.step_seconds or 0.0 for r in out.candidate),
        window=window, elapsed_seconds=time.perf_counter() - start, budget_seconds=cfg.budget_seconds,
        loss_note=why or "", notes=notes)

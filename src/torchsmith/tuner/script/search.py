"""``tune -- python train.py``: the measured search, on an unmodified script.

Each measurement is one run of the script in a fresh process (:mod:`~torchsmith.tuner.script.run`),
ended after ``warmup + window`` optimizer steps; the window is stretched to at least
``min_window_seconds`` of steps (or all the steps the script has). Plans are compared in
alternating process pairs (:mod:`~torchsmith.tuner.script.pairs`), and every ratio is a 95%
interval over the pairs (:mod:`torchsmith.measure.intervals`).

1. **Calibrate.** The script as written against itself (A/A) for ``calibration_pairs`` pairs: the
   machine's noise ("runs differ by ±12% here (a pair's ratio, ...)"), a warning when it is
   too noisy to decide within ``max_pairs``, and the losses' reproducibility for the guard.
2. **Walk.** Greedy over the knobs, like the workload tuner: each move is tried on top of the best
   plan so far, in pairs against that plan. It is kept only when its interval's low end clears
   ``1 + NOISE_MARGIN``; close calls get more pairs (``AdaptivePairs``) up to ``max_pairs``, then
   are "not distinguishable" and not kept. A candidate whose estimate is below the margin after
   ``min_pairs`` stops there (futility): the budget goes to the knobs after it. A run that
   crashes, hangs, changes the loss or leaves the knob as written ends that candidate with its
   reason, and the search goes on.
3. **Prove.** The winner against the script as written, in fresh pairs; its interval is the claim.
   When it is not faster there, the as-written plan is returned. The proof is sure of
   :func:`proof_pairs` pairs, sized by the noise seen and the win to confirm; the walk keeps
   their time back from the budget.

Example::

    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    result = tune_script(["python", "train.py", "--lr", "3e-4"], ScriptTuneConfig(budget_seconds=300))
    result.plan.save("plan.json"); result.speedup_interval.describe()
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import torch

from torchsmith.engine.space import Dimension, device_info
from torchsmith.inject.outcome import KnobOutcome
from torchsmith.interpreter import other_interpreter_tip
from torchsmith.measure.intervals import (
    NOISE_MARGIN,
    AdaptivePairs,
    NoiseCalibration,
    SpeedupInterval,
    calibrate,
    implied_log_sd,
    noise_floored,
    remeasurement_interval,
)
from torchsmith.measure.load import busy_note, load_per_core
from torchsmith.plan import Plan
from torchsmith.tuner import TuneError, TuneProgress
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.result import Candidate, Status, TuneResult
from torchsmith.tuner.script.adopt import adoption_lines, summarise_written
from torchsmith.tuner.script.guard import BaselineSpread, baseline_spread, script_guard_rejection
from torchsmith.tuner.script.order import order_by_share
from torchsmith.tuner.script.pairs import PairedComparison, compare_in_pairs
from torchsmith.tuner.script.run import ScriptRun, ScriptRunConfig, run_script, window_for
from torchsmith.tuner.script.space import script_space, with_move
from torchsmith.tuner.script.torchrun import launcher_ranks, threads_as_written

log = logging.getLogger(__name__)

COMPILE_EXTRA_SECONDS = 60.0
"""Added to a compile candidate's time limit: Inductor's first compile on 2 cores takes ~20 s."""


@dataclass(frozen=True, kw_only=True)
class ScriptTuneConfig:
    """How ``tune -- python train.py`` searches."""

    budget_seconds: float = 300.0
    """Wall-clock budget for the whole search (calibration, candidates and the proof)."""
    memory_limit: int | None = None
    """Reject plans whose measured peak exceeds this many bytes (CUDA: max allocated; CPU: peak RSS).
    With a limit the memory-saving knob (checkpointing) is searched too."""
    run: ScriptRunConfig = ScriptRunConfig()
    """Each run's warm-up, its shortest window (stretched to ``min_window_seconds``), seed and time limit."""
    guard: GuardConfig = GuardConfig()
    on_spread: Literal["guard", "refuse"] = "guard"
    """When two as-written runs' losses differ: "guard" widens the tolerance by the spread and says
    so in the notes; "refuse" stops with an error naming the spread."""
    max_spread: float = 0.10
    """Above this relative spread the baseline is too noisy to guard anything: tune refuses either way."""
    timeout_factor: float = 4.0
    """A run's time limit: this many times the as-written run's wall time (plus compile time for compile)."""
    knobs: tuple[str, ...] | None = None
    """Search only these knobs (threads, precision, optimizer, loader, backend, ddp, compile, checkpointing;
    ``ddp.<field>`` for one DDP knob). DDP's are searched only under ``torchrun --nproc-per-node N > 1``."""
    min_window_seconds: float = 2.0
    """Each run measures at least this many seconds of steps (or every step the script has): shorter
    windows carry more of the process's start-up noise (caches, clock ramp) per step."""
    max_window: int = 2000
    """Cap on measured steps per run, whatever ``min_window_seconds`` asks for (tiny steps)."""
    calibration_pairs: int = 3
    """A/A pairs of the script as written against itself at the start: the machine's noise."""
    min_pairs: int = 3
    """Pairs every candidate and the proof get before a decision (2 pairs bound little)."""
    max_pairs: int = 16
    """A close call in the walk stops here, "not distinguishable" (or earlier, when the budget ends).
    8 decided a planted 1.3x in 1 of 3 tunes on the noisy VM (its pairs read +-20%):
    ``benchmarks/pair_caps.py`` simulates what each cap finds and costs."""
    proof_max_pairs: int = 24
    """The final proof's cap: it is the claim, on fresh pairs, so it may run longer than a walk
    comparison. Pairs past the ones :func:`proof_pairs` sizes run only within the budget."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_pairs <= min(self.max_pairs, self.proof_max_pairs):
            raise ValueError(f"ScriptTuneConfig needs 1 <= min_pairs <= max_pairs and proof_max_pairs; got "
                             f"min_pairs={self.min_pairs}, max_pairs={self.max_pairs}, "
                             f"proof_max_pairs={self.proof_max_pairs}.\nTip: --pairs N sets all three.")


@dataclass
class ScriptTuneResult(TuneResult):
    """A :class:`TuneResult` for a script, with what only a script run has."""

    command: list[str] = field(default_factory=list)
    code_change: list[str] = field(default_factory=list)
    """The edit that adopts the plan in the script itself, one snippet per knob."""
    written_files: dict[str, list[str]] = field(default_factory=dict)
    """Run label -> files that run opened for writing (compile caches summarised)."""
    spread: BaselineSpread | None = None
    applied: dict[str, KnobOutcome] = field(default_factory=dict)
    """How the injection applied each knob of the winning plan."""
    window: int = 0
    """Measured steps per run, after stretching to ``min_window_seconds``."""


def tune_script(
    command: list[str],
    cfg: ScriptTuneConfig = ScriptTuneConfig(),
    *,
    env: dict[str, str] | None = None,
    on_progress: Callable[[TuneProgress], None] | None = None,
) -> ScriptTuneResult:
    """Search the plans for ``command`` within the budget; see the module docstring."""
    search = _ScriptSearch(command, cfg, env, on_progress)
    search.calibrate()
    search.walk()
    return search.prove()


_APPLIED_KEYS = {"backend": ("matmul_precision", "cudnn_benchmark")}
"""Knobs the injection reports under other keys of ``ScriptRun.applied`` than their own name."""
_MODEL_KNOBS = ("precision", "compile", "checkpointing")
"""Knobs applied to the trained model: not applied when the injection did not find it."""


def unapplied(knob: str, applied: dict[str, KnobOutcome]) -> KnobOutcome | None:
    """The outcome that left ``knob`` as the script wrote it (as_written, not_applied, refused),
    or None when the injection applied it. A knob it never reported was never reached: the model the optimizer
    trains was not found (model knobs), or the script built no object the knob acts on."""
    keys = _APPLIED_KEYS.get(knob, (knob,))
    said = [applied[k] for k in keys if k in applied]
    if not said and knob.startswith("ddp.") and "parallel" in applied:
        return applied["parallel"]  # no DDP built, or the strategy refused: every DDP knob is as written
    if not said:
        model = applied.get("model") if knob in _MODEL_KNOBS else None
        return model or KnobOutcome(knob=knob, status="not_applied",
                                    detail=f"the script built nothing the {knob} knob acts on")
    return next((s for s in said if not s.applied), None)


class _ScriptSearch:
    """The state of one script search: the runs so far, the best plan, the clock and the budget."""

    def __init__(self, command: list[str], cfg: ScriptTuneConfig, env: dict[str, str] | None,
                 on_progress: Callable[[TuneProgress], None] | None):
        self.command, self.cfg, self.env, self.on_progress = list(command), cfg, env, on_progress
        self.shown = " ".join(command)
        self.start = time.perf_counter()
        self.written: dict[str, list[str]] = {}
        self.runs = 0
        self.run_cfg = replace(cfg.run, short_ok=True)
        self.run_cost = 0.0
        self.timeout = cfg.run.timeout_s
        self.notes: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        self.candidates: list[Candidate] = []
        self.best = Plan()
        self.best_fits = True
        self.first: ScriptRun | None = None
        self.reference: list[float] = []
        self.guard = cfg.guard
        self.spread: BaselineSpread | None = None
        self.noise: NoiseCalibration | None = None
        self.dims: list[Dimension] = []
        self.device = "cpu"
        self.done = 0.0
        self.total = 1

    # -- measuring ---------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def measure(self, plan: Plan, label: str) -> ScriptRun:
        limit = self.timeout + (COMPILE_EXTRA_SECONDS if plan.compile.enabled else 0)
        r = run_script(self.command, plan, replace(self.run_cfg, timeout_s=limit), env=self.env)
        self.runs += 1
        self.done += 0.5
        self.written[f"{self.runs}. {label}"] = summarise_written(r.written_files)
        return r

    def pair_cost(self, plan: Plan) -> float:
        """Seconds one (reference, candidate) pair is expected to take."""
        return 2 * self.run_cost + (COMPILE_EXTRA_SECONDS / 3 if plan.compile.enabled else 0)

    def fits_only_tuned(self) -> bool:
        """The script as written is over the memory limit: a plan that fits is kept however fast."""
        limit = self.cfg.memory_limit
        return limit is not None and self.first is not None and (self.first.peak_memory_bytes or 0) > limit

    def proof_pairs(self) -> int:
        """Pairs the final proof is sure to get, however the budget stands: see :func:`proof_pairs`.
        A plan kept for memory alone has no speed to confirm: the minimum."""
        if self.best == Plan() or self.noise is None:
            return 0
        won = [] if self.fits_only_tuned() else [
            c.interval for c in self.candidates if c.status == "accepted" and c.interval is not None]
        return proof_pairs(self.noise, won, self.cfg.min_pairs, self.cfg.proof_max_pairs)

    def proof_reserve(self) -> float:
        """Seconds kept back during the walk for the final proof's sure pairs."""
        return self.proof_pairs() * self.pair_cost(self.best)

    def progress(self, knob: str, speed: float | None = None) -> None:
        if self.on_progress:
            self.on_progress(TuneProgress(self.done, self.total, knob, self.best.describe(), speed, self.elapsed(),
                                          self.cfg.budget_seconds))

    # -- 1. calibrate ------------------------------------------------------------------------

    def calibrate(self) -> None:
        """The first run sizes the window; then A/A pairs measure the noise and the losses' spread."""
        busy = busy_note(load_per_core())  # before the first run adds its own load
        self.total = 1 + 2 * self.cfg.calibration_pairs
        self.progress("baseline")
        probe = self.measure(Plan(), "baseline")
        if not probe.ok:
            tip = other_interpreter_tip(self.command) or f"Tip: check it runs on its own: {self.shown}"
            raise TuneError(f"`{self.shown}` as written: {probe.error}.\n{tip}")
        window = window_for(probe, self.run_cfg, min_seconds=self.cfg.min_window_seconds,
                            max_window=self.cfg.max_window)
        reuse = window == self.run_cfg.window  # the probe's window is the window: it is the first A
        self.run_cfg = replace(self.run_cfg, window=window)
        self.run_cost = probe.wall_seconds + max(0, window - self.cfg.run.window) * (probe.step_seconds or 0.0)
        self.timeout = max(60.0, self.cfg.timeout_factor * self.run_cost)
        self.first = probe if reuse else self.measure(Plan(), "baseline")
        if not self.first.ok:
            raise TuneError(f"`{self.shown}` as written, over a {window}-step window: {self.first.error}.\n"
                            f"Tip: check it runs on its own: {self.shown}")
        firsts, seconds = [self.first], []
        for i in range(self.cfg.calibration_pairs):
            if i:
                firsts.append(self.measure(Plan(), "calibration"))
            seconds.append(self.measure(Plan(), "calibration"))
            self.progress("calibration")
        failed = next((r for r in firsts + seconds if not r.ok), None)
        if failed is not None:
            raise TuneError(f"`{self.shown}` as written, in a repeat run: {failed.error}.\n"
                            "Tip: the script as written runs several times to measure the machine's noise; it "
                            "must succeed every time.")
        self.reference = self.first.losses
        self.spread = max((baseline_spread(a.losses, b.losses) for a, b in zip(firsts, seconds, strict=True)),
                          key=lambda s: s.max_rel_diff)
        self.guard, notes = _guard_for_spread(self.spread, self.cfg)
        self.noise = calibrate([r.step_seconds or 0.0 for r in firsts], [r.step_seconds or 0.0 for r in seconds])
        self.device = "cuda" if self.first.facts.get("device", "cpu").startswith("cuda") else "cpu"
        self.notes += ([busy] if busy and self.device == "cpu" else []) + notes + self._noise_notes(window)
        self.best_fits = self.cfg.memory_limit is None or (self.first.peak_memory_bytes or 0) <= self.cfg.memory_limit

    def _noise_notes(self, window: int) -> list[str]:
        assert self.noise is not None
        said = [f"{self.noise.describe()} ({self.noise.pairs} A/A pairs of fresh processes, {window}-step windows)"]
        log.info("script tune: %s", said[0])
        if self.noise.too_noisy(self.cfg.max_pairs):
            warn = (f"this machine is too noisy to tell a 1.10x gain from noise within {self.cfg.max_pairs} pairs: "
                    "most candidates will be 'not distinguishable'. Tip: tune on a quieter machine, or pass a "
                    "larger --budget and a script with longer steps")
            log.warning("script tune: %s", warn)
            said.append(warn)
        return said

    # -- 2. walk -----------------------------------------------------------------------------

    def walk(self) -> None:
        """Greedy over the knobs: each move on top of the best plan so far, in pairs against it."""
        facts = self.first.facts if self.first else {}
        dims = script_space(device_info(torch.device(self.device)), uses_loader=bool(facts.get("loaders")),
                            ranks=launcher_ranks(self.command), builds_ddp=bool(facts.get("ddp")),
                            threads_as_written=threads_as_written(self.command, self.env))
        if self.cfg.knobs is not None:  # "ddp" names all four DDP knobs, "ddp.static_graph" one
            dims = [d for d in dims if d.name in self.cfg.knobs or d.name.split(".")[0] in self.cfg.knobs]
        if self.cfg.memory_limit is None:
            self.skipped += [(d.name, "trades speed for memory; pass --memory-limit to search it")
                             for d in dims if d.saves_memory]
            dims = [d for d in dims if not d.saves_memory]
        dims, skipped, notes = order_by_share(dims, self.first.optimizer_share if self.first else None)
        self.skipped += skipped
        self.notes += notes
        self.total += sum(self.cfg.min_pairs * len(d.moves()) for d in dims) + self.cfg.min_pairs
        for dim in dims:
            for move in dim.moves():
                plan = with_move(self.best, move)
                if plan == self.best:
                    continue
                outcome = self.try_move(dim.name, plan)
                if outcome == "next_knob":
                    break

    def try_move(self, knob: str, plan: Plan) -> Literal["next_value", "next_knob"]:
        """Measure ``plan`` against the best so far; adopt it when it wins. Whether to try this knob's
        next value: not when the script fixes the knob itself or has nothing it acts on."""
        need = self.cfg.min_pairs * self.pair_cost(plan) + self.proof_reserve()
        if self.elapsed() + need > self.cfg.budget_seconds:
            self.skipped.append((knob, f"budget: {plan.describe()} needs ~{need:.0f} s with the proof, "
                                       f"{self.cfg.budget_seconds - self.elapsed():.0f} s left"))
            return "next_value"
        self.progress(knob)
        reference = self.best
        # While no plan fits the memory limit, one pair shows whether this one fits and keeps the
        # loss; the first that does is kept however slow (speed counts once a plan fits).
        decide = (AdaptivePairs(min_pairs=1, max_pairs=1) if not self.best_fits
                  else AdaptivePairs(min_pairs=self.cfg.min_pairs, max_pairs=self.cfg.max_pairs,
                                     futile_below_margin=True))  # a pair is two processes: no win in sight, stop
        out = compare_in_pairs(
            self.measure, reference, plan, decide,
            afford_pair=lambda: self.elapsed() + self.pair_cost(plan) + self.proof_reserve() <= self.cfg.budget_seconds,
            stop=lambda r: self._rejection(knob, r) is not None,
            reference_label="baseline" if reference == Plan() else f"best so far: {reference.describe()}")
        cand = self._judge(knob, plan, reference, out)
        self.candidates.append(cand)
        if cand.status == "accepted":
            self.best, self.best_fits = plan, True
        if cand.status == "n/a":
            return "next_value" if cand.reason.startswith("refused") else "next_knob"
        return "next_value"

    def _rejection(self, knob: str, r: ScriptRun) -> tuple[Status, str] | None:
        """Why a candidate run ends its candidate at once: the knob not applied, the loss changed, over memory."""
        why_not = unapplied(knob, r.applied)
        if why_not:
            return "n/a", why_not.describe()  # the script as written in this knob: its speed is noise
        return self._guard_rejection(r)

    def _guard_rejection(self, r: ScriptRun) -> tuple[Status, str] | None:
        """Why a run's losses or memory rule it out, against the as-written reference."""
        why, _ = script_guard_rejection(r.losses, self.reference, self.guard)
        if why:
            return "rejected", why
        limit = self.cfg.memory_limit
        if limit is not None and r.peak_memory_bytes and r.peak_memory_bytes > limit:
            return "rejected", f"peak memory {r.peak_memory_bytes} bytes is over the limit {limit}"
        return None

    def _judge(self, knob: str, plan: Plan, reference: Plan, out: PairedComparison) -> Candidate:
        """The candidate as the table lists it, with its interval and the decision's reason."""
        stopped = out.stopped_by
        if stopped is not None and not stopped.ok:
            return _candidate(plan, knob, "failed", [stopped], self.first, self.reference, stopped.error or "")
        if stopped is not None:
            status, reason = self._rejection(knob, stopped) or ("rejected", "")
            return _candidate(plan, knob, status, [stopped], self.first, self.reference, reason)
        iv = out.interval()
        vs = "" if reference == Plan() else f" over {reference.describe()}"
        if iv is None:
            return _candidate(plan, knob, "failed", [], self.first, self.reference,
                              "the as-written runs beside it failed: no pair to compare"
                              if not out.out_of_budget else "budget: no pair could be measured")
        if not self.best_fits:
            return _candidate(plan, knob, "accepted", out.candidate, self.first, self.reference,
                              f"the first plan that fits the memory limit ({iv.describe()}{vs})", iv)
        verdict = iv.verdict(NOISE_MARGIN)
        if verdict == "faster":
            return _candidate(plan, knob, "accepted", out.candidate, self.first, self.reference,
                              f"{iv.describe()}{vs}", iv)
        cut = " (budget)" if out.out_of_budget else ""
        why = (f"slower: {iv.describe()}{vs}" if verdict == "slower" else
               f"not distinguishable{cut}: {iv.describe()}{vs}; a win needs the low end above {1 + NOISE_MARGIN:.2f}")
        lost: Status = "slower" if verdict == "slower" else "not distinguishable"
        return _candidate(plan, knob, lost, out.candidate, self.first, self.reference, why, iv)

    # -- 3. prove ----------------------------------------------------------------------------

    def prove(self) -> ScriptTuneResult:
        """The best plan against the script as written, in fresh pairs: the claim and its interval."""
        assert self.first is not None and self.noise is not None
        first = self.first
        best, best_c, interval, measured, proved, best_run = self.best, None, None, None, None, None
        base_times = [first.step_seconds or 0.0]
        base_steps, best_steps = list(first.step_times), []
        if best != Plan():
            self.progress("proof")
            # The proof's sure pairs were reserved during the walk; more only within the budget. A win
            # accepted last raises the reserve after the walk kept it: then the budget's pairs, and never
            # fewer than the minimum, so a late win overruns the budget by at most min_pairs pairs.
            cost = self.pair_cost(best)
            left = int(max(0.0, self.cfg.budget_seconds - self.elapsed()) // cost) if cost > 0 else self.proof_pairs()
            sure = max(self.cfg.min_pairs, min(self.proof_pairs(), left))
            decide = AdaptivePairs(min_pairs=self.cfg.min_pairs, max_pairs=self.cfg.proof_max_pairs)
            out = compare_in_pairs(
                self.measure, Plan(), best, decide,
                afford_pair=lambda: (decide.pairs < sure
                                     or self.elapsed() + cost <= self.cfg.budget_seconds),
                stop=lambda r: self._guard_rejection(r) is not None, reference_label="proof: baseline")
            # The decision is on the 95% interval of the true ratio (as the adaptive pairs were); the claim
            # printed is wider: where a re-measurement of as many pairs lands.
            proved = out.interval()
            measured = self._floored(proved)
            interval = remeasurement_interval(measured) if measured is not None else None
            base_times = [r.step_seconds or 0.0 for r in out.reference] or base_times
            base_steps = [t for r in out.reference for t in r.step_times] or base_steps
            best_steps = [t for r in out.candidate for t in r.step_times]
            ok = out.stopped_by is None and interval is not None
            faster = measured is not None and measured.verdict(NOISE_MARGIN) == "faster"
            keep = ok and (self.fits_only_tuned() or faster)
            if keep:
                best_run = min(out.candidate, key=lambda r: r.step_seconds or math.inf)
                best_c = _candidate(best, "best", "accepted", out.candidate, first, self.reference, "", interval)
            else:
                said = self._proof_failure(out)
                self.notes.append(f"{best.describe()} won in the search but the final proof against the script as "
                                  f"written gave {said}: not distinguishable from as written, so the as-written plan "
                                  "is kept")
                best, interval, measured = Plan(), None, None
        base_c = _baseline_candidate(statistics.median(base_times), first.peak_memory_bytes)
        return ScriptTuneResult(
            workload=self.shown, plan=best, baseline=base_c, best=best_c or base_c, candidates=self.candidates,
            throughput_unit="steps/s", items_per_step=None, budget_seconds=self.cfg.budget_seconds,
            elapsed_seconds=self.elapsed(), memory_limit_bytes=self.cfg.memory_limit, guard=self.guard,
            fingerprint=_fingerprint(), device=self.device, baseline_losses=self.reference,
            best_losses=best_run.losses if best_run else self.reference, skipped=self.skipped, notes=self.notes,
            warmup_steps=self.run_cfg.warmup, timed_steps=self.run_cfg.window, command=self.command,
            code_change=adoption_lines(best, best_run.applied if best_run else {}, first.facts),
            written_files=self.written, spread=self.spread, applied=best_run.applied if best_run else {},
            noise=self.noise, pooled_noise=NoiseCalibration.pooled(self._noise_parts(proved)),
            speedup_interval=interval, decided_by=measured, window=self.run_cfg.window,
            baseline_step_times=base_steps, best_step_times=best_steps if best != Plan() else [],
        )

    def _floored(self, measured: SpeedupInterval | None) -> SpeedupInterval | None:
        """The proof's interval, no narrower than the noise of every experiment this tune ran
        (the A/A run and each candidate's pairs): a few pairs that agree by luck claim nothing more."""
        if measured is None or self.noise is None:
            return measured
        return noise_floored(measured, self._noise_parts())

    def _noise_parts(self, proof: SpeedupInterval | None = None) -> list[tuple[float, int]]:
        """``(per-pair log sd, pairs)`` of every experiment of this tune: the A/A run, each candidate's
        pairs and, when given, the proof's. Each is the same script's noise, with its own effect removed."""
        parts = [(self.noise.per_pair_spread(), self.noise.pairs)] if self.noise is not None else []
        shown = [c.interval for c in self.candidates if c.interval is not None] + ([proof] if proof else [])
        return parts + [(implied_log_sd(iv), iv.pairs) for iv in shown]

    def _proof_failure(self, out: PairedComparison) -> str:
        if out.stopped_by is not None:
            why = out.stopped_by.error or (self._guard_rejection(out.stopped_by) or ("", "rejected"))[1]
            return f"a run that {'failed' if out.stopped_by.error else 'was rejected'} ({why})"
        iv = out.interval()
        return iv.describe() if iv is not None else "no pair (the as-written runs beside it failed)"


def proof_pairs(noise: NoiseCalibration, won: list[SpeedupInterval], min_pairs: int, max_pairs: int) -> int:
    """How many pairs the final proof needs to confirm the walk's win at the noise seen so far.

    A proof held to ``min_pairs`` (3) missed a true 1.5-1.7x win in 2 of 6 tunes of
    ``benchmarks/true_wins.py``: at 3 pairs the 95% interval's t factor is 4.3, and one burst of
    process noise pulled its low end under the margin. So the proof is sized like a sample-size
    calculation: the effect is the product of the accepted moves' *low* ends (a pessimistic
    guess, which buys power), the per-pair noise the worst of the A/A calibration and the
    accepted moves' own pairs (3 A/A pairs can read a noisy machine as quiet). The answer lies
    between ``min_pairs`` and ``max_pairs``: a win barely accepted gets the cap.

    Example::

        noise = NoiseCalibration(spread=0.30, pairs=3)
        proof_pairs(noise, [speedup_interval([1.0] * 4, [0.6, 0.7, 0.65, 0.62])], 3, 8)   # 3: a clear win
    """
    if not won:  # nothing to confirm (a plan kept because it fits the memory limit): the minimum
        return min_pairs
    effect = math.prod(iv.low for iv in won)
    seen = [noise] + [NoiseCalibration(spread=iv.half_width, pairs=iv.pairs) for iv in won]
    worst = max(seen, key=lambda n: n.per_pair_spread())
    return max(min_pairs, min(max_pairs, worst.pairs_needed(effect)))


def _fingerprint():  # noqa: ANN202 - the fingerprint's own type lives in measure
    from torchsmith.measure.fingerprint import machine_fingerprint

    return machine_fingerprint()


def _guard_for_spread(spread: BaselineSpread, cfg: ScriptTuneConfig) -> tuple[GuardConfig, list[str]]:
    if spread.reproducible:
        return cfg.guard, []
    what = (
        f"the as-written script's losses differ between two runs with the same seeds by up to "
        f"{spread.max_rel_diff:.2%} (step {spread.worst_step + 1}): it draws randomness torchsmith does not "
        "seed (its own seeding from the clock, DataLoader workers, os.urandom) or runs nondeterministic kernels"
    )
    if cfg.on_spread == "refuse" or spread.max_rel_diff > cfg.max_spread:
        limit = "" if cfg.on_spread == "refuse" else f", above the {cfg.max_spread:.0%} a guard can work with"
        raise TuneError(
            f"{what}{limit}; no loss comparison can tell a changed knob from that noise.\n"
            "Tip: seed the script (torch.manual_seed, numpy and random) and its DataLoader "
            "(generator=torch.Generator().manual_seed(0)), then tune again."
        )
    widened = cfg.guard.loss_rtol + spread.max_rel_diff
    return replace(cfg.guard, loss_rtol=widened), [
        f"{what}. The loss guard is widened by that spread: {cfg.guard.loss_rtol:.2%} -> {widened:.2%}."
    ]


def _candidate(plan: Plan, knob: str, status: Status, runs: list[ScriptRun], first: ScriptRun | None,
               reference: list[float], reason: str, interval: SpeedupInterval | None = None) -> Candidate:
    """``plan``'s row: the median step time of its runs, its peak, its loss difference, its interval."""
    times = [r.step_seconds for r in runs if r.step_seconds]
    peaks = [r.peak_memory_bytes for r in runs if r.peak_memory_bytes]
    peak = max(peaks) if peaks else None
    base_peak = first.peak_memory_bytes if first else None
    diffs = [script_guard_rejection(r.losses, reference, GuardConfig(loss_rtol=math.inf))[1] for r in runs if r.ok]
    diff = max((d for d in diffs if d is not None), default=None)
    return Candidate(
        plan, knob, status, statistics.median(times) if times else None,
        interval.estimate if interval is not None else None, peak,
        peak / base_peak if peak and base_peak else None, diff, None, None, reason, plan.describe(),
        interval=interval,
    )


def _baseline_candidate(step_seconds: float | None, peak_memory_bytes: int | None) -> Candidate:
    """The script as written, as the report lists it: the reference every ratio is taken against."""
    return Candidate(plan=Plan(), knob="baseline", status="baseline", step_seconds=step_seconds, speedup=1.0,
                     peak_memory_bytes=peak_memory_bytes, memory_ratio=1.0, loss_rel_diff=0.0, param_rel_diff=None,
                     compile_seconds=None, reason="", change="as written")

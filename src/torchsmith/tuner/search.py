"""Greedy, measured search for the fastest plan that keeps the loss.

The search walks the knobs one at a time (coordinate descent), in the order their transforms
rank themselves for this device. For each knob it measures every candidate (a value, or a
value with a companion change its transform proposes) on top of the best plan so far,
interleaved in one run beside the as-written baseline and the current best. Candidates that
refuse the workload are found first, by building a model, and never measured. The fastest
candidate that

1. runs (a refused transform, an OOM or a failed compile is recorded, and the search goes on),
2. passes the numerical guard against the baseline (same seed, same batches),
3. fits the memory limit, and
4. is faster than the current best: the 95% interval of its speedup clears ``1 + NOISE_MARGIN``

replaces the current best (``tuner.choose``). Before anything is decided, a candidate whose
interval cannot yet decide gets more rounds beside the best while the budget allows
(``AdaptivePairs``; still undecided, it is "not distinguishable" and not adopted), and a win
above 1.5x is re-checked beside the best. First of all, an A/A run (the as-written plan
against itself) measures the machine's own noise, and says when it is too noisy to decide.
Memory-saving knobs cost speed, so they are tried only when the best plan does not fit the
memory limit; then the fastest plan that fits wins. A second look measures the best plan beside
its variants (without each kept knob; with each close call instead of its knob's winner), since
knobs interact. Finally the winner is re-measured
against the baseline, with more rounds while it is undecided and the budget allows; unless its
interval there clears the margin, the as-written plan is returned: the tuner never hands back a
regression, nor a claim it cannot tell from noise.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from torchsmith.engine.loop import build_step, resolve_device
from torchsmith.engine.space import Dimension, device_info, search_space
from torchsmith.harness.compare import (
    PlanMeasurement,
    StepTimer,
    measure_plans,
    paired_seconds,
    refusal,
    wall_clock,
)
from torchsmith.measure.fingerprint import machine_fingerprint
from torchsmith.measure.intervals import NOISE_MARGIN, NoiseCalibration, SpeedupInterval, calibrate
from torchsmith.measure.load import busy_note, load_per_core
from torchsmith.plan import Plan
from torchsmith.text import format_bytes
from torchsmith.tuner.choose import (
    LARGE_WIN,
    KnobVerdict,
    choose,
    describe_move,
    failure_status,
    fits,
    rejection,
)
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.mfu import tuned_mfu
from torchsmith.tuner.pace import MEASURED_SHARE, MIN_PROOF_STEPS, MIN_STEPS, Pace
from torchsmith.tuner.proof_rounds import PROOF_PROCESSES, ProofRounds
from torchsmith.tuner.rank_rounds import RankRounds, round_failed
from torchsmith.tuner.result import Candidate, TuneResult
from torchsmith.tuner.rounds import Round, Rounds
from torchsmith.tuner.scale_rows import DEFAULT_INTERCONNECT, describe_interconnect, measured_by_strategy, scale_rows
from torchsmith.tuner.strategy_order import by_prediction
from torchsmith.workload import Workload

logger = logging.getLogger(__name__)

EXTRA_ROUNDS = 2
"""At most this many further rounds for a candidate the first round could not decide."""
CALIBRATION_STEPS = 5
"""Timed steps (pairs) of the A/A run that measures the noise, after one warm-up step each."""
NOISY_EFFECT = 1.10
"""The machine is too noisy when a true 1.10x speedup cannot clear the margin within the pairs a candidate may get."""


class TuneError(ValueError):
    """The search cannot start: a failing workload or a budget too small."""


@dataclass(frozen=True)
class TuneProgress:
    done: float
    """Candidates measured so far (fractional while one is being measured)."""
    total: int
    knob: str
    best: str
    best_speedup: float | None
    elapsed: float
    budget: float


def search(workload: Workload, *, budget_seconds: float, memory_limit: int | None = None,
           guard: GuardConfig = GuardConfig(), device: str | None = None, warmup: int = 2,
           knobs: Sequence[str] | None = None, clock: StepTimer = wall_clock,
           on_progress: Callable[[TuneProgress], None] | None = None, nproc: int = 1,
           interconnect: str = DEFAULT_INTERCONNECT) -> TuneResult:
    """Run the measured search; see the module docstring for the rules.

    ``knobs`` restricts the search to those transforms (by registered name). ``nproc`` > 1 measures
    every round as a torchrun job of that many ranks (``tuner.rank_rounds``) and searches the
    parallel strategy too; the as-written baseline is then DDP with PyTorch's defaults, and the result's
    ``scale`` rows predict each strategy at 8, 64 and 512 ranks over ``interconnect`` (e.g. "100Gbps,5us").
    """
    start = time.perf_counter()
    dev = resolve_device(device)
    busy = busy_note(load_per_core()) if dev.type == "cpu" else None  # read before our own load adds to it
    ranks = _rank_rounds(workload, nproc, dev, clock, interconnect)
    _check_workload_runs(workload, dev)
    not_applicable: list[Candidate] = []
    dims = _applicable(workload, _dimensions(dev, knobs, nproc), dev, not_applicable)
    calib, noise, pace = _calibrate(workload, dev, [d for d in dims if not d.saves_memory], budget_seconds, start,
                                    warmup, clock, measure_memory=memory_limit is not None, ranks=ranks)
    proof_rounds = ProofRounds.start(workload, dev, pace, compare_steps=guard.steps, clock=clock, ranks=ranks)
    run = _Search(workload, dev, guard, memory_limit, clock, on_progress, pace, best_m=calib,
                  total=2 + sum(len(d.moves()) + 2 for d in dims) + 2, noise=noise, proof_rounds=proof_rounds,
                  ranks=ranks)
    run.report("baseline")
    noisy = _noise_note(noise, pace)
    for dim in dims:
        run.walk(dim)
    run.second_look(dims)
    proof = run.prove()
    result = run.result(proof, not_applicable)
    if ranks is not None:
        result.notes.insert(0, ranks.note())
        _add_scale(result, ranks, interconnect)
    if noisy:
        result.notes.insert(0, noisy)
    if busy:
        result.notes.insert(0, busy)
    return result


def _noise_note(noise: NoiseCalibration, pace: Pace) -> str | None:
    """What to say when the A/A noise is too large to decide a 1.10x claim in the pairs a candidate gets."""
    cap = _pairs_cap(pace.steps)
    logger.info("noise (A/A, as written against itself): %s", noise.describe())
    if not noise.too_noisy(cap, NOISY_EFFECT):
        return None
    logger.warning("this machine is too noisy to decide a %.2fx claim in this budget: %s", NOISY_EFFECT,
                   noise.describe())
    return (f"this machine is too noisy to decide small gains in this budget: {noise.describe()}, and a "
            f"candidate gets at most {cap} here. Claims that cannot be told from noise are reported "
            "'not distinguishable' and not adopted. Tip: a larger --budget gives each candidate more steps, "
            "and a quieter machine (no other jobs) narrows every interval.")


def _pairs_cap(steps: int) -> int:
    """Pairs a candidate gets at most: its steps in the first round and in each extra round."""
    return steps * (1 + EXTRA_ROUNDS)


@dataclass(frozen=True)
class _Proof:
    plan: Plan
    baseline: Candidate
    best: Candidate
    measurements: list[PlanMeasurement]
    notes: list[str]
    interval: SpeedupInterval | None
    """The claim: where a re-measurement of the plan's speedup lands; None when the plan is the as-written one."""
    baseline_step_times: list[float]
    best_step_times: list[float]
    decided_by: SpeedupInterval | None = None
    """The 95% interval of the true speedup that decided the plan (narrower than the claim)."""


@dataclass
class _Search:
    """The state of one search: the best plan so far, and everything measured on the way."""

    workload: Workload
    device: torch.device
    guard: GuardConfig
    memory_limit: int | None
    clock: StepTimer
    on_progress: Callable[[TuneProgress], None] | None
    pace: Pace
    best_m: PlanMeasurement
    """The latest measurement of ``best``."""
    total: int
    proof_rounds: ProofRounds
    """Where the final proof's rounds run (fresh processes when it can)."""
    noise: NoiseCalibration | None = None
    ranks: RankRounds | None = None
    """Set under ``--nproc-per-node``: every measurement is a torchrun job on the ranks."""
    best: Plan = field(default_factory=Plan)
    best_speedup: float | None = 1.0
    candidates: list[Candidate] = field(default_factory=list)
    close_calls: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    done: float = 0.0

    # --- steps of the search, in the order ``search`` calls them ---------------------------

    def walk(self, dim: Dimension) -> None:
        """Measure one knob's candidates on top of the best plan; keep the winner, if any."""
        if dim.saves_memory and fits(self.best_m, self.memory_limit):
            self._skip(dim, "not needed: the best plan fits the memory limit" if self.memory_limit
                       else "trades speed for memory; pass --memory-limit to search it")
            return
        moves = _new_moves(dim, self.best)
        if dim.plan_field == "parallel" and self.ranks is not None and self.ranks.scale_inputs is not None:
            moves = by_prediction(moves, self.ranks.scale_inputs, nproc=self.ranks.nproc,
                                  overlap=self.ranks.comm_overlaps)  # what the budget leaves out: the slowest
        # As many candidates per job as the budget allows, then, while time is left (a job can cost less
        # than the pace expected), the next ones in another job, measured beside the best plan by then.
        total, measured = len(moves), 0
        while moves:
            # A knob is never skipped whole while one candidate still fits.
            count, steps = self.pace.most_that_fit(len(moves), len(self._beside_best([])), dim.setup_seconds)
            if not count:
                break
            batch = moves[:count]
            self._walk_batch(dim, batch, steps)
            measured += len(batch)
            moves = [m for m in moves[len(batch):] if self.best.replace(**m) != self.best]
        if not measured:
            self._skip(dim, f"budget: {self.pace.left():.0f} s left, less than one candidate and the final "
                            f"proof need (~{self.pace.estimate(3, MIN_STEPS, dim.setup_seconds):.0f} s "
                            f"+ ~{self.pace.proof_reserve():.0f} s)")
        elif moves:
            left = ", ".join(Plan().replace(**m).describe() for m in moves)
            self.skipped.append((dim.name, f"budget: measured {measured} of its {total} candidates; "
                                           f"not measured: {left}"))

    def _walk_batch(self, dim: Dimension, moves: list[dict[str, Any]], steps: int) -> None:
        """Measure ``moves`` beside the best plan in one job; keep the winner, if any."""
        self.report(dim.name)
        plans = self._beside_best([self.best.replace(**m) for m in moves])
        ms = self._measure(plans, steps, dim.name)
        base_m, current = ms[0], ms[1] if self.best != Plan() else ms[0]
        if round_failed(ms):  # the job on the ranks failed as a whole: this knob's candidates with it
            self._round_lost(dim.name, ms[-len(moves):])
            return
        if base_m.error:
            raise TuneError(f"the baseline of {self.workload.name} failed while measuring {dim.name}: {base_m.error}")
        if not self.candidates:
            self.candidates.append(Candidate.from_measurement(base_m, base_m, "baseline", "baseline",
                                                              change="as written"))
        evidence = self._settle(dim, plans[-len(moves):], ms[-len(moves):], base_m, current, steps)
        measured = [ev.measurement() if ev is not None else m for ev, m in zip(evidence, ms[-len(moves):], strict=True)]
        verdict: KnobVerdict = choose(dim.name, moves, measured, current, base_m, self.guard, self.memory_limit,
                                      evidence=evidence)
        self.candidates += verdict.candidates
        self.close_calls += verdict.close_calls
        self.best_m = current
        if verdict.winner is not None:
            self.best, self.best_speedup = verdict.winner.plan, verdict.winner.speedup
            self.best_m = next(m for m in measured if m.plan == self.best)
        for c in verdict.candidates:
            logger.info("%s: %s %s%s", dim.name, c.change, c.status, f" ({c.reason})" if c.reason else "")
        self.report(dim.name)

    def second_look(self, dims: list[Dimension]) -> None:
        """A knob kept early may no longer pay on top of the later ones, a close call may win there,
        or the machine's load has changed since: measure those variants beside the best, once, and
        switch to the fastest if it beats the best by more than the noise margin."""
        variants = _variants(self.best, dims, self.close_calls)
        setup = _setup_seconds([v for _, v in variants], dims, self.best)
        if not variants or not self.pace.affordable(self.pace.estimate(len(variants) + 2, setup_seconds=setup)):
            return
        self.report("second look")
        ms = self._measure([Plan(), self.best, *(v for _, v in variants)], self.pace.steps, "second look")
        if round_failed(ms):
            self._round_lost("second look", [])
            return
        base_m, best_m = ms[0], ms[1]
        chosen = choose("second look", [{}] * len(variants), ms[2:], best_m, base_m, self.guard, self.memory_limit)
        if chosen.winner is None:
            return
        label = next(what for (what, plan), m in zip(variants, ms[2:], strict=True) if plan == chosen.winner.plan)
        self.candidates.append(replace(chosen.winner, knob="second look", change=f"second look: {label}"))
        self.best, self.best_speedup = chosen.winner.plan, chosen.winner.speedup

    def prove(self) -> _Proof:
        """Re-measure the best plan beside the baseline, with more steps than the search used and more
        rounds while its interval is undecided; fall back to the baseline unless the interval clears
        the margin there (or the baseline breaks the memory limit, which no speed can excuse)."""
        self.done = self.total - 2
        self.report("proof")
        plans = [Plan(), self.best] if self.best != Plan() else [Plan()]
        steps = max(self.pace.steps, MIN_PROOF_STEPS)
        ms = self._proof_round(plans, steps)
        base_c = Candidate.from_measurement(ms[0], ms[0], "baseline", "baseline")
        if len(plans) == 1:
            best_c = Candidate.from_measurement(ms[0], ms[0], "best", "accepted")
            return _Proof(Plan(), base_c, best_c, ms, self._memory_notes(Plan(), ms), None, ms[0].step_times,
                          ms[0].step_times)
        if ms[-1].error:
            notes = [f"re-measured beside the baseline, {self.best.describe()} failed: {ms[-1].error}; kept the "
                     "as-written plan instead."]
            return _Proof(Plan(), base_c, base_c, ms, notes + self._memory_notes(Plan(), ms), None,
                          ms[0].step_times, ms[0].step_times)
        evidence = Rounds([Round(baseline=ms[0], reference=ms[0], candidate=ms[-1])])
        rounds = self.proof_rounds
        # The least rounds first (fresh processes bound the noise between them), then more while undecided.
        # A dropped burst can leave the kept pairs short of the cap: the round count bounds the loop too.
        while (len(evidence.rounds) < rounds.most and rounds.affordable(steps)
               and (len(evidence.rounds) < rounds.least or evidence.adaptive(rounds.most).need_more())):
            again = self._proof_round(plans, steps)
            if again[-1].error or again[0].error:
                break
            evidence.add(Round(baseline=again[0], reference=again[0], candidate=again[-1]))
        # Decided on the 95% interval of the true ratio, as the extra rounds were; the claim stated is wider:
        # where a re-measurement lands (``Rounds.claim``).
        decided, interval = evidence.versus_baseline(), evidence.claim()
        kept = evidence.kept()
        base_times = [t for r in kept for t in r.baseline.step_times]
        best_times = [t for r in kept for t in r.candidate.step_times]
        best_c = Candidate.from_measurement(evidence.measurement(), ms[0], "best", "accepted", interval=interval)
        plan, notes = self.best, [n for n in [rounds.note()] if n]
        verdict = decided.verdict(NOISE_MARGIN)
        if fits(ms[0], self.memory_limit) and verdict != "faster":
            said = "measurably slower" if verdict == "slower" else "not distinguishable from as written"
            notes.append(f"re-measured beside the baseline, {plan.describe()} ran at {decided.describe()}: {said}; "
                         "kept the as-written plan instead (never a regression, nor a claim the noise allows).")
            plan, best_c, best_times = Plan(), base_c, base_times
        adopted = plan != Plan()
        return _Proof(plan, base_c, best_c, ms, notes + self._memory_notes(plan, ms),
                      interval if adopted else None, base_times, best_times, decided if adopted else None)

    def _proof_round(self, plans: list[Plan], steps: int) -> list[PlanMeasurement]:
        return self.proof_rounds.measure(plans, steps)

    def _memory_notes(self, plan: Plan, ms: list[PlanMeasurement]) -> list[str]:
        if fits(ms[-1], self.memory_limit):
            return []
        return [f"no plan searched fits the memory limit of {format_bytes(self.memory_limit)}: the closest, "
                f"{plan.describe()}, peaked at {format_bytes(ms[-1].peak_memory_bytes)}. Tip: a larger "
                "--budget searches more memory knobs together, or lower the batch size."]

    def result(self, proof: _Proof, not_applicable: list[Candidate]) -> TuneResult:
        # MFU against one device's peak does not describe a job on several ranks: not computed there.
        baseline_mfu, best_mfu = (None, None) if self.ranks else tuned_mfu(
            self.workload, self.device, proof.baseline.step_seconds, proof.best.step_seconds, proof.plan)
        self.done = self.total
        self.report("done")
        w = self.workload
        return TuneResult(
            workload=w.name, plan=proof.plan, baseline=proof.baseline, best=proof.best,
            candidates=self.candidates + not_applicable, throughput_unit=w.throughput_unit[0] + "/s",
            items_per_step=w.throughput_unit[1], budget_seconds=self.pace.budget_seconds,
            elapsed_seconds=self.pace.elapsed(), memory_limit_bytes=self.memory_limit, guard=self.guard,
            fingerprint=machine_fingerprint(), device=str(self.device), baseline_losses=proof.measurements[0].losses,
            best_losses=proof.measurements[-1].losses, skipped=self.skipped, notes=proof.notes,
            warmup_steps=self.pace.warmup, timed_steps=self.pace.steps, baseline_mfu=baseline_mfu, best_mfu=best_mfu,
            noise=self.noise, speedup_interval=proof.interval, decided_by=proof.decided_by,
            baseline_step_times=proof.baseline_step_times,
            best_step_times=proof.best_step_times, ranks=self.ranks.nproc if self.ranks else 1)

    # --- helpers ------------------------------------------------------------------------

    def _settle(self, dim: Dimension, plans: list[Plan], measured: list[PlanMeasurement], base_m: PlanMeasurement,
                current: PlanMeasurement, steps: int) -> list[Rounds | None]:
        """Measure again, beside the best plan in a new round, the candidates whose interval cannot
        decide yet (``AdaptivePairs``), and re-check a large win; every round's pairs pool into one
        interval per candidate. None for the candidates that failed or broke the guard."""
        evidence = {i: Rounds([Round(baseline=base_m, reference=current, candidate=m)]) for i, m in enumerate(measured)
                    if m.ok and rejection(m, self.guard, None) is None}
        for _ in range(EXTRA_ROUNDS):
            again = [i for i, ev in evidence.items() if ev.adaptive(1 + EXTRA_ROUNDS).need_more() or _large_win(ev)]
            cost = self.pace.estimate(len(again) + 2, steps, dim.setup_seconds * len(again))
            if not again or not self.pace.affordable(cost):
                break
            ms = self._measure(self._beside_best([plans[i] for i in again]), steps, f"{dim.name} (again)")
            reference = ms[1] if self.best != Plan() else ms[0]
            if ms[0].error or reference.error:
                break
            for i, m in zip(again, ms[-len(again):], strict=True):
                if m.ok:
                    evidence[i].add(Round(baseline=ms[0], reference=reference, candidate=m))
        return [evidence.get(i) for i in range(len(measured))]

    def _beside_best(self, plans: list[Plan]) -> list[Plan]:
        """The baseline, the best so far (when it is not the baseline), then ``plans``."""
        return [Plan()] + ([self.best] if self.best != Plan() else []) + plans

    def _measure(self, plans: list[Plan], steps: int, label: str) -> list[PlanMeasurement]:
        if self.ranks is not None:
            self.report(label)
            ms = self.ranks.measure(plans, warmup=self.pace.warmup, steps=steps, compare_steps=self.guard.steps,
                                    measure_memory=True)
            self.done = min(self.done + len(plans), self.total - 2)
            return ms
        began, done = time.perf_counter(), self.done
        ms = measure_plans(self.workload, plans, warmup=self.pace.warmup, steps=steps, device=self.device,
                           clock=self.clock, compare_steps=self.guard.steps,
                           on_step=lambda i, n: self.report(label, done + len(plans) * i / n))
        self.pace.record(time.perf_counter() - began, len(plans), steps)
        self.done = min(done + len(plans), self.total - 2)
        return ms

    def _round_lost(self, knob: str, ms: list[PlanMeasurement]) -> None:
        """A round on the ranks that failed as a whole: its candidates are failed, the search goes on."""
        for m in ms:
            self.candidates.append(Candidate.from_measurement(m, PlanMeasurement(Plan(), None), knob, "failed",
                                                              m.error or "", m.plan.describe()))
        logger.warning("%s: the round on the ranks failed; its candidates are marked failed and the search "
                       "goes on with %s", knob, self.best.describe())
        self.report(knob)

    def _skip(self, dim: Dimension, why: str) -> None:
        logger.info("%s: not searched: %s", dim.name, why)
        self.skipped.append((dim.name, why))
        self.done = min(self.done + len(dim.moves()) + 2, self.total - 2)

    def report(self, knob: str, done: float | None = None) -> None:
        if self.on_progress:
            self.on_progress(TuneProgress(self.done if done is None else done, self.total, knob, self.best.describe(),
                                          self.best_speedup, self.pace.elapsed(), self.pace.budget_seconds))


def _calibrate(workload: Workload, dev: torch.device, speed_dims: list[Dimension], budget_seconds: float,
               start: float, warmup: int, clock: StepTimer, measure_memory: bool,
               ranks: RankRounds | None = None) -> tuple[PlanMeasurement, NoiseCalibration, Pace]:
    """Time the as-written plan against itself (A/A), interleaved: its step time sets the steps each
    measurement gets within the budget, and the spread of the A/A ratio is the machine's own noise.

    Refuses a budget too small for the floor: the baseline beside one candidate, then the proof.
    """
    if ranks is not None:
        first, second = ranks.measure([Plan(), Plan()], warmup=1, steps=CALIBRATION_STEPS, compare_steps=None,
                                      measure_memory=measure_memory, with_scale_inputs=True)
    else:
        first, second = measure_plans(workload, [Plan(), Plan()], warmup=1, steps=CALIBRATION_STEPS, device=dev,
                                      clock=clock, measure_memory=measure_memory)
    calib = first
    if calib.error or second.error:
        raise TuneError(f"the baseline of {workload.name} failed while calibrating: {calib.error or second.error}")
    noise = calibrate(*paired_seconds(first, second))
    step_s = calib.step_seconds or 1e-3
    plans_to_measure = 2 + sum(len(d.moves()) + 2 for d in speed_dims) + 2
    # On ranks every measurement is a job that pays its start: one per knob, the second look, the proof's.
    rounds = len(speed_dims) + 1 + PROOF_PROCESSES if ranks is not None else 0
    pace = Pace.calibrated(budget_seconds, step_s, warmup, plans_to_measure, start, rounds,
                           ranks.job_start_seconds if ranks is not None else 0.0)
    if ranks is not None:
        ranks.attach(pace)
    need = pace.elapsed() + pace.estimate(4, MIN_STEPS)
    if budget_seconds < need:
        spent = pace.elapsed()
        full = spent + plans_to_measure * (warmup + MIN_STEPS) * step_s / MEASURED_SHARE
        minimum = math.ceil(need)
        raise TuneError(
            f"a budget of {budget_seconds:g} s is too small: timing {workload.name}'s first baseline steps "
            f"already took {spent:.1f} s ({step_s:.2f} s a step here), and the baseline, one candidate and the "
            f"final proof need about {minimum} s in all.\n"
            f"Tip: pass --budget {minimum}s or more; a full search of {plans_to_measure - 2} candidates needs "
            f"about {math.ceil(full)} s."
        )
    return calib, noise, pace


def _large_win(evidence: Rounds) -> bool:
    """Still above ``LARGE_WIN`` over the best, pooled over the rounds so far: re-check it."""
    return evidence.versus_reference().estimate > LARGE_WIN


def _setup_seconds(plans: list[Plan], dims: list[Dimension], reference: Plan) -> float:
    """One-off costs (compilation) of measuring ``plans`` beside ``reference``: each plan pays the
    setup of every knob it sets to a new, non-baseline value."""
    return sum(d.setup_seconds for p in plans for d in dims if d.setup_seconds
               and getattr(p, d.plan_field) not in (getattr(reference, d.plan_field), getattr(Plan(), d.plan_field)))


def _rank_rounds(workload: Workload, nproc: int, dev: torch.device, clock: StepTimer,
                 interconnect: str) -> RankRounds | None:
    """Where the rounds of a search on ``nproc`` ranks run; None for one process."""
    try:
        describe_interconnect(interconnect)
    except ValueError as err:
        raise TuneError(str(err)) from None
    if nproc < 1:
        raise TuneError(f"--nproc-per-node must be at least 1; found {nproc}.")
    if nproc == 1:
        return None
    if workload.spec is None:
        raise TuneError(f"tuning {workload.name!r} on {nproc} ranks needs a workload every rank can rebuild: a "
                        "built-in name, pkg.mod:fn or file.py:fn; this one was built in Python.\n"
                        "Tip: torchsmith tune --nproc-per-node 2 my_workloads.py:workload")
    if clock is not wall_clock:
        raise TuneError("a search on several ranks times steps on the ranks; a stub clock cannot reach them.\n"
                        "Tip: test decisions with a stub clock on one process (nproc=1).")
    return RankRounds(workload.spec, nproc, dev)


def _add_scale(result: TuneResult, ranks: RankRounds, interconnect: str) -> None:
    """The scale rows, from what the first round measured on the ranks (none when it could not)."""
    if ranks.scale_inputs is None:
        return
    result.interconnect = interconnect
    result.scale = scale_rows(ranks.scale_inputs, nproc=ranks.nproc, measured=measured_by_strategy(result.candidates),
                              interconnect=interconnect, overlap=ranks.comm_overlaps)


def _dimensions(dev: torch.device, knobs: Sequence[str] | None, nproc: int = 1) -> list[Dimension]:
    dims = search_space(device_info(dev, ranks=nproc))
    if knobs is None:
        return dims
    unknown = sorted(set(knobs) - {d.name for d in dims})
    if unknown:
        raise TuneError(f"unknown or inapplicable knob(s) {unknown} on {dev.type}; "
                        f"searchable here: {', '.join(d.name for d in dims)}.")
    return [d for d in dims if d.name in knobs]


def _applicable(workload: Workload, dims: list[Dimension], dev: torch.device, out: list[Candidate]) -> list[Dimension]:
    """``dims`` without the values that cannot apply to this workload (recorded as n/a), and
    without the knobs left with none: no time is spent measuring around a refused transform."""
    kept = []
    for dim in dims:
        if dim.plan_field == "parallel":  # needs the ranks' process group: a refusal shows in its round
            kept.append(dim)
            continue
        values = []
        for value in dim.candidates:
            plan = Plan().replace(**{dim.plan_field: value})
            refused = refusal(workload, plan, dev)
            if refused is None:
                values.append(value)
            else:
                out.append(Candidate.from_measurement(refused, PlanMeasurement(Plan(), None), dim.name,
                                                      failure_status(refused), refused.error or "", plan.describe()))
        if values:
            kept.append(replace(dim, candidates=tuple(values), joint=tuple(j for j in dim.joint if j[0] in values)))
    return kept


def _new_moves(dim: Dimension, best: Plan) -> list[dict[str, Any]]:
    """``dim``'s moves that change ``best``, one per distinct resulting plan."""
    seen, out = {best}, []
    for move in dim.moves():
        plan = best.replace(**move)
        if plan not in seen:
            seen.add(plan)
            out.append(move)
    return out


def _variants(best: Plan, dims: list[Dimension], close_calls: list[dict[str, Any]]) -> list[tuple[str, Plan]]:
    """What the second look measures beside ``best``: ``best`` without each kept knob (when more
    than one is kept), and ``best`` with each close call's move instead."""
    kept = [d for d in dims if getattr(best, d.plan_field) != getattr(Plan(), d.plan_field)]
    out: list[tuple[str, Plan]] = []
    if len(kept) > 1:
        out += [(f"without {d.name}", best.replace(**{d.plan_field: getattr(Plan(), d.plan_field)})) for d in kept]
    for move in close_calls:
        variant = best.replace(**move)
        if variant != best and variant not in [v for _, v in out]:
            out.append((f"with {describe_move(move)}", variant))
    return out


def _check_workload_runs(workload: Workload, device: torch.device) -> None:
    """One step of the as-written plan. Its error, if any, reaches the user unchanged and named."""
    try:
        step = build_step(workload, Plan(), device)
        step(next(iter(workload.iter_batches())))
    except Exception as err:
        raise WorkloadStepError(workload.name, err) from err


class WorkloadStepError(TuneError):
    """The workload itself fails as written; ``original`` is its exception, unchanged."""

    def __init__(self, spec: str, original: BaseException):
        frames = traceback.extract_tb(original.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        super().__init__(
            f"workload {spec!r} fails as written, before any search: "
            f"{type(original).__name__}: {original}{where}.\n"
            f"Tip: check that `torchsmith run {spec} --steps 1` works, then tune."
        )
        self.original = original

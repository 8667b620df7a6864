"""Greedy, measured search for the fastest plan that keeps the loss.

The search walks the knobs one at a time (coordinate descent). For each knob it measures
every candidate (a value, or a value with a companion change its transform proposes) on top
of the best plan so far, interleaved in one run beside the as-written baseline and the
current best. Candidates that refuse the workload are found first, by building a model, and
never measured. The fastest candidate that

1. runs (a refused transform, an OOM or a failed compile is recorded, and the search goes on),
2. passes the numerical guard against the baseline (same seed, same batches),
3. fits the memory limit, and
4. is faster than the current best by more than the noise margin

replaces the current best. Memory-saving knobs (checkpointing, micro-batching, ...) cost
speed, so they are tried only when the best plan does not fit the memory limit; then the
fastest plan that fits wins. A second look measures the best plan beside its variants
(without each kept knob; with each close call instead of its knob's winner), since knobs
interact. Finally the winner is re-measured against the baseline; if it is not faster there,
the as-written plan is returned: the tuner never hands back a regression.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from torchsmith.engine.loop import build_step, resolve_device
from torchsmith.measure.compare import PlanMeasurement, StepTimer, measure_plans, refusal, wall_clock
from torchsmith.plan import Plan
from torchsmith.tune.guard import GuardConfig, guard_rejection
from torchsmith.tune.result import Candidate, TuneResult
from torchsmith.tune.space import Dimension, device_info, search_space
from torchsmith.workload import Workload

NOISE_MARGIN = 0.03
"""A candidate must beat the current best by more than 3% to replace it (shared-machine noise)."""
MIN_WINDOW_SECONDS = 1.0
"""Fast steps get more than 12 timed steps, up to this much time per plan when the budget allows:
a pipeline with DataLoader workers needs a window of many steps to show its throughput."""
CLOSE_CALL = 0.10
"""A candidate within 10% of its knob's winner gets a second try on top of the final plan."""
COMPILE_ESTIMATE_SECONDS = 25.0
"""Budget set aside per compile candidate before its first measurement. On 2 CPU cores with empty
Inductor caches, gpt-mini compiled in 20.5 s whole and 4.5 s block by block (2.1 s and 0.2 s with
warm caches; benchmarks/compile_time.py)."""


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
           on_progress: Callable[[TuneProgress], None] | None = None) -> TuneResult:
    """Run the measured search; see the module docstring for the rules.

    ``knobs`` restricts the search to those transforms (by registered name).
    """
    from torchsmith.measure.fingerprint import machine_fingerprint

    start = time.perf_counter()
    dev = resolve_device(device)
    _check_workload_runs(workload, dev)
    dims = search_space(device_info(dev))
    if knobs is not None:
        unknown = sorted(set(knobs) - {d.name for d in dims})
        if unknown:
            raise TuneError(f"unknown or inapplicable knob(s) {unknown} on {dev.type}; "
                            f"searchable here: {', '.join(d.name for d in dims)}.")
        dims = [d for d in dims if d.name in knobs]
    candidates: list[Candidate] = []
    not_applicable: list[Candidate] = []  # listed after the measured ones
    dims = _applicable(workload, dims, dev, not_applicable)
    speed_dims = [d for d in dims if not d.saves_memory]
    total = 2 + sum(len(d.moves()) + 2 for d in dims) + 2

    calib, step_s, steps = _calibrate(workload, dev, speed_dims, budget_seconds, start, warmup, clock,
                                      measure_memory=memory_limit is not None)

    done = 0
    best = Plan()
    skipped: list[tuple[str, str]] = []
    close_calls: list[dict[str, Any]] = []
    best_speedup: float | None = 1.0
    best_m: PlanMeasurement = calib  # the latest measurement of `best`
    spent_measuring, plan_steps = 0.0, 0

    def report(knob: str, partial: float = 0.0) -> None:
        if on_progress:
            on_progress(TuneProgress(done + partial, total, knob, best.describe(), best_speedup,
                                     time.perf_counter() - start, budget_seconds))

    def cost_per_plan_step() -> float:
        """Observed so far (model builds and memory tracking included), never below the calibrated step."""
        return max(step_s, spent_measuring / max(plan_steps, 1))

    def proof_reserve() -> float:
        return 2 * (warmup + max(steps, 6)) * cost_per_plan_step() * 1.2

    report("baseline")
    for dim in dims:
        if dim.saves_memory and _fits(best_m, memory_limit):
            skipped.append((dim.name, "not needed: the best plan fits the memory limit" if memory_limit
                            else "trades speed for memory; pass --memory-limit to search it"))
            done += len(dim.moves()) + 2
            continue
        moves = _new_moves(dim, best)
        estimate = (len(moves) + 2) * (warmup + steps) * cost_per_plan_step() * 1.2
        if dim.plan_field == "compile":
            estimate += COMPILE_ESTIMATE_SECONDS * len(moves)
        if time.perf_counter() - start + estimate + proof_reserve() > budget_seconds:
            skipped.append((dim.name, f"budget: needs ~{estimate:.0f} s + ~{proof_reserve():.0f} s for the final "
                                      f"proof, {budget_seconds - (time.perf_counter() - start):.0f} s left"))
            done += len(dim.moves()) + 2
            continue
        report(dim.name)
        plans = [Plan()] + ([best] if best != Plan() else []) + [best.replace(**m) for m in moves]
        began = time.perf_counter()
        ms = measure_plans(workload, plans, warmup=warmup, steps=steps, device=dev, clock=clock,
                           compare_steps=guard.steps, on_step=lambda i, n: report(dim.name, len(plans) * i / n))
        spent_measuring += time.perf_counter() - began
        plan_steps += len(plans) * (warmup + steps)
        done += len(plans)
        base_m = ms[0]
        if base_m.error:
            raise TuneError(f"the baseline of {workload.name} failed while measuring {dim.name}: {base_m.error}")
        if not candidates:
            candidates.append(Candidate.from_measurement(base_m, base_m, "baseline", "baseline", change="as written"))
        best_m = ms[1] if best != Plan() else ms[0]
        winner, close = _choose(dim, moves, ms[len(plans) - len(moves):], best_m, base_m, guard, memory_limit,
                                candidates)
        close_calls += close
        if winner is not None:
            best, best_speedup = winner.plan, winner.speedup
            best_m = next(m for m in ms if m.plan == best)
        report(dim.name)

    # Second look: a knob kept early may no longer pay on top of the later ones, a close call may
    # win there, or the machine's load has changed since. Measure those variants of the best plan
    # beside it, once.
    variants = _variants(best, dims, close_calls)
    estimate = (len(variants) + 2) * (warmup + steps) * cost_per_plan_step() * 1.2 + COMPILE_ESTIMATE_SECONDS * sum(
        v.compile.enabled and v.compile != best.compile for _, v in variants)
    if variants and time.perf_counter() - start + estimate + proof_reserve() <= budget_seconds:
        report("second look")
        best, best_speedup = _second_look(workload, best, variants, dev, warmup, steps, clock, guard, memory_limit,
                                          candidates, best_speedup)

    # Proof: the winner against the baseline, side by side, with more steps than the search used.
    done = total - 2
    report("proof")
    proof, best, base_c, best_c, notes = _prove(workload, best, dev, warmup, max(steps, 6), clock, memory_limit, guard)
    baseline_mfu, best_mfu = _mfu(workload, dev, base_c, best_c, best)
    done = total
    report("done")
    return TuneResult(
        workload=workload.name, plan=best, baseline=base_c, best=best_c, candidates=candidates + not_applicable,
        throughput_unit=workload.throughput_unit[0] + "/s", items_per_step=workload.throughput_unit[1],
        budget_seconds=budget_seconds, elapsed_seconds=time.perf_counter() - start,
        memory_limit_bytes=memory_limit, guard=guard, fingerprint=machine_fingerprint(), device=str(dev),
        baseline_losses=proof[0].losses, best_losses=proof[-1].losses, skipped=skipped, notes=notes,
        warmup_steps=warmup, timed_steps=steps, baseline_mfu=baseline_mfu, best_mfu=best_mfu,
    )


def _calibrate(workload: Workload, dev, speed_dims: list[Dimension], budget_seconds: float, start: float,
               warmup: int, clock: StepTimer, measure_memory: bool) -> tuple[PlanMeasurement, float, int]:
    """Time a few baseline steps; from that, the steps each measurement gets within the budget.

    Refuses a budget too small for the floor: the baseline beside one candidate, then the proof.
    A budget too small for every knob measures fewer steps; knobs that still do not fit are skipped.
    """
    calib = measure_plans(workload, [Plan()], warmup=1, steps=2, device=dev, clock=clock,
                          measure_memory=measure_memory)[0]
    step_s = calib.step_seconds or 1e-3
    spent = time.perf_counter() - start
    plans_to_measure = 2 + sum(len(d.moves()) + 2 for d in speed_dims) + 2
    need = spent + 4 * (warmup + 3) * step_s * 1.2
    if budget_seconds < need:
        full = spent + plans_to_measure * (warmup + 3) * step_s / 0.7
        raise TuneError(
            f"a budget of {budget_seconds:.0f} s is too small to measure even the baseline: one step of "
            f"{workload.name} takes {step_s:.2f} s here, so the baseline, one candidate and the final "
            f"proof need about {need:.0f} s.\n"
            f"Tip: pass --budget {max(60, int(need * 3) // 60 * 60 + 60)}s or more (a full search of "
            f"{plans_to_measure - 2} candidates needs about {full:.0f} s)."
        )
    steps = int((budget_seconds - spent) * 0.7 / (plans_to_measure * step_s)) - warmup
    return calib, step_s, min(max(steps, 3), max(12, math.ceil(MIN_WINDOW_SECONDS / step_s)))


def _prove(workload: Workload, best: Plan, dev, warmup: int, steps: int, clock: StepTimer,
           memory_limit: int | None, guard: GuardConfig):
    """Re-measure ``best`` beside the baseline; fall back to the baseline if it is not faster there
    (unless the baseline breaks the memory limit: then it is no option)."""
    proof = measure_plans(workload, [Plan(), best] if best != Plan() else [Plan()], warmup=warmup,
                          steps=steps, device=dev, clock=clock, compare_steps=guard.steps)
    base_c = Candidate.from_measurement(proof[0], proof[0], "baseline", "baseline")
    best_c = Candidate.from_measurement(proof[-1], proof[0], "best", "accepted")
    notes = []
    if best != Plan() and _fits(proof[0], memory_limit) and (
            proof[-1].error or not best_c.speedup or best_c.speedup < 1.0):
        notes.append(f"re-measured beside the baseline, {best.describe()} ran at "
                     f"{best_c.speedup or 0:.2f}x; kept the as-written plan instead (never a regression).")
        best, best_c = Plan(), base_c
    return proof, best, base_c, best_c, notes


def _applicable(workload: Workload, dims: list[Dimension], dev, out: list[Candidate]) -> list[Dimension]:
    """``dims`` without the values that cannot apply to this workload (recorded as n/a), and
    without the knobs left with none: no time is spent measuring around a refused transform."""
    kept = []
    for dim in dims:
        values = []
        for value in dim.candidates:
            plan = Plan().replace(**{dim.plan_field: value})
            why = refusal(workload, plan, dev)
            if why is None:
                values.append(value)
            else:
                out.append(Candidate.from_measurement(PlanMeasurement(plan, None, error=why), PlanMeasurement(
                    Plan(), None), dim.name, "n/a" if why.startswith("TransformError") else "failed", why,
                    plan.describe()))
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
    out = []
    if len(kept) > 1:
        out += [(f"without {d.name}", best.replace(**{d.plan_field: getattr(Plan(), d.plan_field)})) for d in kept]
    for move in close_calls:
        variant = best.replace(**move)
        if variant != best and variant not in [v for _, v in out]:
            out.append((f"with {_describe(move)}", variant))
    return out


def _mfu(workload: Workload, dev, base: Candidate, best: Candidate, plan: Plan) -> tuple[float | None, float | None]:
    """MFU of the baseline and the tuned plan, each against the measured matmul peak of its own dtype."""
    from torchsmith.measure.peak import checked_mfu
    from torchsmith.measure.run_metrics import flops_per_step, matmul_dtype

    flops = flops_per_step(workload, dev)

    def of(c: Candidate, p: Plan) -> float | None:
        # At the plan's own thread count and dtype; None rather than a figure above 100%.
        return (checked_mfu(flops, c.step_seconds, dev.type, matmul_dtype(p), threads=p.threads.intra_op)[0]
                if flops and c.step_seconds else None)

    return of(base, Plan()), of(best, plan)


def _second_look(workload: Workload, best: Plan, variants: list[tuple[str, Plan]], dev, warmup: int, steps: int,
                 clock: StepTimer, guard: GuardConfig, memory_limit: int | None, out: list[Candidate],
                 best_speedup: float | None) -> tuple[Plan, float | None]:
    """Switch to the fastest variant if it beats ``best`` by more than the noise margin."""
    ms = measure_plans(workload, [Plan(), best, *(v for _, v in variants)], warmup=warmup, steps=steps,
                       device=dev, clock=clock, compare_steps=guard.steps)
    base_m, best_m = ms[0], ms[1]
    fastest, label = best_m, ""
    for (what, _), m in zip(variants, ms[2:]):
        if m.ok and guard_rejection(m, guard) is None and _fits(m, memory_limit) \
                and m.step_seconds < fastest.step_seconds * (1 - NOISE_MARGIN):
            fastest, label = m, what
    if fastest is best_m:
        return best, best_speedup
    out.append(Candidate.from_measurement(fastest, base_m, "second look", "accepted", change=f"second look: {label}"))
    return fastest.plan, base_m.step_seconds / fastest.step_seconds


def _choose(dim: Dimension, moves: list[dict[str, Any]], measured: list[PlanMeasurement], current: PlanMeasurement,
            base: PlanMeasurement, guard: GuardConfig, memory_limit: int | None,
            out: list[Candidate]) -> tuple[Candidate | None, list[dict[str, Any]]]:
    """Classify each candidate of one knob; return the winner, if any, and the close calls.

    The winner is the fastest candidate that passes, and it must beat ``current`` by more than
    the noise margin (unless ``current`` breaks the memory limit). Picking the fastest rather
    than the first to clear the margin keeps the order of the candidates from deciding.
    Close calls are passing candidates within ``CLOSE_CALL`` of the winner: the second look
    tries them again on top of the final plan, where the knobs chosen later may favour them.
    """
    passed: list[tuple[int, PlanMeasurement]] = []
    verdicts: list[Candidate | None] = []
    for i, (move, m) in enumerate(zip(moves, measured)):
        change = _describe(move)
        if m.error:
            status = "n/a" if m.error.startswith("TransformError") else "failed"
            verdicts.append(Candidate.from_measurement(m, base, dim.name, status, m.error, change))
            continue
        reason = guard_rejection(m, guard)
        if reason is None and not _fits(m, memory_limit):
            reason = f"peak memory {m.peak_memory_bytes / 2**20:.1f} MiB exceeds the limit {memory_limit / 2**20:.1f} MiB"
        if reason:
            verdicts.append(Candidate.from_measurement(m, base, dim.name, "rejected", reason, change))
            continue
        verdicts.append(None)  # passed: judged below, against the fastest
        passed.append((i, m))
    winner: Candidate | None = None
    close: list[dict[str, Any]] = []
    if passed:
        i_fast, fastest = min(passed, key=lambda im: im[1].step_seconds)
        wins = fastest.step_seconds < current.step_seconds * (1 - NOISE_MARGIN) or not _fits(current, memory_limit)
        leader = fastest if wins else current
        for i, m in passed:
            change = _describe(moves[i])
            if wins and i == i_fast:
                winner = verdicts[i] = Candidate.from_measurement(m, base, dim.name, "accepted", change=change)
                continue
            rival = f"{_describe(moves[i_fast])}'s" if wins else "the current best's"
            verdicts[i] = Candidate.from_measurement(
                m, base, dim.name, "slower",
                f"{leader.step_seconds / m.step_seconds:.2f}x {rival} speed"
                + ("" if wins else f" (needs > {1 / (1 - NOISE_MARGIN):.2f}x to win)"), change)
            if m.step_seconds <= leader.step_seconds * (1 + CLOSE_CALL):
                close.append(moves[i])
    out.extend(v for v in verdicts if v is not None)
    return winner, close


def _describe(move: dict[str, Any]) -> str:
    """The fields a move sets, as ``Plan.describe`` words them, e.g. 'loader.num_workers=2 + threads.intra_op=1'."""
    return Plan().replace(**move).describe()


def _fits(m: PlanMeasurement, memory_limit: int | None) -> bool:
    return memory_limit is None or (m.peak_memory_bytes is not None and m.peak_memory_bytes <= memory_limit)


def _check_workload_runs(workload: Workload, device) -> None:
    """One step of the as-written plan. Its error, if any, reaches the user unchanged and named."""
    try:
        step = build_step(workload, Plan(), device)
        step(next(iter(workload.iter_batches())))
    except Exception as err:
        raise WorkloadStepError(workload.name, err) from err


class WorkloadStepError(TuneError):
    """The workload itself fails as written; ``original`` is its exception, unchanged."""

    def __init__(self, spec: str, original: BaseException):
        import traceback

        frames = traceback.extract_tb(original.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        super().__init__(
            f"workload {spec!r} fails as written, before any search: "
            f"{type(original).__name__}: {original}{where}.\n"
            f"Tip: check that `torchsmith run {spec} --steps 1` works, then tune."
        )
        self.original = original

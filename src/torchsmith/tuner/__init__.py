"""``tuner``: the search behind ``torchsmith.tune``: the fastest plan that keeps the loss, proved.

Example::

    import torchsmith
    result = torchsmith.tune(torchsmith.load_workload("gpt-mini"), budget="3m")
    result.plan.save("plan.json")
    result.speedup
    torchsmith.write_tune_report(result, "report.html")   # rendering lives in report/, not here

Modules:
    choose        verdicts on one knob's candidates: passed, won, close calls
    guard         GuardConfig / guard_rejection: a faster plan counts only if it trains the same
    mfu           MFU of the as-written and the tuned plan, each against its own dtype's peak
    pace          the time budget: what a measurement will cost, how many steps fit
    rank_rounds   RankRounds: under --nproc-per-node every round is a torchrun job on the ranks
    proof_rounds  where a claim's rounds run: fresh processes, so the interval holds in another one
    result        TuneResult / Candidate: every candidate measured, the winner and the proof
    scale_rows    the scale rows of a search on ranks: each strategy predicted at N, 8, 64 and 512 ranks
    rounds        a candidate's evidence: every round it was measured in, pooled, one burst dropped
    script        tune_script / verify_script: the measured search on an unmodified script (a subpackage)
    strategy_order by_prediction: the strategies measured fastest predicted first, so a budget cut drops the slowest
    search        search: the greedy, measured search for the fastest plan that keeps the loss
    verify        verify: an independent A/B of a plan against the workload as written
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from torchsmith.harness.compare import StepTimer, wall_clock
from torchsmith.text import parse_bytes, parse_duration
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.result import Candidate, TuneResult
from torchsmith.tuner.scale_rows import DEFAULT_INTERCONNECT
from torchsmith.tuner.search import TuneError, TuneProgress, WorkloadStepError, search
from torchsmith.workload import Workload, load_workload

__all__ = ["tune", "TuneResult", "Candidate", "GuardConfig", "TuneError", "TuneProgress", "WorkloadStepError"]


def tune(workload: Workload | str | None = None, *, budget: str | float = "5m", memory_limit: str | int | None = None,
         out: str | Path | None = None, guard: GuardConfig = GuardConfig(),
         device: str | None = None, knobs: Sequence[str] | None = None, clock: StepTimer = wall_clock,
         on_progress: Callable[[TuneProgress], None] | None = None, nproc_per_node: int = 1,
         interconnect: str = DEFAULT_INTERCONNECT) -> TuneResult:
    """Search the plan space within ``budget`` and return the fastest plan that keeps the loss.

    ``out`` writes the plan as JSON; ``torchsmith.write_tune_report(result, path)`` writes the HTML report.
    ``knobs`` limits the search to some transforms, e.g. ``["threads", "compile"]``.
    ``clock`` times one step (tests stub it to prove decisions follow measurements).
    ``nproc_per_node`` > 1 measures every round on that many torchrun ranks and searches the parallel
    strategy (DDP's settings, ZeRO-1, FSDP2) too; the workload must then be given by name or spec, and
    ``result.scale`` predicts each strategy at 8, 64 and 512 ranks over ``interconnect``.
    """
    budget_s = parse_duration(budget)
    limit = parse_bytes(memory_limit)
    if budget_s <= 0:
        raise ValueError(f"the time budget must be positive, got {budget!r}.")
    w = load_workload(workload)
    result = search(w, budget_seconds=budget_s, memory_limit=limit, guard=guard, device=device,
                    knobs=knobs, clock=clock, on_progress=on_progress, nproc=nproc_per_node,
                    interconnect=interconnect)
    if out is not None:
        result.plan.save(out)
    return result


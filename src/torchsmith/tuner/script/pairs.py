"""Alternating process pairs: how a script's candidate is compared with a reference plan.

Step-to-step noise lives inside a process; process-to-process noise (placement, clock frequency,
neighbours) lives between processes, and on a shared 2-core VM it is the larger one (one run of a
script's step varies by 15-20% from process to process: ``benchmarks/script_run_noise.py``). So
the unit of repetition is a pair of fresh processes, one of each plan, and the order alternates
pair by pair, ``B A | A B | B A ...``: a drift of the machine over the search (a neighbour
starting, a clock ramping down) falls on both plans alike. The candidate (B) runs first, so one
that crashes, changes the loss or is not applied costs one run, not a pair. Each pair gives one
ratio; the ratios make a :class:`~torchsmith.measure.intervals.SpeedupInterval`, and
:class:`~torchsmith.measure.intervals.AdaptivePairs` decides when there are enough of them.

The scheduler takes the runner as a function, so its decisions are tested with stub runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torchsmith.measure.intervals import AdaptivePairs, SpeedupInterval
from torchsmith.plan import Plan
from torchsmith.tuner.script.run import ScriptRun

RunPlan = Callable[[Plan, str], ScriptRun]
"""Runs the script once under a plan, with a label for the run list: ``run(plan, "baseline")``."""


@dataclass
class PairedComparison:
    """Every run of one comparison, in pairs, and what they say."""

    reference: list[ScriptRun] = field(default_factory=list)
    """The reference plan's runs, one per completed pair."""
    candidate: list[ScriptRun] = field(default_factory=list)
    """The candidate's runs, one per completed pair (same index: same pair)."""
    stopped_by: ScriptRun | None = None
    """The candidate run that ended the comparison early (it failed, or ``stop`` said so)."""
    reference_failures: int = 0
    """Reference runs that failed: their pairs are dropped, not counted."""
    out_of_budget: bool = False
    """The budget ended the comparison before the pairs decided."""

    @property
    def pairs(self) -> int:
        return len(self.candidate)

    def interval(self) -> SpeedupInterval | None:
        """The candidate's speedup over the reference (> 1: faster); None without a complete pair."""
        from torchsmith.measure.intervals import speedup_interval

        if not self.candidate:
            return None
        return speedup_interval([r.step_seconds or 0.0 for r in self.reference],
                                [r.step_seconds or 0.0 for r in self.candidate])


def compare_in_pairs(run: RunPlan, reference: Plan, candidate: Plan, decide: AdaptivePairs, *,
                     afford_pair: Callable[[], bool], stop: Callable[[ScriptRun], bool] = lambda r: False,
                     first_order: int = 1, reference_label: str = "baseline") -> PairedComparison:
    """Run pairs of ``reference`` and ``candidate`` in alternating order until ``decide`` is decided,
    its cap is reached, or ``afford_pair()`` says the budget has no room for another pair.

    A candidate run that fails, or that ``stop`` rejects (its loss changed, the knob was not
    applied), ends the comparison at once: no number of pairs makes it a win. A failed reference
    run drops its pair. ``first_order`` (1, the default: the candidate first, so a candidate that
    ends the comparison in its first run costs no reference run; 0: the reference first) lets a
    caller continue the alternation across comparisons.

    Example::

        out = compare_in_pairs(run, Plan(), fused, AdaptivePairs(), afford_pair=lambda: True)
        out.interval().verdict()
    """
    out = PairedComparison()
    label = candidate.describe()
    order = first_order
    while decide.need_more() or out.pairs == 0:
        if not afford_pair():
            out.out_of_budget = True
            return out
        runs: dict[str, ScriptRun] = {}
        for who in (("reference", "candidate") if order % 2 == 0 else ("candidate", "reference")):
            if who == "reference":
                runs[who] = run(reference, reference_label)
            else:
                runs[who] = run(candidate, label)
                if not runs[who].ok or stop(runs[who]):
                    out.stopped_by = runs[who]
                    return out
        order += 1
        ref, cand = runs["reference"], runs["candidate"]
        if not (ref.ok and ref.step_seconds and cand.step_seconds):
            out.reference_failures += 1
            if out.reference_failures > decide.max_pairs:
                return out  # the reference no longer runs: nothing to compare against
            continue
        out.reference.append(ref)
        out.candidate.append(cand)
        decide.add(ref.step_seconds, cand.step_seconds)
    return out

"""A short side-by-side of two CPU thread counts on the script's own training steps.

The threads rule must not guess: a thread count that looks wrong (fewer threads than cores,
workers and threads oversubscribing the cores, or every core busy on a small model) is only
a suspicion until measured. After the profiled window, the capture runs the next steps
round-robin at the current count and at the suspected ones (A B C A B C ..., so that drift in
the machine's load hits all alike), then puts the current count back. The rule reads the
medians and fires only on a clear, consistent win. A close call (the medians say a win, the
pairs are not yet consistent) gets as many rounds again before it is judged: one burst of load
during one of a suspect's 4 steps costs it all 4 of that step's pairs, a quarter of them.

Example::

    probe = ThreadProbe(current=8, suspects=[2, 1])
    while not probe.done:
        seconds = run_one_step()
        probe.record(seconds)          # sets the thread count for the next step
    probe.result()                     # {"threads": [8, 2, 1], "seconds": [[...], [...], [...]]}
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

PROBE_STEPS = 4
"""Steps per thread count, taken round-robin (current, suspect, ...), so that drift hits all alike."""
MAX_PROBE_STEPS = 2 * PROBE_STEPS
"""Steps per count for a close call (see :func:`undecided`). In the test suite's load, one
suspect step in 4 took 0.19 s against its others' 0.03-0.11 s and the current count's 0.13-0.15 s:
a 1.7x median win whose pairs, at 12 of 16, fell short of the share below."""
MIN_SPEEDUP = 1.2
"""The best suspected count must be at least this much faster (median step time) to be a finding."""
MIN_WIN_SHARE = 0.8
"""...and win at least this share of all (its step, a current step) pairs: a shared machine's
load comes in bursts, so one slow step must not decide, nor one lucky one."""


def suspect_threads(intra: int, cores: int, workers: int) -> list[int]:
    """Thread counts worth measuring against ``intra`` (at most two); empty when there is no suspicion.

    - fewer threads than cores: all cores;
    - more threads than cores, or DataLoader workers beside them: the cores, or the cores the
      workers leave;
    - and, when every core is in use: one thread. On a small model or a machine whose other
      processes hold a core, OpenMP threads wait on each other at every op; one thread then
      runs faster, by a factor that follows the load of the moment (``measure/load.py``).
    """
    if intra < cores:
        found = [cores]
    else:
        found = [cores if not workers else max(1, cores - workers), 1]
    out: list[int] = []
    for n in found:
        if n != intra and n not in out:
            out.append(n)
    return out[:2]


class ThreadProbe:
    """Cycles ``torch.set_num_threads`` through the counts, one step each; see the module docstring."""

    def __init__(self, current: int, suspects: list[int], steps: int = PROBE_STEPS,
                 max_steps: int = MAX_PROBE_STEPS):
        self.counts = [current, *suspects]
        self.steps = steps
        self.max_steps = max(steps, max_steps)
        self.seconds: list[list[float]] = [[] for _ in self.counts]
        self._now = 0  # index into counts of the setting the next step runs under

    @property
    def done(self) -> bool:
        """Every count has its ``steps``, and the verdict is decided or ``max_steps`` are in."""
        taken = min(len(s) for s in self.seconds)
        if taken < self.steps:
            return False
        return taken >= self.max_steps or not undecided(probe_verdict(self.result()))

    def start(self) -> None:
        """The next step runs at the current count (it is already set)."""
        self._now = 0

    def record(self, seconds: float) -> None:
        """The step that just ended ran at ``counts[_now]``; switch for the next one."""
        self.seconds[self._now].append(seconds)
        self._now = (self._now + 1) % len(self.counts)
        torch.set_num_threads(self.counts[self._now] if not self.done else self.counts[0])

    def restore(self) -> None:
        torch.set_num_threads(self.counts[0])

    def result(self) -> dict[str, Any]:
        return {"threads": list(self.counts), "seconds": [list(s) for s in self.seconds]}


def probe_verdict(result: dict[str, Any]) -> tuple[int, float, float] | None:
    """(the fastest suspected count, its median speedup over the current count, the share of
    (its step, a current step) pairs it won), or None when too few steps were measured."""
    counts, seconds = result.get("threads", []), result.get("seconds", [])
    if len(seconds) < 2 or any(len(s) < 2 for s in seconds):
        return None
    best = min(range(1, len(seconds)), key=lambda i: statistics.median(seconds[i]))
    ratio = statistics.median(seconds[0]) / statistics.median(seconds[best])
    wins = sum(b < a for b in seconds[best] for a in seconds[0]) / (len(seconds[best]) * len(seconds[0]))
    return counts[best], ratio, wins


def undecided(verdict: tuple[int, float, float] | None) -> bool:
    """A close call: the medians say a win of at least ``MIN_SPEEDUP``, but the suspect's steps
    have not yet won ``MIN_WIN_SHARE`` of the pairs. More rounds decide it either way."""
    return verdict is not None and verdict[1] >= MIN_SPEEDUP and verdict[2] < MIN_WIN_SHARE

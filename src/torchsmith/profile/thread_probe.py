"""A short side-by-side of two CPU thread counts on the script's own training steps.

The threads rule must not guess: a thread count that looks wrong (fewer threads than cores,
workers and threads oversubscribing the cores, or every core busy on a small model) is only
a suspicion until measured. After the profiled window, the capture runs the next steps
round-robin at the current count and at the suspected ones (A B C A B C ..., so that drift in
the machine's load hits all alike), then puts the current count back. The rule reads the
medians and fires only on a clear, consistent win.

Example::

    probe = ThreadProbe(current=8, suspects=[2, 1], steps=3)
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

    def __init__(self, current: int, suspects: list[int], steps: int = PROBE_STEPS):
        self.counts = [current, *suspects]
        self.steps = steps
        self.seconds: list[list[float]] = [[] for _ in self.counts]
        self._now = 0  # index into counts of the setting the next step runs under

    @property
    def done(self) -> bool:
        return all(len(s) >= self.steps for s in self.seconds)

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

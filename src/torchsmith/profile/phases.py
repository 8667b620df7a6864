"""Which phase each instant of a recorded step belongs to, judged by what ran, not where it sits.

A training step's phases nest in real code: Lightning and LBFGS run forward and backward
inside ``optimizer.step(closure)``; the HF Trainer computes the loss inside the model; a GAN
steps two optimizers per cycle. So a phase is the work itself:

- ``sync``: a real host-device sync (a CUDA ``*Synchronize`` or blocking ``cudaMemcpy``, with
  the op that caused it); on a CPU nothing waits for a device, so there is none;
- ``backward``: autograd-engine work (``autograd::engine::evaluate_function`` spans) and the
  Python ``backward``/``autograd.grad`` frames that drive it;
- ``forward``: work under an ``nn.Module`` call (outermost module spans: the trained model,
  a loss module); without Python frames in the trace, the compute ops outside the optimizer;
- ``data``: the measured wait for the next batch (DataLoader ``__next__`` spans), nothing guessed;
- ``optimizer``: ``Optimizer.step`` and ``Optimizer.zero_grad`` spans, less the closure they
  ran: frames of code outside ``torch/`` inside them that ran forward or backward (Lightning's
  training step, an LBFGS closure), whose forward and backward count as such and whose
  bookkeeping is other;
- ``other``: the rest.

Where spans overlap, the first category in ``PRIORITY`` wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CATEGORIES = ("data", "forward", "backward", "optimizer", "sync", "other")
PRIORITY = ("sync", "backward", "forward", "data", "closure", "optimizer")  # highest first
"""``closure`` is internal: the rest of a closure's time is reported as other."""
ENGINE = "autograd::engine::evaluate_function"
OPTIMIZER_LABEL = "torchsmith.optimizer "
"""Prefix of the span the capture opens around each optimizer's step (``torchsmith.optimizer #1 Adam``),
so that two optimizers of one class are told apart."""
_BACKWARD = re.compile(r"torch/(_tensor|autograd/__init__)\.py\(\d+\): (backward|grad)$")
_CUDA_SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")

Interval = tuple[float, float]


def end(e: dict[str, Any]) -> float:
    return e["ts"] + e["dur"]


def inside(e: dict[str, Any], intervals: list[Interval]) -> bool:
    return any(a <= e["ts"] < b for a, b in intervals)


def merge(spans: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


@dataclass
class StepTimeline:
    """One recorded step's host events and its phase intervals (microseconds, trace clock)."""

    s0: float
    s1: float
    events: list[dict[str, Any]]
    """Host-thread events that start inside the step, sorted by (start, -duration)."""
    intervals: dict[str, list[Interval]]
    syncs: list[dict[str, Any]]
    """One event per real device sync: the outermost op around it, or the runtime call itself."""
    optimizer_spans: dict[str, list[Interval]]
    """Per optimizer label (``#1 Adam``), its step spans."""

    @property
    def compute(self) -> list[Interval]:
        return self.intervals["forward"] + self.intervals["backward"]

    @property
    def cpu_ops(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("cat") == "cpu_op"]


def timeline(s0: float, s1: float, events: list[dict[str, Any]]) -> StepTimeline:
    """Build the phase intervals of the step spanning ``[s0, s1)`` from its host events."""
    optim = [(e["ts"], min(end(e), s1)) for e in events
             if e["name"].startswith(("Optimizer.step#", "Optimizer.zero_grad#"))]
    back = _backward_spans(events)
    forward = _forward_spans(events, optim)
    data = [(e["ts"], end(e)) for e in events if e["name"].startswith("enumerate(DataLoader)")]
    syncs = _device_syncs(events, optim, forward + back)
    closures = _closure_spans(events, optim, forward + back)
    labels: dict[str, list[Interval]] = {}
    for e in events:
        if e["name"].startswith(OPTIMIZER_LABEL):
            labels.setdefault(e["name"].removeprefix(OPTIMIZER_LABEL), []).append((e["ts"], min(end(e), s1)))
    intervals = {"sync": [(e["ts"], end(e)) for e in syncs], "backward": back, "forward": forward,
                 "data": data, "closure": closures, "optimizer": optim}
    return StepTimeline(s0, s1, events, intervals, syncs, labels)


def _backward_spans(events: list[dict[str, Any]]) -> list[Interval]:
    # Both sources: the Python frame covers the engine's start-up and hooks; the engine's own
    # spans are all there is when the trace has no Python frames (with_stack=False).
    spans = [(e["ts"], end(e)) for e in events
             if (e.get("cat") == "python_function" and _BACKWARD.search(e["name"]))
             or (e.get("cat") == "cpu_op" and e["name"].startswith(ENGINE))]
    return merge(spans)


def _forward_spans(events: list[dict[str, Any]], optim: list[Interval]) -> list[Interval]:
    mods = [(e["ts"], end(e)) for e in events
            if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]
    if mods:
        return merge(mods)
    # No Python frames: the compute ops outside the optimizer's own update (backward wins
    # over these by priority, so only forward work is left).
    return merge([(e["ts"], end(e)) for e in events
                  if e.get("cat") == "cpu_op" and not e["name"].startswith(ENGINE) and not inside(e, optim)])


def _closure_spans(events: list[dict[str, Any]], optim: list[Interval], compute: list[Interval]) -> list[Interval]:
    """Code the optimizer called back into: Python frames outside ``torch/`` inside its spans that ran
    forward or backward work (Lightning's wrapped training step, an LBFGS closure).

    A frame named ``step`` is the optimizer's own (a custom optimizer outside ``torch/``), and a
    helper without forward or backward under it is part of the update: both stay optimizer.
    """
    frames = [(e["ts"], end(e)) for e in events if e.get("cat") == "python_function" and inside(e, optim)
              and not e["name"].startswith(("torch/", "nn.Module: ", "<")) and ".py(" in e["name"]
              and not e["name"].endswith(": step")]
    return merge([(a, b) for a, b in frames if any(a <= c < b for c, _ in compute)])


def _device_syncs(events: list[dict[str, Any]], optim: list[Interval], compute: list[Interval]) -> list[dict[str, Any]]:
    """Real device syncs, each once (the outermost op that waited), outside the optimizer's own work.

    ``aten::item`` on a CPU tensor (a loss read, a memmap index) waits for nothing: only a
    CUDA runtime sync or blocking copy makes the host wait for the device.
    """
    waits = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"].startswith(_CUDA_SYNC)
             and not e["name"].startswith("cudaMemcpyAsync")]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    found: dict[int, dict[str, Any]] = {}
    for w in waits:
        outer = next((o for o in ops if o["ts"] <= w["ts"] and end(w) <= end(o)), w)  # ops sorted: outermost first
        if inside(outer, optim) and not inside(outer, compute):
            continue  # the optimizer's own scalar reads (e.g. a step counter) are not the loop's
        found[id(outer)] = outer
    return sorted(found.values(), key=lambda e: e["ts"])


def attribute(s0: float, s1: float, intervals: dict[str, list[Interval]]) -> dict[str, float]:
    """Sweep the step's timeline; each instant goes to the highest-priority category covering it."""
    marks: list[tuple[float, int, int]] = []
    for rank, cat in enumerate(PRIORITY):
        for a, b in intervals[cat]:
            a, b = max(a, s0), min(b, s1)
            if b > a:
                marks += [(a, 1, rank), (b, -1, rank)]
    marks.sort()
    counts = [0] * len(PRIORITY)
    totals = dict.fromkeys(CATEGORIES + ("closure",), 0.0)
    prev = s0
    for t, delta, rank in marks:
        active = next((i for i, c in enumerate(counts) if c > 0), None)
        totals[PRIORITY[active] if active is not None else "other"] += t - prev
        counts[rank] += delta
        prev = t
    totals["other"] += s1 - prev
    totals["other"] += totals.pop("closure", 0.0)
    return totals


def optimizer_shares(tl: StepTimeline) -> dict[str, float]:
    """Microseconds of optimizer-phase time inside each labelled optimizer's step spans."""
    higher = {c: tl.intervals[c] for c in PRIORITY if c != "optimizer"}
    out = {}
    for label, spans in tl.optimizer_spans.items():
        out[label] = attribute(tl.s0, tl.s1, {**higher, "optimizer": spans})["optimizer"]
    return out

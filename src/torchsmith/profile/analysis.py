"""Turn an exported Chrome trace of profiled training steps into a step-time breakdown.

Only the exported trace is read (the public artefact of ``torch.profiler``), never profiler
internals. Each recorded step is a ``ProfilerStep#N`` span: one cycle of the training loop,
from the end of the main optimizer's step to the end of its next one. Its time is split into
phases by what ran (see :mod:`torchsmith.profile.phases`): data, forward, backward, optimizer
(with each optimizer's share), sync and other.

Example::

    a = analyse_trace("trace.json")
    a.share("data"), a.top_ops[0].name
"""

from __future__ import annotations

import bisect
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchsmith.profile.phases import (
    CATEGORIES,
    StepTimeline,
    attribute,
    optimizer_shares,
    timeline,
)
from torchsmith.profile.phases import ENGINE as _WRAPPER
from torchsmith.profile.phases import end as _end
from torchsmith.profile.phases import inside as _inside

__all__ = ["CATEGORIES", "OpStat", "Site", "StepBreakdown", "TraceAnalysis", "analyse_trace"]

_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
SMALL_OP_US = {"cpu": 20.0, "cuda": 10.0}
"""A top-level host op (or GPU kernel) shorter than this is dispatch/launch-bound."""
ZERO_FILL_OPS = ("aten::zero_", "aten::_foreach_zero_")
"""What ``Optimizer.zero_grad(set_to_none=False)`` runs: one fill per gradient, or one multi-tensor fill."""
MULTI_TENSOR = ("_foreach_", "_fused_")
"""Op-name parts of the multi-tensor (foreach) and fused optimizer kernels."""
MAX_FLOAT64_OPS = 10


@dataclass(frozen=True)
class StepBreakdown:
    seconds: float
    phases: dict[str, float]
    """Seconds per category; they sum to ``seconds``."""
    optimizers: dict[str, float] = field(default_factory=dict)
    """Optimizer-phase seconds per optimizer (``#1 Adam``), when the capture labelled them."""


@dataclass(frozen=True)
class OpStat:
    name: str
    shapes: str
    count: int
    self_seconds: float
    """Summed over the recorded steps."""


@dataclass(frozen=True)
class Site:
    """A source location (``file.py:line in func``) and what happened there."""

    where: str
    count: int
    seconds: float


@dataclass
class TraceAnalysis:
    steps: list[StepBreakdown]
    top_ops: list[OpStat] = field(default_factory=list)
    top_kernels: list[OpStat] = field(default_factory=list)
    """GPU kernels by device time (empty on CPU); shapes are on the launching op in ``top_ops``."""
    sync_sites: list[Site] = field(default_factory=list)
    steps_with_sync: int = 0
    getitem_sites: list[Site] = field(default_factory=list)
    ops_per_step: float = 0.0
    """Top-level operators per step in forward and backward."""
    small_op_share: float = 0.0
    """Share of forward+backward operator time spent in operators under SMALL_OP_US."""
    median_op_us: float = 0.0
    optimizer_ops_per_step: float = 0.0
    foreach_ops_per_step: float = 0.0
    zero_fill_ops_per_step: float = 0.0
    zero_grad_seconds_per_step: float = 0.0
    float64_ops: list[str] = field(default_factory=list)
    peak_delta_bytes: list[int] = field(default_factory=list)
    """Per recorded step: highest CPU bytes allocated inside the step above its start."""
    cuda_peak_bytes: int | None = None
    compiled_regions: int = 0
    device: str = "cpu"
    trace_bytes: int = 0
    analysis_seconds: float = 0.0

    @property
    def step_seconds(self) -> float:
        return statistics.median(s.seconds for s in self.steps) if self.steps else 0.0

    def seconds(self, category: str) -> float:
        """Median seconds per step in ``category``."""
        return statistics.median(s.phases[category] for s in self.steps) if self.steps else 0.0

    def optimizer_shares(self) -> dict[str, float]:
        """Fraction of all recorded step time in each optimizer's own update."""
        total = sum(s.seconds for s in self.steps)
        out: dict[str, float] = {}
        for s in self.steps:
            for label, sec in s.optimizers.items():
                out[label] = out.get(label, 0.0) + sec
        return {label: sec / total for label, sec in out.items()} if total > 0 else out

    def median_share(self, category: str) -> float:
        """Median over the recorded steps of the step's fraction in ``category``: one step stalled by
        the machine (a page fault, another process) does not decide it."""
        return statistics.median(s.phases[category] / s.seconds if s.seconds > 0 else 0.0
                                 for s in self.steps) if self.steps else 0.0

    def share(self, category: str) -> float:
        """Fraction of all recorded step time spent in ``category``."""
        total = sum(s.seconds for s in self.steps)
        return sum(s.phases[category] for s in self.steps) / total if total > 0 else 0.0


def analyse_trace(path: str | Path, top: int = 12, steps: int | None = None) -> TraceAnalysis:
    """Read a Chrome trace exported by ``torch.profiler`` and analyse its ``ProfilerStep`` spans.

    ``steps``: how many of them were completed steps (the capture's count); a script that
    crashed or was interrupted inside the window leaves one more, unfinished, which is dropped.
    """
    t0 = time.perf_counter()
    path = Path(path)
    events = json.loads(path.read_text())["traceEvents"]
    result = _analyse(events, top, steps)
    result.trace_bytes = path.stat().st_size
    result.analysis_seconds = time.perf_counter() - t0
    return result


def _analyse(events: list[dict[str, Any]], top: int, steps: int | None = None) -> TraceAnalysis:
    spans = _step_spans(events, steps)
    host = _host_events(events, spans[0]["tid"])
    kernels = [e for e in events if e.get("ph") == "X" and "dur" in e and e.get("cat") == "kernel"]
    out = TraceAnalysis(steps=[], device="cuda" if kernels else "cpu")
    stats = _OpStats(pyid={e["args"].get("Python id"): e for e in host if e.get("cat") == "python_function"})
    starts = [e["ts"] for e in host]
    for span in spans:
        s0, s1 = span["ts"], _end(span)
        tl = timeline(s0, s1, host[bisect.bisect_left(starts, s0):bisect.bisect_left(starts, s1)])
        phases = attribute(s0, s1, tl.intervals)
        out.steps.append(StepBreakdown(seconds=span["dur"] / 1e6, phases={k: v / 1e6 for k, v in phases.items()},
                                       optimizers={k: v / 1e6 for k, v in optimizer_shares(tl).items()}))
        stats.add(tl)
    stats.finish(out, len(spans), top)
    if kernels:
        _kernel_stats(out, kernels, len(spans), top)
    out.peak_delta_bytes, out.cuda_peak_bytes = _memory(events, spans)
    out.compiled_regions = sum(1 for e in events
                               if e.get("ph") == "X" and e["name"].startswith("Torch-Compiled Region"))
    return out


def _step_spans(events: list[dict[str, Any]], steps: int | None) -> list[dict[str, Any]]:
    spans = sorted((e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])[:steps]
    if not spans:
        raise ValueError("the trace holds no ProfilerStep spans: no training step was recorded.\n"
                         "Tip: the script must call optimizer.step() at least --steps + 3 times.")
    return spans


def _host_events(events: list[dict[str, Any]], tid: Any) -> list[dict[str, Any]]:
    """Complete events on the training thread, parents before their children."""
    return sorted((e for e in events if e.get("ph") == "X" and "dur" in e and e["tid"] == tid),
                  key=lambda e: (e["ts"], -e["dur"]))


class _OpStats:
    """Per-step operator counts and times, summed over the recorded steps by :meth:`add`."""

    def __init__(self, pyid: dict[Any, dict[str, Any]]):
        self.pyid = pyid
        self.self_times: dict[tuple[str, str], list[float]] = {}
        self.sync_sites: dict[str, list[float]] = {}
        self.getitems: dict[str, list[float]] = {}
        self.compute_durs: list[float] = []
        self.optimizer_ops = self.multi_tensor_ops = self.zero_fill_ops = 0
        self.zero_grad_us = 0.0
        self.steps_with_sync = 0
        self.float64: set[str] = set()

    def add(self, tl: StepTimeline) -> None:
        self._syncs(tl)
        self._getitems(tl)
        cpu_ops = tl.cpu_ops
        for e in _self_times(cpu_ops, self.self_times):
            if _inside(e, tl.compute):
                self.compute_durs.append(e["dur"])
                if _float64_tensor_arg(e):
                    self.float64.add(f"{e['name']} {_shapes(e)}")
            elif _inside(e, tl.intervals["optimizer"]):
                self.optimizer_ops += 1
                self.multi_tensor_ops += any(m in e["name"] for m in MULTI_TENSOR)
        for z in tl.events:
            if z["name"].startswith("Optimizer.zero_grad#"):
                self.zero_grad_us += z["dur"]
                self.zero_fill_ops += sum(1 for c in cpu_ops
                                          if c["name"] in ZERO_FILL_OPS and z["ts"] <= c["ts"] <= _end(z))

    def _syncs(self, tl: StepTimeline) -> None:
        self.steps_with_sync += bool(tl.syncs)
        for e in tl.syncs:
            self.sync_sites.setdefault(_user_frame(e, tl.events, self.pyid), []).append(e["dur"])

    def _getitems(self, tl: StepTimeline) -> None:
        for e in tl.events:
            if (e.get("cat") == "python_function" and e["name"].endswith(": __getitem__")
                    and _inside(e, tl.intervals["data"])):
                self.getitems.setdefault(_where(e["name"]), []).append(e["dur"])

    def finish(self, out: TraceAnalysis, steps: int, top: int) -> None:
        durs = self.compute_durs
        small = [d for d in durs if d < SMALL_OP_US["cpu"]]
        out.ops_per_step = len(durs) / steps
        out.small_op_share = sum(small) / sum(durs) if sum(durs) > 0 else 0.0
        out.median_op_us = statistics.median(durs) if durs else 0.0
        out.optimizer_ops_per_step = self.optimizer_ops / steps
        out.foreach_ops_per_step = self.multi_tensor_ops / steps
        out.zero_fill_ops_per_step = self.zero_fill_ops / steps
        out.zero_grad_seconds_per_step = self.zero_grad_us / 1e6 / steps
        out.top_ops = [OpStat(name, shapes, len(d), sum(d) / 1e6)
                       for (name, shapes), d in sorted(self.self_times.items(), key=lambda kv: -sum(kv[1]))[:top]]
        out.steps_with_sync = self.steps_with_sync
        out.sync_sites = _sites(self.sync_sites)
        out.getitem_sites = _sites(self.getitems)
        out.float64_ops = sorted(self.float64)[:MAX_FLOAT64_OPS]


def _kernel_stats(out: TraceAnalysis, kernels: list[dict[str, Any]], steps: int, top: int) -> None:
    """On a GPU, launch-bound shows in kernel durations, not in host ops: they replace the op counts."""
    by_name: dict[str, list[float]] = {}
    for k in kernels:
        by_name.setdefault(k["name"], []).append(k["dur"])
    out.top_kernels = [OpStat(n, "", len(d), sum(d) / 1e6)
                       for n, d in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]]
    durs = [k["dur"] for k in kernels]
    small = [d for d in durs if d < SMALL_OP_US["cuda"]]
    out.ops_per_step = len(durs) / steps
    out.small_op_share = sum(small) / sum(durs) if sum(durs) > 0 else 0.0
    out.median_op_us = statistics.median(durs) if durs else 0.0


def _float64_tensor_arg(e: dict[str, Any]) -> bool:
    """A float64 *tensor* argument. The profiler records a Python float (``0.5 * x``) as
    ``double`` with empty dims, which is no float64 training at all."""
    args = e.get("args", {})
    return any(t == "double" and d
               for t, d in zip(args.get("Input type", []), args.get("Input Dims", []), strict=False))



def _self_times(cpu_ops: list[dict[str, Any]], acc: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]]:
    """Accumulate self time per (op, shapes); return the top-level ops.

    ``autograd::engine::evaluate_function`` wrappers are transparent: the ops they run
    count as top-level, since the wrapper itself dispatches nothing.
    """
    stack: list[list[Any]] = []  # [event, self time]
    records: list[list[Any]] = []
    top: list[dict[str, Any]] = []
    for e in cpu_ops:  # sorted by (ts, -dur): parents come before their children
        while stack and _end(stack[-1][0]) <= e["ts"]:
            stack.pop()
        wrapper = e["name"].startswith(_WRAPPER)
        parent = next((r for r in reversed(stack) if not r[0]["name"].startswith(_WRAPPER)), None)
        if parent is not None:
            parent[1] -= e["dur"]
        elif not wrapper:
            top.append(e)
        record = [e, e["dur"]]
        stack.append(record)
        if not wrapper:
            records.append(record)
    for e, own in records:
        acc.setdefault((e["name"], _shapes(e)), []).append(max(own, 0.0))
    return top


def _shapes(e: dict[str, Any]) -> str:
    dims = e.get("args", {}).get("Input Dims")
    return ", ".join(str(tuple(d)) for d in dims if d) if dims else ""


def _where(frame: str) -> str:
    m = _FRAME.match(frame)
    return f"{m['file']}:{m['line']} in {m['func']}" if m else frame


def _is_user(frame: str) -> bool:
    m = _FRAME.match(frame)
    return m is not None and "site-packages" not in m["file"] and not m["file"].startswith(("torch/", "<"))


def _user_frame(e: dict[str, Any], evs: list[dict[str, Any]], pyid: dict[Any, dict[str, Any]]) -> str:
    """The innermost frame of the user's own code around ``e`` (via the trace's Python parent ids)."""
    frames = [p for p in evs if p.get("cat") == "python_function" and p["ts"] <= e["ts"] <= _end(p)]
    node = max(frames, key=lambda p: p["ts"], default=None)
    for _ in range(64):
        if node is None:
            break
        if _is_user(node["name"]):
            return _where(node["name"])
        node = pyid.get(node["args"].get("Python parent id"))
    return f"{e['name']} (no Python frame in the trace)"


def _sites(found: dict[str, list[float]]) -> list[Site]:
    return sorted((Site(w, len(d), sum(d) / 1e6) for w, d in found.items()), key=lambda s: -s.seconds)


def _memory(events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> tuple[list[int], int | None]:
    """CPU: per step, the peak of bytes allocated inside the trace above the step's start.

    Frees of blocks allocated before the trace began are not seen, and are ignored.
    CUDA: the allocator's absolute ``Total Allocated`` peak over the recorded steps.
    """
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    live: dict[Any, int] = {}
    running, cuda_peak = 0, None
    bounds = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    base: list[int | None] = [None] * len(bounds)
    peaks = [0] * len(bounds)
    i = 0
    for e in mem:
        a = e["args"]
        while i < len(bounds) and e["ts"] >= bounds[i][1]:
            i += 1
        if a.get("Device Type") == 1:
            cuda_peak = max(cuda_peak or 0, int(a.get("Total Allocated", 0)))
            continue
        if i < len(bounds) and e["ts"] >= bounds[i][0] and base[i] is None:
            base[i] = running
        n = int(a.get("Bytes", 0))
        if n > 0:
            live[a.get("Addr")] = n
            running += n
        else:
            running -= live.pop(a.get("Addr"), 0)
        if i < len(bounds) and (b := base[i]) is not None:
            peaks[i] = max(peaks[i], running - b)
    return peaks, cuda_peak

"""Turn an exported Chrome trace of profiled training steps into a step-time breakdown.

Only the exported trace is read (the public artefact of ``torch.profiler``), never profiler
internals. The trace gives, per recorded step (a ``ProfilerStep#N`` span, from the end of one
``Optimizer.step`` to the end of the next):

- ``optimizer``: ``Optimizer.step#*`` and ``Optimizer.zero_grad#*`` spans;
- ``sync``: host-device sync points (``aten::item``/``_local_scalar_dense``, CUDA
  ``*Synchronize`` and blocking ``cudaMemcpy``) outside the optimizer;
- ``backward``: the Python ``Tensor.backward``/``torch.autograd.backward`` frames;
- ``data``: DataLoader ``__next__`` spans, and the gap from the step's start to its forward;
- ``forward``: from the first ``nn.Module`` call after the previous backward to the start of the
  next backward (the loss included; one span per micro-batch under gradient accumulation);
- ``other``: the rest.

Where spans overlap, the first category in that list wins (a ``.item()`` inside forward is a sync).

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

CATEGORIES = ("data", "forward", "backward", "optimizer", "sync", "other")
_PRIORITY = ("optimizer", "sync", "backward", "data", "forward")  # highest first
_SYNC_OPS = {"aten::item", "aten::_local_scalar_dense"}
_WRAPPER = "autograd::engine::evaluate_function"
_BACKWARD = re.compile(r"torch/(_tensor|autograd/__init__)\.py\(\d+\): backward$")
_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
SMALL_OP_US = {"cpu": 20.0, "cuda": 10.0}
"""A top-level host op (or GPU kernel) shorter than this is dispatch/launch-bound."""


@dataclass(frozen=True)
class StepBreakdown:
    seconds: float
    phases: dict[str, float]
    """Seconds per category; they sum to ``seconds``."""


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

    def share(self, category: str) -> float:
        """Fraction of all recorded step time spent in ``category``."""
        total = sum(s.seconds for s in self.steps)
        return sum(s.phases[category] for s in self.steps) / total if total > 0 else 0.0


def analyse_trace(path: str | Path, top: int = 12) -> TraceAnalysis:
    """Read a Chrome trace exported by ``torch.profiler`` and analyse its ``ProfilerStep`` spans."""
    t0 = time.perf_counter()
    path = Path(path)
    events = json.loads(path.read_text())["traceEvents"]
    result = _analyse(events, top)
    result.trace_bytes = path.stat().st_size
    result.analysis_seconds = time.perf_counter() - t0
    return result


def _analyse(events: list[dict[str, Any]], top: int) -> TraceAnalysis:
    step_spans = sorted((e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")),
                        key=lambda e: e["ts"])
    if not step_spans:
        raise ValueError("the trace holds no ProfilerStep spans: no training step was recorded.\n"
                         "Tip: the script must call optimizer.step() at least --steps + 3 times.")
    tid = step_spans[0]["tid"]
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    host = sorted((e for e in spans if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
    kernels = [e for e in spans if e.get("cat") == "kernel"]
    out = TraceAnalysis(steps=[], device="cuda" if kernels else "cpu")
    starts = [e["ts"] for e in host]
    pyid = {e["args"].get("Python id"): e for e in host if e.get("cat") == "python_function"}
    ops: dict[tuple[str, str], list[float]] = {}
    sync_sites: dict[str, list[float]] = {}
    getitems: dict[str, list[float]] = {}
    n_ops = n_small = 0
    op_time = small_time = 0.0
    op_durs: list[float] = []
    opt_ops = foreach_ops = zero_ops = 0
    zero_grad_us = 0.0
    for span in step_spans:
        s0, s1 = span["ts"], span["ts"] + span["dur"]
        evs = host[bisect.bisect_left(starts, s0):bisect.bisect_left(starts, s1)]
        cpu_ops = [e for e in evs if e.get("cat") == "cpu_op"]
        names = [e["name"] for e in evs]
        optim = [(e["ts"], min(_end(e), s1)) for e, n in zip(evs, names)
                 if n.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))]
        syncs = [e for e in evs if (e["name"] in _SYNC_OPS or _is_cuda_sync(e)) and not _inside(e, optim)]
        # `aten::item` runs `aten::_local_scalar_dense` inside it: one sync, counted once.
        syncs = [e for e in syncs if not any(o is not e and o["ts"] <= e["ts"] and _end(e) <= _end(o) for o in syncs)]
        back = [(e["ts"], _end(e)) for e in evs if e.get("cat") == "python_function" and _BACKWARD.search(e["name"])]
        if not back:  # no Python frames in the trace: the autograd engine's own spans
            back = [(e["ts"], _end(e)) for e in cpu_ops if e["name"].startswith(_WRAPPER)]
        back = _merge(back)
        mods = [e for e in evs if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")]
        forward = _forward_spans(mods, back)
        fwd_start = forward[0][0] if forward else s1
        data = [(e["ts"], _end(e)) for e in evs if e["name"].startswith("enumerate(DataLoader)")]
        data.append((s0, fwd_start))
        intervals = {"optimizer": optim, "sync": [(e["ts"], _end(e)) for e in syncs], "backward": back,
                     "data": data, "forward": forward}
        phases = _attribute(s0, s1, intervals)
        out.steps.append(StepBreakdown(seconds=span["dur"] / 1e6, phases={k: v / 1e6 for k, v in phases.items()}))
        # Sync points: where in the user's code each one comes from.
        out.steps_with_sync += bool(syncs)
        for e in syncs:
            sync_sites.setdefault(_user_frame(e, evs, pyid), []).append(e["dur"])
        for e in evs:
            if e.get("cat") == "python_function" and e["name"].endswith(": __getitem__") and _inside(e, data):
                getitems.setdefault(_where(e["name"]), []).append(e["dur"])
        # Operators: self time, top-level ones in forward/backward, and the optimizer's.
        top_level = _self_times(cpu_ops, ops)
        compute = forward + back
        for e in top_level:
            if _inside(e, compute):
                n_ops += 1
                op_durs.append(e["dur"])
                op_time += e["dur"]
                if e["dur"] < SMALL_OP_US["cpu"]:
                    n_small += 1
                    small_time += e["dur"]
            elif _inside(e, optim):
                opt_ops += 1
                foreach_ops += "_foreach_" in e["name"] or "_fused_" in e["name"]
        for e, n in zip(evs, names):
            if n.startswith("Optimizer.zero_grad#"):
                zero_grad_us += e["dur"]
                zero_ops += sum(1 for c in cpu_ops if c["name"] in ("aten::zero_", "aten::_foreach_zero_")
                                and e["ts"] <= c["ts"] <= _end(e))
        out.float64_ops.extend(f"{e['name']} {_shapes(e)}" for e in top_level
                               if "double" in e.get("args", {}).get("Input type", []) and _inside(e, compute))
    steps = len(step_spans)
    if kernels:  # on a GPU, launch-bound shows in kernel durations, not in host ops
        by_name: dict[str, list[float]] = {}
        for k in kernels:
            by_name.setdefault(k["name"], []).append(k["dur"])
        out.top_kernels = [OpStat(n, "", len(d), sum(d) / 1e6)
                           for n, d in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]]
        durs = [k["dur"] for k in kernels]
        small = [d for d in durs if d < SMALL_OP_US["cuda"]]
        n_ops, n_small, op_time, small_time, op_durs = len(durs), len(small), sum(durs), sum(small), durs
    out.ops_per_step = n_ops / steps
    out.small_op_share = small_time / op_time if op_time > 0 else 0.0
    out.median_op_us = statistics.median(op_durs) if op_durs else 0.0
    out.optimizer_ops_per_step = opt_ops / steps
    out.foreach_ops_per_step = foreach_ops / steps
    out.zero_fill_ops_per_step = zero_ops / steps
    out.zero_grad_seconds_per_step = zero_grad_us / 1e6 / steps
    out.top_ops = [OpStat(name, shapes, len(d), sum(d) / 1e6)
                   for (name, shapes), d in sorted(ops.items(), key=lambda kv: -sum(kv[1]))[:top]]
    out.sync_sites = _sites(sync_sites)
    out.getitem_sites = _sites(getitems)
    out.float64_ops = sorted(set(out.float64_ops))[:10]
    out.peak_delta_bytes, out.cuda_peak_bytes = _memory(events, step_spans)
    out.compiled_regions = sum(1 for e in spans if e["name"].startswith("Torch-Compiled Region"))
    return out


def _end(e: dict[str, Any]) -> float:
    return e["ts"] + e["dur"]


def _inside(e: dict[str, Any], intervals: list[tuple[float, float]]) -> bool:
    return any(a <= e["ts"] < b for a, b in intervals)


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _forward_spans(mods: list[dict[str, Any]], back: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """One forward span per backward: from the first module call after the previous backward to
    this backward's start (the loss included). Gradient accumulation gives several per step.
    With no backward at all, the module calls themselves."""
    if not back:
        return _merge([(e["ts"], _end(e)) for e in mods])
    spans, prev_end = [], float("-inf")
    for a, b in back:
        starts = [e["ts"] for e in mods if prev_end <= e["ts"] < a]
        if starts:
            spans.append((min(starts), a))
        prev_end = b
    return spans


def _is_cuda_sync(e: dict[str, Any]) -> bool:
    return e.get("cat") == "cuda_runtime" and ("Synchronize" in e["name"] or e["name"] == "cudaMemcpy")


def _attribute(s0: float, s1: float, intervals: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Sweep the step's timeline; each instant goes to the highest-priority category covering it."""
    marks: list[tuple[float, int, int]] = []
    for rank, cat in enumerate(_PRIORITY):
        for a, b in intervals[cat]:
            a, b = max(a, s0), min(b, s1)
            if b > a:
                marks += [(a, 1, rank), (b, -1, rank)]
    marks.sort()
    counts = [0] * len(_PRIORITY)
    totals = dict.fromkeys(CATEGORIES, 0.0)
    prev = s0
    for t, delta, rank in marks:
        active = next((i for i, c in enumerate(counts) if c > 0), None)
        totals[_PRIORITY[active] if active is not None else "other"] += t - prev
        counts[rank] += delta
        prev = t
    totals["other"] += s1 - prev
    return totals


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
    return bool(m) and "site-packages" not in m["file"] and not m["file"].startswith(("torch/", "<"))


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
    base = [None] * len(bounds)
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
        if i < len(bounds) and base[i] is not None:
            peaks[i] = max(peaks[i], running - base[i])
    return peaks, cuda_peak

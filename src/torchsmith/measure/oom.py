"""What held memory at an out-of-memory error, and the fixes ranked by what they would free.

At an OOM the memory is held by four things: parameters, gradients, optimizer state and
activations saved for backward. ``explain`` measures each at the failure, lists the largest
live tensors, and ranks the fixes by estimated saving. ``torch.cuda.empty_cache()`` is not
one of them: it only returns cached, unused blocks to the driver.

The engine attaches this explanation to an OOM raised inside a step
(:func:`attach_explanation`); ``torchsmith.explain_oom`` does it around any code.
"""

from __future__ import annotations

import contextlib
import gc
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import nn

from torchsmith.measure.memory import memory_split
from torchsmith.structure import discover
from torchsmith.text import first_line, format_bytes
from torchsmith.torch_compat import storage_key, tree_leaves

EMPTY_CACHE_NOTE = ("torch.cuda.empty_cache() does not help here: it only returns cached, unused blocks to "
                    "the driver and cannot free memory that live tensors (parameters, gradients, optimizer "
                    "state, activations saved for backward) hold.")


def is_oom(err: BaseException) -> bool:
    """True for CUDA ``OutOfMemoryError``, a CPU allocator failure, or ``MemoryError``."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(err)
    return isinstance(err, RuntimeError) and (
        ("DefaultCPUAllocator" in msg and "allocate" in msg) or "out of memory" in msg.lower())


def _requested_bytes(err: BaseException) -> int | None:
    msg = str(err)
    m = re.search(r"allocate (\d+) bytes", msg)  # CPU: "you tried to allocate 1073741824 bytes"
    if m:
        return int(m.group(1))
    m = re.search(r"allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)", msg)  # CUDA: "Tried to allocate 2.00 GiB"
    if m:
        scale = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}[m.group(2)]
        return int(float(m.group(1)) * 1024 ** scale)
    return None


@dataclass(frozen=True)
class LiveTensor:
    what: str
    """'param blocks.0.attn.c_attn.weight', 'grad ...', 'optimizer exp_avg of ...', 'saved for backward'
    or 'activation or input'."""
    shape: list[int]
    dtype: str
    bytes: int


@dataclass(frozen=True)
class Fix:
    name: str
    saving_bytes: int
    """Estimated bytes freed at the failure point."""
    how: str


@dataclass(frozen=True, kw_only=True)
class OOMReport:
    device: str
    error: str
    requested_bytes: int | None
    params: int
    grads: int
    optimizer_state: int
    activations: int
    """Tensors saved for backward plus live intermediates and inputs, found from the failing frames."""
    other: int = 0
    """Other live tensors in the process (datasets, other models, leaked references)."""
    allocated: int | None
    """Allocator's total at the failure (CUDA); None on CPU."""
    largest: list[LiveTensor] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    note: str = EMPTY_CACHE_NOTE

    def describe(self) -> str:
        gib = format_bytes
        lines = [f"torchsmith OOM explanation ({self.device}"
                 + (f", tried to allocate {gib(self.requested_bytes)}" if self.requested_bytes else "") + "):",
                 f"  parameters {gib(self.params)}, gradients {gib(self.grads)}, optimizer state "
                 f"{gib(self.optimizer_state)}, activations {gib(self.activations)}, "
                 f"other live tensors {gib(self.other)}"]
        lines += [f"  largest: {t.what} {tuple(t.shape)} {t.dtype} {gib(t.bytes)}" for t in self.largest[:5]]
        lines += [f"  fix {i}: {f.name}, saves ~{gib(f.saving_bytes)}: {f.how}" for i, f in enumerate(self.fixes, 1)]
        return "\n".join(lines + ["  " + self.note])


def _frames(tb: TracebackType | None) -> Iterator[Any]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _saved_tensors(roots: list[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors autograd saved for backward, reached from ``roots`` through the graph."""
    out, seen, todo = [], set(), [t.grad_fn for t in roots if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                with contextlib.suppress(Exception):
                    value = getattr(node, attr)
                    out += [v for v in (value if isinstance(value, (list, tuple)) else [value])
                            if isinstance(v, torch.Tensor)]
        todo.extend(n for n, _ in getattr(node, "next_functions", ()))
    return out


def explain(err: BaseException, model: nn.Module | None = None,
            optimizer: torch.optim.Optimizer | None = None) -> OOMReport:
    """Measure what held memory when ``err`` (an OOM) was raised; rank the fixes.

    Call it inside the ``except`` block: the failing frames, and the activations they hold,
    are still alive there.
    """
    split = memory_split(model, optimizer) if model is not None else None
    names = _state_names(model, optimizer)
    frame_tensors = _frame_tensors(err)
    saved = _saved_tensors(frame_tensors)
    live = _live_tensors(saved, frame_tensors, _state_tensors(model, optimizer), names)
    act = [t for t in live.values() if t.what in ("saved for backward", "activation or input")]
    acts = sum(t.bytes for t in act)
    saved_fp32 = sum(t.bytes for t in act if t.what == "saved for backward" and t.dtype == "float32")
    saved_bytes = sum(t.bytes for t in act if t.what == "saved for backward")
    other = _other_live_bytes(skip=live.keys() | names.keys())
    device = _device_of(model)
    allocated = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    if allocated is not None and split is not None:
        acts = max(acts, allocated - split.total)  # the allocator sees what the frames do not
    return OOMReport(
        device=str(device), error=first_line(err)[:300],
        requested_bytes=_requested_bytes(err), params=split.params if split else 0, grads=split.grads if split else 0,
        optimizer_state=split.optimizer_state if split else 0, activations=acts, other=other, allocated=allocated,
        largest=sorted(live.values(), key=lambda t: -t.bytes)[:10],
        fixes=_fixes(model, acts, saved_bytes, saved_fp32, sum(t.bytes for t in act if t.dtype == "float32")))


def _state_names(model: nn.Module | None, optimizer: torch.optim.Optimizer | None) -> dict[int, str]:
    """Storage key -> 'param NAME', 'grad NAME' or 'optimizer KEY of NAME', for the training state."""
    names: dict[int, str] = {}
    for n, p in model.named_parameters() if model is not None else ():
        names[storage_key(p)] = f"param {n}"
        if p.grad is not None:
            names[storage_key(p.grad)] = f"grad {n}"
        for k, v in (optimizer.state.get(p, {}) if optimizer is not None else {}).items():
            if isinstance(v, torch.Tensor):
                names[storage_key(v)] = f"optimizer {k} of {n}"
    return names


def _frame_tensors(err: BaseException) -> list[torch.Tensor]:
    """Tensors the failing frames hold: their locals, and tensors in their tuples / lists / dicts."""
    return [t for f in _frames(err.__traceback__) for v in f.f_locals.values() for t in tree_leaves(v)
            if isinstance(t, torch.Tensor)]


def _state_tensors(model: nn.Module | None, optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Parameters, their gradients and the optimizer's state tensors."""
    state: list[torch.Tensor] = [p for p in (model.parameters() if model else [])]
    state += [p.grad for p in state if p.grad is not None]
    state += [v for st in (optimizer.state.values() if optimizer else []) for v in st.values()
              if isinstance(v, torch.Tensor)]
    return state


def _live_tensors(saved: list[torch.Tensor], frame_tensors: list[torch.Tensor], state: list[torch.Tensor],
                  names: dict[int, str]) -> dict[int, LiveTensor]:
    """One :class:`LiveTensor` per storage, named by what holds it (a storage counts once)."""
    live: dict[int, LiveTensor] = {}
    saved_keys = {storage_key(t) for t in saved}
    for t in saved + frame_tensors + state:
        key = storage_key(t)
        if key not in live:
            what = names.get(key, "saved for backward" if key in saved_keys else "activation or input")
            live[key] = LiveTensor(what, list(t.shape), str(t.dtype).removeprefix("torch."),
                                   t.untyped_storage().nbytes())
    return live


def _other_live_bytes(skip: Any) -> int:
    """Bytes of every other tensor storage alive in the process (found through the garbage collector),
    leaving out the storage keys in ``skip``."""
    with warnings.catch_warnings():  # isinstance() on some lazy torch objects warns of deprecations
        warnings.simplefilter("ignore")
        others: dict[int, int] = {}
        for o in gc.get_objects():
            # Dead weak proxies raise on isinstance(); fake, functional or sparse tensors have no plain storage.
            with contextlib.suppress(Exception):
                if isinstance(o, torch.Tensor) and not o.is_meta:
                    nbytes = o.untyped_storage().nbytes()
                    if type(nbytes) is int:  # symbolic sizes (traced tensors) are not memory
                        others[storage_key(o)] = nbytes
    return sum(n for key, n in others.items() if key not in skip)


def _device_of(model: nn.Module | None) -> torch.device:
    """The model's device (its first parameter's); CPU without a model or parameters."""
    return next((p.device for p in model.parameters()), torch.device("cpu")) if model is not None \
        else torch.device("cpu")


def _fixes(model: nn.Module | None, acts: int, saved: int, saved_fp32: int, acts_fp32: int) -> list[Fix]:
    """Estimated savings: halving the micro-batch halves activations; checkpointing keeps one block
    input of the saved tensors; bf16 halves what is fp32 (saved tensors only, or all activations)."""
    found = discover(model) if model is not None else None
    blocks = len(found.block_items("OOM fix ranking")) if found is not None and found.blocks is not None else 0
    kept = 1 / blocks if blocks > 1 else 0.5  # checkpointing keeps each block's input only
    fixes = [
        Fix("micro-batching x2", acts // 2, "Plan(microbatching=MicroBatching(count=2)) or auto_microbatch=True: "
            "half the samples per pass, same gradients"),
        Fix("activation checkpointing", int(saved * (1 - kept)),
            f"recompute {'each of the ' + str(blocks) + ' blocks' if blocks > 1 else 'the model'} in backward "
            "(one more forward of each block)"),
        Fix("saved-tensor compression", saved_fp32 // 2, "store fp32 tensors saved for backward in bf16 "
            "(torch.autograd.graph.saved_tensors_hooks)"),
        Fix("bf16 autocast", acts_fp32 // 2, "Plan(precision=Autocast(dtype='bfloat16')): 16-bit activations "
            "(fast only with native bf16 hardware)"),
    ]
    return sorted(fixes, key=lambda f: -f.saving_bytes)


def attach_explanation(err: BaseException, model: nn.Module | None, optimizer: Any) -> None:
    """Add the OOM explanation to ``err`` as a note (keeps its type), once; the engine's hook."""
    if getattr(err, "torchsmith_oom", None) is not None:
        return
    try:
        report = explain(err, model, optimizer)
    except Exception as inner:  # never hide the OOM behind a failure of the explainer
        err.add_note(f"(torchsmith could not explain this OOM: {inner!r})")
        return
    err.torchsmith_oom = report  # type: ignore[attr-defined]  # our own attribute, read back with getattr
    err.add_note(report.describe())

"""Peak memory of a code region, on CPU and CUDA, plus byte counts of live state.

CUDA asks the caching allocator (``torch.cuda.max_memory_allocated``). CPU has no
allocator statistics in PyTorch's Python API, so it records the CPU allocator's own
allocation events with the profiler (``profile_memory=True``) and replays them.

Why the profiler and not the alternatives (on torch 2.13):

- RSS / ``tracemalloc`` do not see tensor memory exactly: glibc keeps freed pages,
  and c10 allocates with ``posix_memalign``, not ``PyMem``. PyTorch 2.13 exposes no
  CPU allocator statistics (``torch.accelerator`` memory stats are accelerator-only).
- A ``TorchDispatchMode`` that watches op outputs costs a Python call per op inside the
  region, misses temporaries that kernels allocate internally, and makes Dynamo skip
  ``torch.compile`` (it refuses to compile under a non-infra dispatch mode), so it
  would measure an uncompiled model when the plan says compiled.
- The profiler's allocation events come from c10's ``DefaultCPUAllocator`` itself:
  every CPU allocation and free, kernel temporaries and buffers of Inductor-compiled
  code included, exact to the byte. Recording them slows the region down, and turning
  them into a peak afterwards adds to that (no benchmark times it, so no figure is quoted
  here): track one representative step, not every step.

Example::

    with track_peak_memory("cpu", live=(model, optimizer)) as mem:
        loss_fn(model(x), y).backward()
        optimizer.step()
    mem.result.peak_bytes, mem.result.peak_delta_bytes
"""

from __future__ import annotations

import weakref
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass
from types import GeneratorType
from typing import Any

import torch
from torch import nn

from torchsmith.measure.quiet import native_stderr_silenced
from torchsmith.torch_compat import is_traceable_wrapper_subclass, profiler_event_tree, profiler_running, storage_key

__all__ = [
    "MemoryStats",
    "MemorySplit",
    "MemoryTrackingError",
    "PeakMemoryTracker",
    "track_peak_memory",
    "tensor_bytes",
    "memory_split",
]

CPU_METHOD = "cpu-profiler-allocator-events"
CUDA_METHOD = "cuda-caching-allocator"

# Name prefix of the profiler marker emitted when a live-at-start storage is freed.
_FREE_MARKER = "torchsmith::live_free::"


class MemoryTrackingError(RuntimeError):
    """Peak memory cannot be tracked here, or was read before the region ended."""


@dataclass(frozen=True, kw_only=True)
class MemoryStats:
    """Memory of one tracked region, in bytes.

    On CUDA every figure is the allocator's count of bytes held by live tensors on
    that device (``memory_allocated``), whoever allocated them.

    On CPU the figures are: ``start_bytes`` = unique storage bytes of the tensors
    reachable from ``live`` at entry (see :func:`tensor_bytes`) and the gradient buckets of
    any DDP module in it (:func:`ddp_bucket_bytes`), plus every byte the
    CPU allocator handed out inside the region while it was not yet freed. A
    live-at-start storage freed inside the region (``zero_grad(set_to_none=True)``)
    stops counting when it is freed. CPU tensors alive at entry but not reachable from
    ``live`` are invisible: not counted, and freeing them does not lower the figures.
    Only allocations made on the thread that entered the region are seen (the
    autograd engine runs CPU backward on that thread; DataLoader workers are other
    processes anyway).
    """

    device: str
    """The tracked device, e.g. ``"cpu"`` or ``"cuda:0"``."""
    start_bytes: int
    """Bytes counted as live when the region started."""
    peak_bytes: int
    """Highest live bytes at any instant inside the region, absolute (includes ``start_bytes``)."""
    end_bytes: int
    """Live bytes when the region ended."""
    method: str
    """How it was measured: ``"cpu-profiler-allocator-events"`` or ``"cuda-caching-allocator"``."""

    @property
    def peak_delta_bytes(self) -> int:
        """Peak above the start: what the region itself needed on top of what was live."""
        return self.peak_bytes - self.start_bytes


@dataclass(frozen=True, kw_only=True)
class MemorySplit:
    """Bytes of persistent training state, each part counted by unique storage."""

    params: int
    """Parameters and buffers of the model."""
    grads: int
    """``.grad`` tensors currently set on the parameters (0 after ``zero_grad(set_to_none=True)``)."""
    optimizer_state: int
    """Tensors in ``optimizer.state`` (moments, step counters)."""

    @property
    def total(self) -> int:
        """Sum of the three parts."""
        return self.params + self.grads + self.optimizer_state


# ---------------------------------------------------------------------------
# Counting storages


def _plain_tensors(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensors that own memory behind ``t``: itself, or a wrapper subclass's inner tensors.

    DTensor and FSDP2 parameters are wrapper subclasses whose own storage is empty;
    the bytes live in their inner (local) tensors.
    """
    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        for name in attrs:
            inner = getattr(t, name)
            if isinstance(inner, torch.Tensor):  # torch 2.13's DTensor also lists its DeviceMesh here
                yield from _plain_tensors(inner)
    else:
        yield t


def _storages(t: torch.Tensor) -> Iterator[tuple[int, torch.UntypedStorage]]:
    """``(key, storage)`` for each storage behind ``t``; the key is the StorageImpl address.

    Views share their base's StorageImpl, so keying on it counts a tensor and its views once.
    """
    for p in _plain_tensors(t):
        yield storage_key(p), p.untyped_storage()


_CONTAINERS = (list, tuple, set, frozenset, GeneratorType, KeysView, ValuesView, ItemsView)


def _walk_tensors(obj: Any, top: bool = True) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
        yield from (p.grad for p in obj.parameters() if p.grad is not None)
    elif isinstance(obj, torch.optim.Optimizer):
        # Only the state: the parameters belong to the model and are counted there.
        yield from _walk_tensors(list(obj.state.values()), top=False)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _walk_tensors(v, top=False)
    elif isinstance(obj, _CONTAINERS):
        for v in obj:
            yield from _walk_tensors(v, top=False)
    elif top and obj is not None:
        # Inside containers, other values (the `step` ints of optimizer state) hold no
        # tensor memory; at the top level an unknown type is a mistake worth naming.
        # Other iterables are not walked: a DataLoader would start loading.
        raise TypeError(
            f"Cannot count tensor bytes of a {type(obj).__name__}.\n"
            "Tip: pass a tensor, an nn.Module, an optimizer, or a list/tuple/dict of them."
        )


def ddp_bucket_bytes(obj: Any) -> int:
    """Bytes of the flat gradient buckets of every ``DistributedDataParallel`` module in ``obj``
    that no parameter's ``.grad`` shows: DDP allocates them in its C++ reducer, where
    :func:`tensor_bytes` cannot reach, and keeps them for the module's life.

    With ``gradient_as_bucket_view=True`` the gradients are views into the buckets, so while
    they are set the buckets are counted through them; after ``zero_grad(set_to_none=True)``
    they are not, and the buckets are counted here. The sizes are DDP's own (its logging data).
    """
    from torch.nn.parallel import DistributedDataParallel

    found = {id(m): m for top in _top_items(obj) if isinstance(top, nn.Module) for m in top.modules()
             if isinstance(m, DistributedDataParallel)}  # a module named twice counts once
    total = 0
    for ddp in found.values():
        if ddp.gradient_as_bucket_view and any(p.grad is not None for p in ddp.parameters()):
            continue
        sizes = ddp._get_ddp_logging_data().get("bucket_sizes")  # "b0, b1, ...", in bytes
        if sizes is None:  # a torch that does not report them: the buckets hold one copy of each gradient
            total += sum(p.numel() * p.element_size() for p in ddp.parameters() if p.requires_grad)
        else:
            total += sum(int(b) for b in str(sizes).split(",") if b.strip())
    return total


def _top_items(obj: Any) -> Iterator[Any]:
    """``obj``, or the items its containers hold, flattened (the containers :func:`_walk_tensors` walks)."""
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from _top_items(v)
    elif isinstance(obj, _CONTAINERS):
        for v in obj:
            yield from _top_items(v)
    else:
        yield obj


def _unique_storages(obj: Any, device_type: str | None = None) -> dict[int, torch.UntypedStorage]:
    found: dict[int, torch.UntypedStorage] = {}
    for t in _walk_tensors(obj):
        for key, s in _storages(t):
            if device_type is None or s.device.type == device_type:
                found.setdefault(key, s)
    return found


def tensor_bytes(obj: Any) -> int:
    """Bytes of the unique storages reachable from ``obj``, on any device.

    ``obj`` may be a tensor, an ``nn.Module`` (parameters, buffers and the ``.grad``
    currently set on its parameters), an optimizer (its ``state`` only, since the
    parameters belong to the model), or lists, tuples, sets, dicts and generators
    nesting those; non-tensor values inside them are skipped. A
    storage shared by several tensors or views counts once, at its full size: a
    small view of a big tensor holds the whole storage alive.

    Example::

        >>> tensor_bytes([torch.zeros(256), torch.zeros(256)[:10]])  # two storages
        2048
    """
    return sum(s.nbytes() for s in _unique_storages(obj).values())


def memory_split(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> MemorySplit:
    """Split the persistent training state of ``model`` and ``optimizer`` into parts.

    Example::

        >>> model = nn.Linear(1024, 1024)
        >>> memory_split(model).params  # 1024*1024*4 + 1024*4
        4198400
    """
    return MemorySplit(
        params=tensor_bytes(list(model.parameters()) + list(model.buffers())),
        grads=tensor_bytes([p.grad for p in model.parameters() if p.grad is not None]),
        optimizer_state=tensor_bytes(optimizer) if optimizer is not None else 0,
    )


# ---------------------------------------------------------------------------
# Tracking a region


def _emit_free_marker(index: int) -> None:
    # Runs when a live-at-start storage dies. Its allocation happened before the
    # profiler started, so c10 reports no free event for it; this marker puts the
    # free on the same timeline as the allocation events.
    with torch.autograd.profiler.record_function(f"{_FREE_MARKER}{index}"):
        pass


class PeakMemoryTracker:
    """Context manager behind :func:`track_peak_memory`; read ``.result`` after the block."""

    def __init__(self, device: str | torch.device = "cpu", *, live: Any = ()) -> None:
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.type not in ("cpu", "cuda"):
            raise MemoryTrackingError(
                f"Peak memory is tracked on 'cpu' and 'cuda' devices; got {str(dev)!r}.\n"
                "Tip: pass device='cpu' or device='cuda'."
            )
        self.device = dev
        self._live = live
        self._result: MemoryStats | None = None
        self._profiler: torch.autograd.profiler.profile | None = None
        self._live_sizes: list[int] = []
        self._held_bytes = 0
        """Bytes live through the region that no tensor of ``live`` reaches (DDP's gradient buckets)."""
        self._finalizers: list[weakref.finalize] = []

    @property
    def result(self) -> MemoryStats:
        """The measurement; available once the ``with`` block has exited."""
        if self._result is None:
            raise MemoryTrackingError(
                "The memory result was read before the tracked region ended.\n"
                "Tip: read `mem.result` after the `with track_peak_memory(...) as mem:` block."
            )
        return self._result

    def __enter__(self) -> PeakMemoryTracker:
        if self.device.type == "cuda":
            self._enter_cuda()
        else:
            self._enter_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self._exit_cuda()
        else:
            self._exit_cpu()

    # -- CUDA ---------------------------------------------------------------

    def _enter_cuda(self) -> None:
        if not torch.cuda.is_available():
            raise MemoryTrackingError(
                f"Asked to track {self.device} but CUDA is not available in this process.\n"
                "Tip: pass device='cpu', or check CUDA_VISIBLE_DEVICES and the torch build."
            )
        # Sync point: work queued before the region must not land inside it.
        torch.cuda.synchronize(self.device)
        self._start = torch.cuda.memory_allocated(self.device)
        # Global side effect: resets the process-wide peak for this device, so an
        # enclosing tracker on the same device would read this region's peak.
        torch.cuda.reset_peak_memory_stats(self.device)

    def _exit_cuda(self) -> None:
        torch.cuda.synchronize(self.device)  # sync point: the region's kernels must finish
        self._result = MemoryStats(
            device=str(self.device),
            start_bytes=self._start,
            peak_bytes=torch.cuda.max_memory_allocated(self.device),
            end_bytes=torch.cuda.memory_allocated(self.device),
            method=CUDA_METHOD,
        )

    # -- CPU ----------------------------------------------------------------

    def _enter_cpu(self) -> None:
        if profiler_running():
            raise MemoryTrackingError(
                "CPU peak memory is read from profiler allocation events, and a profiler "
                "is already running; profilers do not nest.\n"
                "Tip: track memory outside the torch.profiler block, or pass "
                "profile_memory=True to that profiler and read its memory events."
            )
        if not torch.autograd.kineto_available():
            raise MemoryTrackingError(
                "CPU peak memory needs the Kineto profiler, and this torch build has none.\n"
                "Tip: install an official torch wheel from https://pytorch.org."
            )
        storages = list(_unique_storages(self._live, device_type="cpu").values())
        self._held_bytes = ddp_bucket_bytes(self._live)
        # Drop every reference we hold: keeping `live` would keep alive the very
        # tensors whose free inside the region we want to see.
        self._live = None
        self._live_sizes = [s.nbytes() for s in storages]
        self._finalizers = [weakref.finalize(s, _emit_free_marker, i) for i, s in enumerate(storages)]
        del storages
        self._profiler = torch.autograd.profiler.profile(
            use_cpu=True, use_kineto=True, profile_memory=True, record_shapes=False
        )
        try:
            with native_stderr_silenced():
                self._profiler.__enter__()
        except BaseException:
            self._detach_finalizers()
            raise

    def _detach_finalizers(self) -> None:
        # Detach so that finalizers do not pile up on long-lived parameters across
        # many tracked regions.
        for fin in self._finalizers:
            fin.detach()
        self._finalizers.clear()

    def _exit_cpu(self) -> None:
        assert self._profiler is not None
        try:
            with native_stderr_silenced():
                self._profiler.__exit__(None, None, None)
        finally:
            self._detach_finalizers()
        events = _cpu_memory_timeline(*profiler_event_tree(self._profiler))
        self._profiler = None
        start = sum(self._live_sizes) + self._held_bytes
        current = peak = start
        region_allocs: dict[int, int] = {}  # ptr -> bytes, allocated inside the region
        live_freed: set[int] = set()
        for _, kind, key, size in events:
            if kind == "alloc":
                region_allocs[key] = size
                current += size
                peak = max(peak, current)
            elif kind == "free":
                # Frees of blocks allocated before the region are ignored: they were
                # never counted (unless reachable from `live`, handled by the marker).
                current -= region_allocs.pop(key, 0)
            elif key not in live_freed:  # marker: a live-at-start storage died
                live_freed.add(key)
                current -= self._live_sizes[key]
        self._result = MemoryStats(
            device="cpu", start_bytes=start, peak_bytes=peak, end_bytes=current, method=CPU_METHOD
        )


def _cpu_memory_timeline(roots: list[Any], event_type: Any) -> list[tuple[int, str, int, int]]:
    """Flatten the profiler event tree into ``(time_ns, kind, key, bytes)`` sorted by time.

    ``kind`` is ``"alloc"`` / ``"free"`` (key = block address) or ``"live_free"``
    (key = index into the live-at-start storages).
    """
    timeline: list[tuple[int, str, int, int]] = []
    stack = list(roots)
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if ev.tag == event_type.Allocation:
            fields = ev.extra_fields
            if fields.device.type != "cpu":
                continue
            kind = "alloc" if fields.alloc_size > 0 else "free"
            timeline.append((ev.start_time_ns, kind, fields.ptr, abs(fields.alloc_size)))
        elif ev.tag == event_type.TorchOp and ev.name.startswith(_FREE_MARKER):
            timeline.append((ev.start_time_ns, "live_free", int(ev.name[len(_FREE_MARKER):]), 0))
    timeline.sort(key=lambda item: item[0])  # stable: ties keep recording order
    return timeline


def track_peak_memory(device: str | torch.device = "cpu", *, live: Any = ()) -> PeakMemoryTracker:
    """Track the peak memory of a ``with`` block on ``device``.

    ``live`` names the state that exists before the block and should count toward
    the absolute figures on CPU: typically ``(model, optimizer)``, read as in
    :func:`tensor_bytes`. On CUDA it is not needed, since the allocator already
    counts every live tensor. See :class:`MemoryStats` for exactly what is included.

    Raises :class:`MemoryTrackingError` on CPU if a profiler is already running,
    because the CPU method is itself a profiler and profilers do not nest.

    Example::

        >>> with track_peak_memory("cpu") as mem:
        ...     a = torch.empty(4 << 20, dtype=torch.uint8)
        ...     b = torch.empty(8 << 20, dtype=torch.uint8)
        ...     del a
        >>> mem.result.peak_bytes == 12 << 20 and mem.result.end_bytes == 8 << 20
        True
    """
    return PeakMemoryTracker(device, live=live)

"""Where and how activations saved for backward are stored: as written, offloaded, or compressed.

Both policies are ``saved_tensors_hooks`` entered around forward + loss (``StepParts.forward_contexts``):

* offload: ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` moves each saved tensor to
  host memory in forward and back to the GPU in backward (CUDA only: on CPU it is already there);
* compress: each saved floating activation is stored as bf16/fp16 and cast back to its own dtype
  in backward. Parameters, buffers and integer tensors are stored untouched: parameters exist
  anyway (a copy would add memory) and integers (token ids, indices) must stay exact.

Saved-tensor hooks do not nest: inside a checkpointed block, checkpointing's own hooks take over,
so these policies act on what the rest of the model saves.

Example::

    change = apply_saved_tensors(parts, CompressSaved(dtype="bfloat16"))
    step(batch)        # saved activations stored in bf16
    change.revert()
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchsmith.plan import CompressSaved, KeepSaved, OffloadSaved, SavedTensors
from torchsmith.torch_compat import storage_key
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo
from torchsmith.transforms.parts import StepParts


@dataclass
class CompressionStats:
    """Unique bytes seen by the last compressing region: as autograd would have kept them, and as stored."""

    original_bytes: int = 0
    stored_bytes: int = 0
    tensors: int = 0


class compress_saved(torch.autograd.graph.saved_tensors_hooks):  # noqa: N801 - used as a function
    """Context manager storing saved floating activations in ``dtype``; read ``.stats`` afterwards.

    A tensor saved twice (ReLU saves its output, the next Linear saves it as input) is
    compressed once and shared, so compression never stores more than autograd would.

    >>> x = torch.randn(64, 64, requires_grad=True)
    >>> with compress_saved(torch.bfloat16, model=None) as c:
    ...     y = (x.sin() * 2).sum()
    >>> c.stats.stored_bytes * 2 == c.stats.original_bytes
    True
    """

    def __init__(self, dtype: torch.dtype, model: nn.Module | None = None) -> None:
        self.dtype = dtype
        self.stats = CompressionStats()
        # Storages of parameters and buffers: saved as-is (they exist anyway).
        self._keep = {storage_key(p) for p in model.parameters()} if model is not None else set()
        if model is not None:
            self._keep |= {storage_key(b) for b in model.buffers()}
        # (storage key, dtype) -> (weakref to storage, compressed storage); the weakref
        # detects an address freed and reused by a new tensor, which must not hit the cache.
        self._cache: dict[tuple, tuple[weakref.ref, torch.Tensor]] = {}
        super().__init__(self._pack, _unpack)

    def __enter__(self) -> compress_saved:  # type: ignore[override]  # torch types it -> None; `as c` wants self
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._cache.clear()  # the graph holds what it needs; the cache must not extend lifetimes

    def _pack(self, t: torch.Tensor) -> Any:
        storage = t.untyped_storage()
        skip = (not t.is_floating_point() or t.element_size() <= self.dtype.itemsize
                or isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter)
                or storage_key(t) in self._keep)
        if skip:
            return t.detach()  # detach: the graph must not hold an output with its own grad_fn (a cycle)
        # Compress per storage, not per tensor: q, k and v split from one projection, or h and
        # h.t() saved by one matmul, are views of one storage and share one compressed copy.
        key = (storage_key(t), t.dtype)
        hit = self._cache.get(key)
        if hit is not None and hit[0]() is not None:
            flat16 = hit[1]
        else:
            with torch.no_grad():
                flat = torch.empty(0, dtype=t.dtype, device=t.device)
                flat.set_(storage, 0, (storage.nbytes() // t.element_size(),))  # type: ignore[call-overload]  # (N,) the whole storage; torch's stub requires a stride
                flat16 = flat.to(self.dtype)
            self._cache[key] = (weakref.ref(storage), flat16)
            self.stats.original_bytes += storage.nbytes()
            self.stats.stored_bytes += flat16.untyped_storage().nbytes()
            self.stats.tensors += 1
        return (t.dtype, flat16, t.shape, t.stride(), t.storage_offset())


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, tuple):
        dtype, flat16, shape, stride, offset = packed
        return flat16.to(dtype).as_strided(shape, stride, offset)
    return packed


def apply_saved_tensors(parts: StepParts, cfg: SavedTensors) -> Change:
    """Add the saved-tensor policy ``cfg`` to the step's forward contexts.

    >>> change = apply_saved_tensors(parts, OffloadSaved())  # doctest: +SKIP
    """
    change = Change("saved_tensors", "saved activations kept as autograd stores them, as written")
    if isinstance(cfg, KeepSaved):
        return change
    if any(getattr(c, "_torchsmith_saved_policy", False) for c in parts.forward_contexts):
        raise TransformError(
            "a saved-tensor policy is already in this step's forward contexts; two would not nest "
            "(the inner one takes over).\nTip: revert the first Change before applying another policy."
        )
    if isinstance(cfg, OffloadSaved):
        if parts.device.type != "cuda":
            raise TransformError(
                f"saved-tensor offload moves activations from GPU to host memory, and this step runs on "
                f"{parts.device.type}: nothing to offload on CPU.\n"
                "Tip: on CPU, cut activation memory with checkpointing, CompressSaved or micro-batching."
            )

        def context() -> Any:
            return torch.autograd.graph.save_on_cpu(pin_memory=cfg.pin_memory)

        change.summary = f"saved activations offloaded to host memory (pin_memory={cfg.pin_memory})"
    elif isinstance(cfg, CompressSaved):
        dtype = getattr(torch, cfg.dtype)

        def context() -> Any:
            return compress_saved(dtype, parts.model)

        change.summary = f"saved floating activations stored as {cfg.dtype}"
    else:  # pragma: no cover - the Plan's Union admits nothing else
        raise TransformError(f"unknown saved-tensor policy {cfg!r}")
    context._torchsmith_saved_policy = True  # type: ignore[attr-defined]
    parts.forward_contexts.append(context)
    change.targets.append("forward_contexts")
    change.on_revert(lambda: parts.forward_contexts.remove(context))
    return change


def _candidates(device: DeviceInfo) -> list[SavedTensors]:
    out: list[SavedTensors] = [CompressSaved(dtype="bfloat16")]
    if device.type == "cuda":
        out.append(OffloadSaved(pin_memory=True))
    return out


INFO = TransformInfo(
    name="saved_tensors",
    plan_field="saved_tensors",
    summary="Store saved activations compressed to 16 bits, or offloaded to host memory (CUDA).",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="memory",
    rank=lambda device: 1,
)

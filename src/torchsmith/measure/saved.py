"""Bytes saved for backward, counted exactly with ``saved_tensors_hooks``.

Every tensor an op keeps for its backward passes through the pack hook, so the count
is exact, not estimated. Counting is by storage: a tensor saved by two ops (ReLU
saves its output, the next Linear saves the same tensor as its input) or saved as a
view holds one storage in memory, so it counts once, at the storage's full size.

Saved parameters (a Linear saves its weight) are not activation memory: they exist
anyway. They are reported apart, in ``param_bytes``.

Example::

    with count_saved_tensors(model) as saved:
        loss = loss_fn(model(x), y)
    saved.result.bytes, saved.result.by_module
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchsmith.measure.memory import _storages, _unique_storages

__all__ = ["SavedStats", "SavedTensorCounter", "count_saved_tensors", "OUTSIDE_MODULES"]

OUTSIDE_MODULES = "<outside>"
"""``by_module`` key for tensors saved by ops that ran outside any module's forward
(a loss computed on the model's output, for instance)."""


@dataclass(frozen=True, kw_only=True)
class SavedStats:
    """What the autograd graph of a region holds for backward."""

    bytes: int
    """Activation bytes: unique storages saved for backward that are not parameters or buffers."""
    count: int
    """Number of unique activation storages."""
    param_bytes: int
    """Unique bytes of saved parameters and buffers (memory that exists anyway)."""
    param_count: int
    """Number of unique saved parameter and buffer storages."""
    packs: int
    """Pack-hook calls, before deduplication: how many times an op saved a tensor."""
    by_module: dict[str, int] | None
    """Activation bytes per module path (as in ``named_modules``; ``""`` is the root
    module), each storage attributed to the innermost module running when it was first
    saved; ops outside any module go to ``"<outside>"``. Values sum to ``bytes``.
    ``None`` when no model was given."""


class SavedTensorCounter:
    """Context manager behind :func:`count_saved_tensors`; read ``.result`` after the block."""

    def __init__(self, model: nn.Module | None = None) -> None:
        self._model = model
        self._result: SavedStats | None = None
        self._param_keys: set[int] = set()
        # key -> weak reference to the storage; a dead reference means the address
        # was freed and reused, so a new storage with that key is not a duplicate.
        self._seen: dict[int, weakref.ref] = {}
        self._act_bytes = self._act_count = self._param_bytes = self._param_count = self._packs = 0
        self._by_module: dict[str, int] = {}
        self._module_stack: list[str] = []
        self._handles: list[Any] = []
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    @property
    def result(self) -> SavedStats:
        """The count; available once the ``with`` block has exited."""
        if self._result is None:
            raise RuntimeError(
                "The saved-tensor count was read before the counted region ended.\n"
                "Tip: read `saved.result` after the `with count_saved_tensors(...) as saved:` block."
            )
        return self._result

    def __enter__(self) -> SavedTensorCounter:
        if self._model is not None:
            self._param_keys = set(_unique_storages(
                list(self._model.parameters()) + list(self._model.buffers())
            ))
            for name, module in self._model.named_modules():
                self._handles.append(module.register_forward_pre_hook(self._push(name)))
                # always_call: pop even when forward raises, so the stack stays right.
                self._handles.append(module.register_forward_hook(self._pop, always_call=True))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._hooks is not None
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._result = SavedStats(
            bytes=self._act_bytes,
            count=self._act_count,
            param_bytes=self._param_bytes,
            param_count=self._param_count,
            packs=self._packs,
            by_module=dict(self._by_module) if self._model is not None else None,
        )

    def _push(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            self._module_stack.append(name)

        return hook

    def _pop(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._module_stack:
            self._module_stack.pop()

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self._packs += 1
        # `weight.t()` is what addmm saves: a view whose base is the Parameter.
        root = tensor._base if tensor._base is not None else tensor
        is_param = isinstance(root, nn.Parameter)
        for key, storage in _storages(tensor):
            ref = self._seen.get(key)
            if ref is not None and ref() is not None:
                continue  # already counted: saved before, or a view of something saved
            self._seen[key] = weakref.ref(storage)
            nbytes = storage.nbytes()
            if is_param or key in self._param_keys:
                self._param_bytes += nbytes
                self._param_count += 1
            else:
                self._act_bytes += nbytes
                self._act_count += 1
                if self._model is not None:
                    where = self._module_stack[-1] if self._module_stack else OUTSIDE_MODULES
                    self._by_module[where] = self._by_module.get(where, 0) + nbytes
        # detach(): the graph must not hold the tensor itself, or an op output would
        # reference its own grad_fn and form a cycle (see saved_tensors_hooks docs).
        return tensor.detach()


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def count_saved_tensors(model: nn.Module | None = None) -> SavedTensorCounter:
    """Count the bytes that ops in a ``with`` block save for backward.

    Pass ``model`` to attribute activation bytes to its modules and to recognise its
    parameters and buffers however they are saved; without it, a saved tensor is a
    parameter when it is an ``nn.Parameter`` or a view of one.

    Saved-tensor hooks do not nest: inside a region that installs its own (activation
    checkpointing, CPU offload), those hooks take over and their tensors are not seen
    here, which matches the memory they actually keep.

    Example::

        >>> layer = nn.Linear(1024, 1024)
        >>> x = torch.randn(32, 1024)
        >>> with count_saved_tensors(layer) as saved:
        ...     y = layer(x)
        >>> saved.result.bytes == 32 * 1024 * 4  # Linear saves its input
        True
    """
    return SavedTensorCounter(model)

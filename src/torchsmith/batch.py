"""Batches as the engine sees them: a tensor, or a tuple, list or dict of tensors (nested).

These helpers walk that structure: how many samples a batch holds, its slices along the
sample dimension (micro-batches, per-rank shards) and its move to a device.

>>> split_batch({"input_ids": torch.arange(6)}, 3)[1]
{'input_ids': tensor([2, 3])}
"""

from __future__ import annotations

from typing import Any

import torch


def split_batch(batch: Any, count: int) -> list[Any]:
    """Split every tensor of a batch along dim 0 into ``count`` nearly equal parts."""
    if count == 1:
        return [batch]
    n = batch_len(batch)
    if n < count:
        raise ValueError(
            f"cannot split a batch of {n} samples into {count} micro-batches.\n"
            f"Tip: use microbatching.count <= {n}."
        )
    return [_index(batch, i, count) for i in range(count)]


def _index(batch: Any, i: int, count: int) -> Any:
    if isinstance(batch, torch.Tensor):
        return torch.tensor_split(batch, count)[i]
    if isinstance(batch, (list, tuple)):
        return type(batch)(_index(b, i, count) for b in batch)
    if isinstance(batch, dict):
        return {k: _index(v, i, count) for k, v in batch.items()}
    return batch


def batch_len(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch:
        return batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        # The first tensor decides: a Hugging Face-style dict may lead with a non-tensor entry.
        tensors = [v for v in batch.values() if isinstance(v, (torch.Tensor, list, tuple))]
        return batch_len(tensors[0] if tensors else next(iter(batch.values())))
    return 1


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a batch to ``device`` (non-blocking when the source is pinned)."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=batch.is_pinned())
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch

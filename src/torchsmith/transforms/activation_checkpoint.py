"""Activation checkpointing of the model's repeated blocks: full, every k-th block, or selective.

The blocks are found by :func:`torchsmith.structure.discover` (``transformer.h`` in GPT-2,
``model.layers`` in Llama, ``blocks`` in the built-ins), or named by the workload.

A checkpointed block keeps only its input for backward and runs its forward again during
backward to rebuild what it needs. The selective variant keeps the outputs of matmuls,
attention and convolutions (costly to recompute) and recomputes only pointwise ops (GELU,
adds, layer norms), via ``torch.utils.checkpoint.create_selective_checkpoint_contexts``.

The block's ``forward`` is shadowed by an instance attribute that calls
``checkpoint(original_forward, ..., use_reentrant=False)``; no module is wrapped or
renamed, so ``state_dict`` keys, parameters and ``named_modules`` stay exactly as they
were, and revert deletes the attribute.

Example::

    change = apply_checkpointing(model, CheckpointBlocks(every=1))   # every block
    loss_fn(model, batch).backward()                                  # recomputes in backward
    change.revert()
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from torchsmith.plan import CheckpointBlocks, Checkpointing, NoCheckpointing, SelectiveCheckpoint
from torchsmith.structure import StructureError, discover
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied

_aten = torch.ops.aten
# Outputs worth keeping under selective checkpointing: each costs O(n^3)-ish FLOPs to recompute,
# while what they feed (bias adds, GELU, residual adds, norms) is memory-bound and cheap.
SAVE_OPS = frozenset(
    op
    for name in (
        "mm", "addmm", "bmm", "baddbmm", "convolution",
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    )
    if hasattr(_aten, name)
    for op in [getattr(_aten, name).default]
)


def _selective_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context() -> tuple[Any, Any]:
    return create_selective_checkpoint_contexts(_selective_policy)


def _checkpointed(block: nn.Module, context_fn: Callable[[], Any] | None) -> Callable[..., Any]:
    forward = type(block).forward.__get__(block)
    extra: dict[str, Any] = {"context_fn": context_fn} if context_fn is not None else {}
    # Batch norm in training mode updates its running statistics on every forward, so the
    # recompute in backward would update them a second time. They are put back after it.
    stats = [b for m in block.modules() if isinstance(m, nn.modules.batchnorm._NormBase)
             for b in m.buffers()]

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)  # evaluation: nothing is saved, nothing to recompute
        if not stats:
            # The plain path: no Python state mutated inside the checkpointed region, so
            # torch.compile traces it as one region (a counter here would be a graph break).
            return checkpoint(forward, *args, use_reentrant=False, **extra, **kwargs)
        calls = 0

        def once(*a: Any, **k: Any) -> Any:
            nonlocal calls
            calls += 1
            # Both calls issue the same ops in the same order: selective checkpointing replays the
            # forward's op sequence during the recompute and refuses an op the forward did not run.
            # So the forward too clones the statistics and copies them back, onto themselves.
            kept = [t.clone() for t in stats]
            try:
                return forward(*a, **k)
            finally:  # also when checkpoint stops the recompute early
                with torch.no_grad():
                    for t, v in zip(stats, kept, strict=True):
                        t.copy_(v if calls > 1 else t)  # the recompute, in backward: undo its update

        # use_reentrant=False: supports kwargs, inputs without requires_grad and torch.compile,
        # and is the variant PyTorch recommends.
        return checkpoint(once, *args, use_reentrant=False, **extra, **kwargs)

    run._torchsmith_checkpointed = True  # type: ignore[attr-defined]
    return run


def find_blocks(model: nn.Module, what: str) -> list[tuple[str, nn.Module]]:
    """``[(path, block), ...]`` of the model's repeated blocks, or a TransformError listing what was found."""
    try:
        return discover(model).block_items(what)
    except StructureError as err:
        # Same message, as the error type tune reads as "does not apply here".
        raise TransformError(str(err)) from None


def apply_checkpointing(model: nn.Module, cfg: Checkpointing) -> Change:
    """Checkpoint blocks ``0, k, 2k, ...`` of the model's repeated blocks in place.

    >>> change = apply_checkpointing(gpt, SelectiveCheckpoint(every=2))  # doctest: +SKIP
    >>> change.targets                                                   # doctest: +SKIP
    ['blocks.0', 'blocks.2']
    """
    change = Change("checkpointing", "every activation kept, as written")
    if isinstance(cfg, NoCheckpointing):
        return change
    blocks = find_blocks(model, "activation checkpointing")
    mark_applied(model, "checkpointing", change)
    context_fn = _selective_context if isinstance(cfg, SelectiveCheckpoint) else None
    for i in range(0, len(blocks), cfg.every):
        path, block = blocks[i]
        if "forward" in block.__dict__:
            change.revert()
            raise TransformError(
                f"{path} already has an instance-level forward ({block.__dict__['forward']!r}), "
                "set by another tool; checkpointing it again would wrap twice.\n"
                "Tip: remove that wrapper first, or leave checkpointing off."
            )
        block.forward = _checkpointed(block, context_fn)
        change.on_revert(functools.partial(block.__dict__.pop, "forward", None))
        change.targets.append(path)
    how = "selective (matmul outputs kept)" if context_fn else "full"
    change.summary = f"{how} activation checkpointing of {len(change.targets)} of {len(blocks)} blocks"
    return change


def _candidates(device: DeviceInfo) -> list[Checkpointing]:
    return [CheckpointBlocks(every=1), CheckpointBlocks(every=2), SelectiveCheckpoint(every=1)]


INFO = TransformInfo(
    name="checkpointing",
    plan_field="checkpointing",
    summary="Recompute each block's activations in backward instead of keeping them (full or selective).",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="memory",
    rank=lambda device: 0,
)

"""Swap a language model's final Linear + cross-entropy for the chunked op (``Plan.loss_impl``).

With ``LossImpl(impl="chunked")`` the step's loss stops building the ``(tokens, vocab)``
logits: the model's output head (``torchsmith.structure.discover``: ``get_output_embeddings()``
in Hugging Face models, else the last Linear) passes the hidden states through while the
step's loss runs, and :func:`torchsmith.ops.linear_cross_entropy` applies the head's weight
chunk by chunk. A tied head (GPT-2: the token embedding's weight) works the same way: the
op reads the one shared weight, and its gradient reaches it from both uses.

How, and why this way:

* the head is switched *in place* to a subclass of ``nn.Linear`` (``__class__`` swap):
  same parameters, same ``state_dict`` keys, same optimizer, still an ``nn.Linear``.
  Only while the chunked loss calls ``model(x)`` does it return its input; any other
  call (evaluation, generation) still gets logits;
* the model is called through ``__call__``, not a ``hidden()`` method, so a whole-model
  ``torch.compile`` (which compiles ``__call__``) and DDP still wrap the forward;
* what it assumes, one of two forms:

  - batches ``(inputs, targets)``, ``model(inputs)`` ending with the head, and the workload's
    loss ``F.cross_entropy`` of those logits against the targets;
  - Hugging Face causal LMs (``*ForCausalLM``, ``*LMHeadModel``) with dict batches holding
    ``labels`` (``loss = model(**batch).loss``): the model runs without the labels, its
    ``logits`` are then the hidden states ``(B, T, C)``, and the loss is the model's own
    shifted one: position ``t`` predicts ``labels[:, t + 1]``;

  both mean over tokens, ``ignore_index`` -100, no label smoothing. It checks this once: on
  the first batch it also runs the loss as written (no grad, eager) and refuses, with both
  values, if they differ.

Example::

    change = apply_loss_impl(parts, LossImpl(impl="chunked"))
    loss = parts.loss_fn(parts.model, (x, y))   # no (B*T, vocab) tensor was allocated
    change.revert()                              # the head and the loss as written are back
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.ops.linear_cross_entropy import linear_cross_entropy
from torchsmith.plan import LossImpl
from torchsmith.structure import StructureError, discover
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied
from torchsmith.transforms.parts import LossFn, StepParts

_DEFER = "_torchsmith_defer"


class DeferredHead(nn.Linear):
    """An ``nn.Linear`` that returns its input while the chunked loss runs the model."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # A plain bool attribute: torch.compile guards on it, one graph per value.
        if getattr(self, _DEFER):
            return input  # (B, T, C): hidden states; the loss applies the weight in chunks
        return F.linear(input, self.weight, self.bias)  # (B, T, V)


@contextmanager
def _deferred(head: nn.Module) -> Iterator[None]:
    setattr(head, _DEFER, True)
    try:
        yield
    finally:
        setattr(head, _DEFER, False)


class ChunkedLoss:
    """``loss_fn(model, (x, y))`` computing the head and cross-entropy with the chunked op."""

    def __init__(self, original: LossFn, head: nn.Linear, cfg: LossImpl) -> None:
        self.original = original
        self.head = head
        self.chunk_size = cfg.chunk_size
        self.verified = False

    def __call__(self, model: nn.Module, batch: Any) -> torch.Tensor:
        if isinstance(batch, dict):
            hidden, targets = _causal_lm_hidden(model, self.head, batch)
        else:
            inputs, targets = _inputs_targets(batch)
            with _deferred(self.head):
                hidden = model(inputs)  # (B, T, C)
        head = self.head
        _check_hidden(hidden, targets, head)
        weight = head.weight
        loss = linear_cross_entropy(
            hidden.to(weight.dtype), weight, targets, head.bias, chunk_size=self.chunk_size
        )
        if not self.verified:
            self._verify(model, batch, loss)
        return loss

    def _verify(self, model: nn.Module, batch: Any, loss: torch.Tensor) -> None:
        # Once per step function: the as-written loss on the same batch, eager and without a
        # graph (no extra compile, no saved activations; its logits do exist for a moment).
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            expected = self.original(model, batch).float()
        got = loss.detach().float()
        # bf16 parameters elsewhere in the model (or a tied head cast to bf16 in its forward) move
        # the as-written loss by bf16's resolution too.
        low_precision = (any(p.dtype != torch.float32 for p in model.parameters())
                         or torch.is_autocast_enabled(got.device.type))
        rtol = 2e-2 if low_precision else 1e-4
        # Sync point (once): the two values are compared on the host.
        if not torch.isclose(got, expected, rtol=rtol, atol=1e-5):
            raise TransformError(
                f"loss_impl='chunked' computes cross_entropy(head(hidden), targets) = {got.item():.6f} on the "
                f"first batch, but the workload's loss as written gives {expected.item():.6f} (rtol {rtol}).\n"
                "The chunked loss reproduces only F.cross_entropy(model(x), y), or a Hugging Face causal LM's "
                "own shifted loss, mean over tokens, ignore_index -100, no label smoothing, with the model's "
                "forward ending in its output head.\n"
                "Tip: keep loss_impl='standard' for this workload, or call "
                "torchsmith.ops.linear_cross_entropy in your own loss."
            )
        self.verified = True


def _is_hf_causal_lm(model: nn.Module) -> bool:
    return type(model).__name__.endswith(("ForCausalLM", "LMHeadModel"))


def _causal_lm_hidden(model: nn.Module, head: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states ``(B, T-1, C)`` and targets ``(B, T-1)`` of a Hugging Face causal LM's dict batch."""
    name = type(model).__name__
    labels = batch.get("labels")
    if not _is_hf_causal_lm(model) or not isinstance(labels, torch.Tensor):
        raise TransformError(
            f"loss_impl='chunked' takes dict batches only for Hugging Face causal LMs (*ForCausalLM, "
            f"*LMHeadModel) with a 'labels' tensor; found {name} and a dict with keys {sorted(batch)}.\n"
            "Tip: keep loss_impl='standard' for this workload."
        )
    with _deferred(head):
        out = model(**{k: v for k, v in batch.items() if k != "labels"})  # no labels: no loss, no logits
    hidden = out.logits if hasattr(out, "logits") else out[0]  # (B, T, C): the head passed them through
    # The model's own loss shifts: position t predicts token t + 1; the last position predicts nothing.
    return hidden[:, :-1], labels[:, 1:]


def _inputs_targets(batch: Any) -> tuple[Any, torch.Tensor]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor):
        targets = batch[1]
        if targets.is_floating_point() or targets.is_complex():
            raise TransformError(
                f"loss_impl='chunked' computes cross-entropy against class ids, but this workload's targets are "
                f"{str(targets.dtype).removeprefix('torch.')} of shape {tuple(targets.shape)}: a regression or "
                "soft-label loss, which the chunked op does not reproduce.\n"
                "Tip: keep loss_impl='standard' for this workload."
            )
        return batch[0], targets
    found = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
    raise TransformError(
        f"loss_impl='chunked' needs batches of (inputs, targets) with targets a tensor of class ids; found {found}.\n"
        "Tip: keep loss_impl='standard' for this workload."
    )


def _check_hidden(hidden: Any, targets: torch.Tensor, head: nn.Linear) -> None:
    if not isinstance(hidden, torch.Tensor) or hidden.shape[-1] != head.in_features \
            or hidden.shape[:-1] != targets.shape:
        shape = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise TransformError(
            f"loss_impl='chunked': with the head passing its input through, model(inputs) returned {shape}; "
            f"expected hidden states of shape {tuple(targets.shape)} + ({head.in_features},) "
            "(the targets' shape plus the head's in_features).\n"
            "Tip: model.forward must end with its output head (e.g. `return self.lm_head(h)`); otherwise keep "
            "loss_impl='standard', or name the head: Workload(..., head='lm_head')."
        )
    if type(head.weight).__name__ == "DTensor":
        raise TransformError(
            "loss_impl='chunked' reads the head's weight outside the head's forward, where FSDP2 keeps it "
            "sharded (a DTensor).\nTip: keep loss_impl='standard' with FSDP2."
        )


def apply_loss_impl(parts: StepParts, cfg: LossImpl) -> Change:
    """Make ``parts.loss_fn`` compute the LM head + cross-entropy with the chunked op.

    Refuses unless the model's output head (:func:`torchsmith.structure.discover`) is an ``nn.Linear``.

    >>> change = apply_loss_impl(parts, LossImpl(impl="chunked", chunk_size=256))  # doctest: +SKIP
    """
    change = Change("loss_impl", "standard: the workload's loss as written")
    if cfg.impl == "standard":
        return change
    model = parts.model
    try:
        found = discover(model)
    except StructureError as err:
        raise TransformError(str(err)) from None
    head, head_path = found.head, found.head_path
    if type(head) not in (nn.Linear, DeferredHead):  # DeferredHead: mark_applied names the double apply
        what = f"{type(head).__name__} at {head_path!r}" if head is not None else "no nn.Linear head"
        raise TransformError(
            f"loss_impl='chunked' replaces the final Linear + cross-entropy and needs the model's output head "
            f"to be an nn.Linear (C -> vocab) applied last in forward; {type(model).__name__} has {what}.\n"
            "Tip: name the head in the workload (Workload(..., head='lm_head')), or keep loss_impl='standard'."
        )
    # Checked just above: an nn.Linear (or DeferredHead) head, which discover found at head_path.
    assert isinstance(head, nn.Linear) and head_path is not None
    if hasattr(model, "config") and hasattr(model, "base_model_prefix") and not _is_hf_causal_lm(model):
        # A Hugging Face model computes its own loss: only the causal LMs' one is reproduced here.
        raise TransformError(
            f"loss_impl='chunked' reproduces a Hugging Face model's own loss only for causal LMs "
            f"(*ForCausalLM, *LMHeadModel); {type(model).__name__} is not one (its head: {head_path!r}, "
            f"{head.out_features} outputs).\nTip: keep loss_impl='standard': a small head gains nothing from chunks."
        )
    mark_applied(model, "loss_impl", change)
    head.__class__ = DeferredHead
    setattr(head, _DEFER, False)
    original = parts.loss_fn
    parts.loss_fn = ChunkedLoss(original, head, cfg)

    def undo() -> None:
        head.__class__ = nn.Linear
        head.__dict__.pop(_DEFER, None)
        parts.loss_fn = original

    change.on_revert(undo)
    chunk = cfg.chunk_size or "auto"
    change.summary = (f"{head_path} ({head.in_features} -> {head.out_features}) + cross-entropy as chunked "
                      f"linear_cross_entropy (chunk {chunk} rows): no full logits")
    change.targets.append(head_path)
    return change


def _candidates(device: DeviceInfo) -> list[LossImpl]:
    return [LossImpl(impl="chunked")]


INFO = TransformInfo(
    name="loss_impl",
    plan_field="loss_impl",
    summary="LM head + cross-entropy in row chunks, never holding the (tokens, vocab) logits.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 5,
)

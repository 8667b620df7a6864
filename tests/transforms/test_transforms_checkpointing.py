"""Activation checkpointing: saved bytes fall by the expected fraction, gradients are unchanged."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transforms_helpers import cnn_batch, cnn_loss, gpt_batch, gpt_loss, grads_of, one_thread, tiny_cnn, tiny_gpt  # noqa: F401 (one_thread: autouse fixture)

from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.saved import count_saved_tensors
from torchsmith.plan import CheckpointBlocks, SelectiveCheckpoint
from torchsmith.transforms.activation_checkpoint import apply_checkpointing
from torchsmith.transforms.base import TransformError


def _saved(model, batch):
    with count_saved_tensors(model) as saved:
        loss = gpt_loss(model, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return saved.result


def _retained(model, batch) -> int:
    """Bytes the graph holds after forward, measured by the allocator (sees inside checkpoint caches)."""
    with track_peak_memory("cpu") as mem:
        loss = gpt_loss(model, batch)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return mem.result.end_bytes - mem.result.start_bytes


def test_every_block_cuts_saved_bytes_by_80_percent_with_equal_gradients():
    model, batch = tiny_gpt(n_layer=4), gpt_batch()
    base, want = _saved(model, batch), grads_of(model, gpt_loss, batch)
    change = apply_checkpointing(model, CheckpointBlocks(every=1))
    assert change.targets == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    after, got = _saved(model, batch), grads_of(model, gpt_loss, batch)
    assert after.bytes <= 0.2 * base.bytes, (after.bytes, base.bytes)
    # Recompute runs the same fp32 kernels on the same inputs: gradients match to rounding.
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-7)


def test_every_second_block_saves_exactly_those_blocks_activations():
    model, batch = tiny_gpt(n_layer=4), gpt_batch()
    base = _saved(model, batch)
    apply_checkpointing(model, CheckpointBlocks(every=2))
    after = _saved(model, batch)
    # Expected: blocks 0 and 2 give up everything they saved and keep only their input (B, T, C) fp32.
    x, _ = batch
    block_input = x.numel() * model.config.n_embd * 4
    dropped = sum(b for name, b in base.by_module.items() if name.startswith(("blocks.0", "blocks.2")))
    expected = base.bytes - dropped + 2 * block_input
    assert abs(after.bytes - expected) <= 0.05 * base.bytes, (after.bytes, expected, base.bytes)
    assert 0.4 < after.bytes / base.bytes < 0.7


def test_selective_keeps_matmul_outputs_and_recomputes_pointwise():
    model, batch = tiny_gpt(n_layer=2), gpt_batch()
    none, want = _retained(model, batch), grads_of(model, gpt_loss, batch)
    change = apply_checkpointing(model, SelectiveCheckpoint(every=1))
    selective, got = _retained(model, batch), grads_of(model, gpt_loss, batch)
    change.revert()
    apply_checkpointing(model, CheckpointBlocks(every=1))
    full = _retained(model, batch)
    # Between full checkpointing (keeps block inputs only) and none (keeps everything).
    assert full < selective < 0.9 * none, (full, selective, none)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-7)


def test_batch_norm_statistics_are_updated_once_despite_recompute():
    plain, wrapped, batch = tiny_cnn().train(), tiny_cnn().train(), cnn_batch()
    apply_checkpointing(wrapped, CheckpointBlocks(every=1))
    want, got = grads_of(plain, cnn_loss, batch), grads_of(wrapped, cnn_loss, batch)
    for (name, a), b in zip(plain.named_buffers(), wrapped.buffers(), strict=True):
        assert torch.equal(a, b), name  # running_mean/var/num_batches_tracked: one update, not two
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_eval_forward_does_not_checkpoint():
    model, (x, _) = tiny_gpt(n_layer=2), gpt_batch()
    apply_checkpointing(model, CheckpointBlocks(every=1))
    with torch.no_grad():
        out = model(x)
    assert out.grad_fn is None


def test_refused_without_blocks():
    with pytest.raises(TransformError, match=r"repeated blocks.*\n.*Tip:.*blocks=") as err:
        apply_checkpointing(nn.Linear(4, 4), CheckpointBlocks(every=1))
    assert "Linear has no nn.ModuleList" in str(err.value)


@pytest.mark.slow
def test_checkpointed_blocks_compile_without_graph_breaks():
    """Checkpointing runs before compile in apply_plan; the compiled block must trace as one region."""
    from torch._dynamo.utils import counters

    from torchsmith.plan import Compile
    from torchsmith.transforms.compile import apply_compile

    torch._dynamo.reset()
    counters.clear()
    model, batch = tiny_gpt(n_layer=2, n_embd=16, block_size=16), gpt_batch(batch=2, seq=16)
    want = grads_of(tiny_gpt(n_layer=2, n_embd=16, block_size=16), gpt_loss, batch)
    apply_checkpointing(model, CheckpointBlocks(every=1))
    apply_compile(model, Compile(enabled=True, regional=True), backend="aot_eager")
    got = grads_of(model, gpt_loss, batch)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1  # both blocks share one compiled graph
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-7)
    torch._dynamo.reset()

"""channels_last, in-place activations and the inference context."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transforms_helpers import cnn_batch, cnn_loss, gpt_batch, grads_of, one_thread, tiny_cnn, tiny_gpt  # noqa: F401 (one_thread: autouse fixture)

from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.saved import count_saved_tensors
from torchsmith.plan import InPlace, MemoryFormat
from torchsmith.transforms.base import TransformError
from torchsmith.transforms.inference import inference
from torchsmith.transforms.inplace import apply_inplace
from torchsmith.transforms.memory_format import apply_memory_format

# --- memory format ---------------------------------------------------------------------


def test_channels_last_outputs_and_gradients_equal():
    model, batch = tiny_cnn().eval(), cnn_batch()
    want_out, want = model(batch[0]), grads_of(model, cnn_loss, batch)
    seen = []
    model.stem[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    change = apply_memory_format(model, MemoryFormat(channels_last=True))
    got_out, got = model(batch[0]), grads_of(model, cnn_loss, batch)
    assert seen[-1].is_contiguous(memory_format=torch.channels_last)  # the input was converted
    assert not batch[0].is_contiguous(memory_format=torch.channels_last)  # ... by copy, not in place
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    assert len(change.targets) == len(convs)
    torch.testing.assert_close(got_out, want_out, rtol=1e-4, atol=1e-5)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-3, atol=1e-5)


def test_channels_last_keeps_optimizer_parameters():
    model = tiny_cnn()
    ids = [id(p) for p in model.parameters()]
    apply_memory_format(model, MemoryFormat(channels_last=True))
    assert [id(p) for p in model.parameters()] == ids


def test_channels_last_refused_without_2d_convs():
    with pytest.raises(TransformError, match=r"no\s+Conv2d[\s\S]*Tip:"):
        apply_memory_format(tiny_gpt(n_layer=1), MemoryFormat(channels_last=True))
    with pytest.raises(TransformError, match="Conv1d"):
        apply_memory_format(nn.Sequential(nn.Conv1d(3, 4, 3)), MemoryFormat(channels_last=True))


# --- in-place activations --------------------------------------------------------------


def conv_bn_relu() -> nn.Module:
    # The first ReLU's output is the largest tensor and the forward peak is reached there, so the
    # buffer an in-place ReLU does not allocate comes straight off the peak. (Where the peak is
    # reached elsewhere, in-place activations lower only a transient, not the peak.)
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10), nn.ReLU())


def _forward_peak_and_saved(model, batch) -> tuple[int, int]:
    with track_peak_memory("cpu") as mem, count_saved_tensors(model) as saved:
        loss = cnn_loss(model, batch)
    loss.backward()  # autograd's version counter would raise here if an in-place op were unsafe
    model.zero_grad(set_to_none=True)
    return mem.result.peak_delta_bytes, saved.result.bytes


def test_inplace_relu_lowers_forward_peak_without_autograd_error():
    model, batch = conv_bn_relu().eval(), cnn_batch()
    want = grads_of(model, cnn_loss, batch)
    peak0, saved0 = _forward_peak_and_saved(model, batch)
    change = apply_inplace(model, InPlace(activations=True))
    assert change.targets == ["2", "6"] and model[2].inplace and model[6].inplace
    peak1, saved1 = _forward_peak_and_saved(model, batch)
    got = grads_of(model, cnn_loss, batch)
    for k in want:
        torch.testing.assert_close(got[k], want[k])
    relu_out = batch[0].shape[0] * 32 * 16 * 16 * 4  # the first ReLU's (B, 32, H, W) fp32 output
    assert peak0 - peak1 >= 0.9 * relu_out, (peak0, peak1, relu_out)  # small tensors (the head) move the peak a little
    # Honest accounting: saved-for-backward bytes do not fall. ReLU saves its output either way;
    # in place, that output lives in the batch norm's buffer instead of a new one.
    assert saved1 == saved0


def test_inplace_leaves_activation_whose_input_is_reused():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act, self.out = nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc(x)
            return self.out(self.act(h) + h)  # h is read again after the activation

    with pytest.raises(TransformError, match=r"also read by 1 other[\s\S]*Tip:"):
        apply_inplace(Residual(), InPlace(activations=True))


def test_inplace_leaves_activation_after_op_that_saves_its_output():
    model = nn.Sequential(nn.Linear(8, 8), nn.Sigmoid(), nn.ReLU(), nn.Linear(8, 2), nn.ReLU())
    change = apply_inplace(model, InPlace(activations=True))
    assert change.targets == ["4"]  # Sigmoid saves its output for backward: ReLU "2" stays out of place
    assert not model[2].inplace
    model(torch.randn(4, 8, requires_grad=True)).sum().backward()  # no in-place error


def test_inplace_refused_on_gpt_mini_gelu():
    with pytest.raises(TransformError, match=r"GELU[\s\S]*Tip:"):
        apply_inplace(tiny_gpt(n_layer=1), InPlace(activations=True))


# --- inference -------------------------------------------------------------------------


def test_inference_builds_no_graph_and_restores_modes():
    model = tiny_cnn().train()
    model.blocks[0].bn1.eval()  # a deliberately frozen batch norm must stay in eval
    modes = [m.training for m in model.modules()]
    stats = model.blocks[1].bn1.running_mean.clone()
    with inference(model):
        assert not model.training
        out = model(cnn_batch()[0])
    assert out.grad_fn is None and not out.requires_grad and out.is_inference()
    assert [m.training for m in model.modules()] == modes
    assert torch.equal(model.blocks[1].bn1.running_mean, stats)  # eval: batch norm statistics untouched


def test_inference_restores_modes_on_error():
    model = tiny_gpt(n_layer=1).train()
    with pytest.raises(ValueError, match="block_size"):
        with inference(model):
            model(torch.zeros(1, 1000, dtype=torch.long))  # longer than block_size
    assert all(m.training for m in model.modules())
    assert model(gpt_batch()[0]).grad_fn is not None  # grad mode is back too

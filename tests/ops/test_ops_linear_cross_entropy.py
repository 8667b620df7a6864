"""Chunked linear + cross-entropy: exact against F.cross_entropy, registered right, and lean."""

import pytest
import torch
import torch.nn.functional as F

from torchsmith.measure.memory import track_peak_memory
from torchsmith.ops.linear_cross_entropy import default_chunk_size, linear_cross_entropy, linear_cross_entropy_op


def _data(n, c, v, dtype=torch.float32, bias=True, seed=0, ignore_every=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g, dtype=dtype).requires_grad_()
    w = (0.5 * torch.randn(v, c, generator=g, dtype=dtype)).requires_grad_()
    b = torch.randn(v, generator=g, dtype=dtype).requires_grad_() if bias else None
    y = torch.randint(0, v, (n,), generator=g)
    if ignore_every:
        y[::ignore_every] = -100
    return x, w, b, y


def _params(x, w, b):
    return [t for t in (x, w, b) if t is not None]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradcheck_float64(bias, smoothing, reduction):
    x, w, b, y = _data(7, 5, 11, torch.float64, bias, ignore_every=3)
    fn = lambda *t: linear_cross_entropy(t[0], t[1], y, t[2] if bias else None, chunk_size=3,
                                         label_smoothing=smoothing, reduction=reduction)
    assert torch.autograd.gradcheck(fn, tuple(_params(x, w, b)))


@pytest.mark.parametrize("v, chunk", [(62, None), (62, 500), (1000, 300)])
def test_matches_reference_on_gpt_mini_shapes(v, chunk):
    # gpt-mini's head: 16 x 128 tokens, width 256, its 62-character vocab (and a larger one).
    x, w, b, y = _data(16 * 128, 256, v, ignore_every=7)
    params = _params(x, w, b)
    got = linear_cross_entropy(x, w, y, b, chunk_size=chunk)
    got_grads = torch.autograd.grad(got, params)
    ref = F.cross_entropy(F.linear(x, w, b), y)
    ref_grads = torch.autograd.grad(ref, params)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    for a, r in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)


def test_label_smoothing_and_sum_match_reference():
    x, w, b, y = _data(300, 32, 97, ignore_every=5)
    got = linear_cross_entropy(x, w, y, b, chunk_size=64, label_smoothing=0.1, reduction="sum", ignore_index=-100)
    ref = F.cross_entropy(F.linear(x, w, b), y, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)
    for a, r in zip(torch.autograd.grad(got, _params(x, w, b)), torch.autograd.grad(ref, _params(x, w, b)),
                    strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


def test_all_ignored_matches_reference():
    x, w, b, y = _data(6, 4, 9)
    y[:] = -100
    got, ref = linear_cross_entropy(x, w, y, b), F.cross_entropy(F.linear(x, w, b), y)
    assert got.isnan() and ref.isnan()  # mean over zero tokens, as F.cross_entropy
    for a, r in zip(torch.autograd.grad(got, _params(x, w, b)), torch.autograd.grad(ref, _params(x, w, b)),
                    strict=True):
        torch.testing.assert_close(a, r)  # zeros, not nan


def test_leading_dims_and_no_grad():
    x, w, b, y = _data(24, 8, 13)
    x3, y2 = x.detach().view(2, 12, 8), y.view(2, 12)
    with torch.no_grad():
        got = linear_cross_entropy(x3, w, y2, b, chunk_size=5)
    torch.testing.assert_close(got, F.cross_entropy(F.linear(x3, w, b).flatten(0, 1), y))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("compute_grad", [True, False])
def test_opcheck(bias, compute_grad):
    x, w, b, y = _data(10, 6, 17, bias=bias, ignore_every=4)
    if not compute_grad:  # the wrapper passes compute_grad=False only when nothing requires grad
        x, w, b = (t.detach() if t is not None else None for t in (x, w, b))
    args = (x, w, y, b, 4, -100, 0.1, "mean", compute_grad)
    torch.library.opcheck(linear_cross_entropy_op, args)  # raises on any failed check


def test_bf16_head_reports_fp32_loss_and_bf16_grads():
    x, w, b, y = _data(64, 16, 50)
    xb, wb = x.detach().bfloat16().requires_grad_(), w.detach().bfloat16().requires_grad_()
    loss = linear_cross_entropy(xb, wb, y, chunk_size=16)
    loss.backward()
    assert loss.dtype == torch.float32 and xb.grad.dtype == wb.grad.dtype == torch.bfloat16
    ref = F.cross_entropy(F.linear(x, w).detach(), y)
    torch.testing.assert_close(loss, ref, rtol=2e-2, atol=0)


def test_errors_say_what_was_expected():
    x, w, b, y = _data(6, 4, 9)
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(x, w, y, reduction="none")
    with pytest.raises(ValueError, match=r"weight \(V, C\)"):
        linear_cross_entropy(x, w.t(), y)
    with pytest.raises(ValueError, match="chunk_size"):
        linear_cross_entropy(x, w, y, chunk_size=0)


def test_default_chunk_size():
    assert default_chunk_size(2048, 62, 256) == 2048  # small vocab: a single chunk
    rows = default_chunk_size(2048, 32000, 256)
    assert rows & (rows - 1) == 0 and rows * 32000 <= max(2048 * 256, 1 << 24)


def _loss_peak(fn, tensors) -> int:
    x, w, b, y = tensors
    fn(x, w, b, y).backward()  # warm-up
    x.grad = w.grad = b.grad = None
    with track_peak_memory("cpu", live=tensors) as mem:
        fn(x, w, b, y).backward()
        x.grad = w.grad = b.grad = None
    return mem.result.peak_delta_bytes


def test_peak_memory_far_below_full_logits():
    # vocab 8192 >> width 64: the logits (1024 x 8192 x 4 B = 32 MiB) dominate the standard loss.
    tensors = _data(1024, 64, 8192)
    logits_bytes = 1024 * 8192 * 4
    standard = _loss_peak(lambda x, w, b, y: F.cross_entropy(F.linear(x, w, b), y), tensors)
    chunked = _loss_peak(lambda x, w, b, y: linear_cross_entropy(x, w, y, b, chunk_size=128), tensors)
    assert standard >= 2 * logits_bytes  # autograd holds logits and log-softmax at once
    assert chunked <= 0.4 * standard, (chunked, standard)
    assert chunked < logits_bytes  # the full logits never existed


@pytest.mark.slow
def test_autocast_matmuls_in_autocast_dtype_eager_and_compiled():
    x, w, b, y = _data(64, 32, 100)

    def chunked(x, w, b):
        with torch.autocast("cpu", torch.bfloat16):
            return linear_cross_entropy(x, w, y, b, chunk_size=16)

    def reference(x, w, b):
        with torch.autocast("cpu", torch.bfloat16):
            return F.cross_entropy(F.linear(x, w, b), y)

    torch._dynamo.reset()
    compiled = torch.compile(chunked, fullgraph=True, backend="aot_eager")
    results = [(loss, torch.autograd.grad(loss, [x, w, b])) for loss in (chunked(x, w, b), compiled(x, w, b))]
    ref = reference(x, w, b)
    ref_grads = torch.autograd.grad(ref, [x, w, b])
    fp32 = F.cross_entropy(F.linear(x, w, b), y)
    for loss, grads in results:
        assert loss.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
        torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)  # same bf16 logits as autocast's F.linear
        for a, r in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, r, rtol=2e-2, atol=1e-3)
    assert not torch.isclose(results[0][0], fp32, rtol=1e-6)  # it really ran the matmul in bf16

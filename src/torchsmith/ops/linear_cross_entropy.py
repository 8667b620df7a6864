"""Chunked linear + cross-entropy: the loss of ``x @ W.T + b`` without the ``(N, vocab)`` logits.

A language model's head makes the largest activations of the whole step: at vocab 32k
and 2048 tokens, the fp32 logits take 262 MB, and autograd keeps about three such
tensors alive between forward and backward (the logits, ``log_softmax``'s output, then
the gradient of the logits). This operator walks over row chunks of ``x`` instead. For
each chunk it computes the logits, the loss, and at once the gradient of the loss with
respect to the logits, which it folds straight into ``grad_x`` ``(N, C)``, ``grad_W``
``(V, C)`` and ``grad_b`` ``(V,)``. Only those gradients are saved for backward, which
then only scales them by the incoming gradient. Peak memory is then one chunk of logits
plus the gradients, which the step needs anyway.

The trade-offs, measured by ``benchmarks/linear_cross_entropy.py``:

- it pays off when ``vocab > C``: the saved ``grad_x`` is ``N x C`` where autograd saves
  ``N x vocab``. At vocab 32k, C = 256 the loss's peak memory falls; at gpt-mini's 62
  characters it *rises*;
- the three matmuls all run in forward, even for a frozen weight, so backward is cheap but
  forward is slower; forward + backward together cost about the same at 32k and more at vocab 62;
- no double backward (the saved gradients are constants for autograd).

It is a ``torch.library.custom_op`` with a fake implementation and a registered autograd
formula, so ``torch.compile(fullgraph=True)`` treats it as one opaque node, with no graph
break, and ``torch.library.opcheck`` passes.

Example::

    x = torch.randn(2048, 256, requires_grad=True)            # hidden states (N, C)
    head = torch.nn.Linear(256, 32000)
    y = torch.randint(0, 32000, (2048,))
    loss = linear_cross_entropy(x, head.weight, y, head.bias)  # == F.cross_entropy(head(x), y)
    loss.backward()
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["linear_cross_entropy", "default_chunk_size"]

_REDUCTIONS = ("mean", "sum")


def default_chunk_size(n_rows: int, vocab: int, hidden: int) -> int:
    """Rows per chunk: a chunk of logits about as large as ``x`` itself, at least 16 Mi elements.

    Matching ``x``'s size (the rule Liger-Kernel uses) bounds the extra memory by what the
    step holds anyway. The 16 Mi-element floor (64 MB in fp32) keeps each chunk's matmuls
    big enough to run near full speed: every chunk re-reads the whole ``(V, C)`` weight
    three times: smaller chunks cost more time for no less memory, which
    ``benchmarks/linear_cross_entropy.py --chunk R`` measures against the standard loss.

    >>> default_chunk_size(2048, 32000, 256)
    512
    >>> default_chunk_size(2048, 62, 256)   # small vocab: one chunk
    2048
    """
    budget = max(n_rows * hidden, 1 << 24)  # elements of one chunk of logits
    rows = max(1, budget // max(vocab, 1))
    rows = 1 << int(math.log2(rows))  # a power of two: friendlier matmul shapes
    return max(1, min(n_rows, rows))


@torch.library.custom_op("torchsmith::linear_cross_entropy", mutates_args=())
def linear_cross_entropy_op(
    x: Tensor, weight: Tensor, target: Tensor, bias: Tensor | None, chunk_size: int,
    ignore_index: int, label_smoothing: float, reduction: str, compute_grad: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns ``(loss, grad_x, grad_weight, grad_bias)``; the grads are empty when not computed.

    The loss is in at least fp32 whatever the input dtype (the softmax runs in fp32 too).
    """
    n, vocab = x.shape[0], weight.shape[0]
    acc = torch.promote_types(x.dtype, torch.float32)  # softmax in at least fp32
    valid = target != ignore_index  # (N,) bool
    # Mean divides by the number of non-ignored rows; kept a tensor so there is no sync point.
    denom = valid.sum().to(acc) if reduction == "mean" else torch.ones((), dtype=acc, device=x.device)
    total = torch.zeros((), dtype=acc, device=x.device)
    # Outputs of a custom op must not alias one another: a fresh empty tensor for each unused one.
    grad_x = torch.empty_like(x) if compute_grad else x.new_empty(0)
    grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device) if compute_grad else x.new_empty(0)
    grad_b = torch.zeros(vocab, dtype=acc, device=x.device) if compute_grad and bias is not None else x.new_empty(0)
    eps = label_smoothing
    for start in range(0, n, chunk_size):
        # Free the previous chunk's logits before making this chunk's: while `z` (and `e`, `p`,
        # its in-place aliases) still named them, two chunks were alive at once (measured at
        # vocab 32k, 1016 rows of 512: 156 -> 97 MiB peak).
        z = e = p = None
        xc = x[start:start + chunk_size]  # (n, C)
        tc = target[start:start + chunk_size]  # (n,)
        vc = valid[start:start + chunk_size]
        z = torch.nn.functional.linear(xc, weight, bias).to(acc)  # (n, V): the only logits alive
        tsafe = torch.where(vc, tc, 0)  # ignored rows point at class 0, then get weight 0
        z_t = z.gather(1, tsafe[:, None]).squeeze(1)  # (n,) logit of the target
        z_mean = z.mean(dim=-1) if eps else None  # (n,) for label smoothing
        # One exp pass serves both the loss and its gradient: exp(z - max), in place of the logits.
        m = z.amax(dim=-1, keepdim=True)  # (n, 1)
        e = z.sub_(m).exp_()  # (n, V)
        s = e.sum(dim=-1)  # (n,)
        lse = m.squeeze(1) + s.log()  # (n,) logsumexp
        nll = lse - z_t
        rows = nll if z_mean is None else (1.0 - eps) * nll + eps * (lse - z_mean)  # None iff eps == 0
        total = total + torch.where(vc, rows, 0.0).sum()
        if not compute_grad:
            continue
        # d loss / d z = softmax(z) - (1-eps) * onehot(t) - eps / V, per valid row, / denom.
        # Ignored rows get weight 0; clamp so that an all-ignored batch gives zero gradients
        # (as F.cross_entropy does) while its mean loss stays 0/0 = nan.
        scale = vc.to(acc) / denom.clamp(min=1)  # (n,)
        p = e.mul_((scale / s)[:, None])  # (n, V): scaled softmax
        p.scatter_add_(1, tsafe[:, None], ((eps - 1.0) * scale)[:, None])
        if eps:
            p.sub_((eps / vocab * scale)[:, None])
        grad_x[start:start + chunk_size] = p.to(weight.dtype) @ weight  # (n, V) @ (V, C)
        grad_w.addmm_(p.t(), xc.to(acc))  # (V, n) @ (n, C), accumulated in fp32
        if bias is not None:
            grad_b += p.sum(dim=0)
    loss = total / denom  # in `acc`: a bf16 head still reports an fp32 loss
    if compute_grad:
        grad_w = grad_w.to(weight.dtype)
        if bias is not None:
            grad_b = grad_b.to(bias.dtype)
    return loss, grad_x, grad_w, grad_b


@linear_cross_entropy_op.register_fake
def _(x, weight, target, bias, chunk_size, ignore_index, label_smoothing, reduction, compute_grad):
    loss = x.new_empty((), dtype=torch.promote_types(x.dtype, torch.float32))
    if not compute_grad:
        return loss, x.new_empty(0), x.new_empty(0), x.new_empty(0)
    grad_b = bias.new_empty(bias.shape) if bias is not None else x.new_empty(0)
    return loss, torch.empty_like(x), weight.new_empty(weight.shape), grad_b


def _setup_context(ctx, inputs, output) -> None:
    x, weight, target, bias, *_, compute_grad = inputs
    _, grad_x, grad_w, grad_b = output
    ctx.compute_grad = compute_grad
    ctx.has_bias = bias is not None
    ctx.save_for_backward(grad_x, grad_w, grad_b)
    ctx.mark_non_differentiable(grad_x, grad_w, grad_b)


def _backward(ctx, grad_loss, _gx, _gw, _gb):
    if not ctx.compute_grad:
        raise RuntimeError(
            "linear_cross_entropy ran with compute_grad=False (no input required grad, or grad "
            "mode was off), so it has no gradients to return.\n"
            "Tip: call it with grad enabled and an input that requires grad."
        )
    grad_x, grad_w, grad_b = ctx.saved_tensors
    # grad_loss is a scalar: the whole backward is three scalings of what forward computed.
    # The loss is fp32 even for a bf16 head: scale, then return each gradient in its input's dtype.
    gx, gw = (grad_loss * grad_x).to(grad_x.dtype), (grad_loss * grad_w).to(grad_w.dtype)
    gb = (grad_loss * grad_b).to(grad_b.dtype) if ctx.has_bias else None
    return gx, gw, None, gb, None, None, None, None, None


linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)


def linear_cross_entropy(
    x: Tensor, weight: Tensor, target: Tensor, bias: Tensor | None = None, *,
    chunk_size: int | None = None, ignore_index: int = -100, label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """``F.cross_entropy(F.linear(x, weight, bias), target, ...)``, computed in row chunks.

    ``x`` is ``(N, C)`` (or ``(..., C)``, flattened), ``weight`` ``(V, C)``, ``target``
    ``(N,)`` int64 class ids, ``bias`` ``(V,)`` or None. ``chunk_size`` is rows per
    chunk (default: :func:`default_chunk_size`). ``ignore_index``, ``label_smoothing``
    and ``reduction`` (``"mean"`` or ``"sum"``) mean what they mean in ``F.cross_entropy``.

    Example::

        >>> x, w = torch.randn(8, 4), torch.randn(10, 4)
        >>> y = torch.randint(0, 10, (8,))
        >>> ref = torch.nn.functional.cross_entropy(x @ w.T, y)
        >>> torch.allclose(linear_cross_entropy(x, w, y, chunk_size=3), ref)
        True
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"linear_cross_entropy supports reduction in {_REDUCTIONS}, got {reduction!r}.\n"
            "Tip: per-row losses ('none') need the full (N, vocab) logits anyway; use F.cross_entropy."
        )
    x2 = x.reshape(-1, x.shape[-1])  # (N, C)
    t1 = target.reshape(-1)  # (N,)
    if weight.dim() != 2 or weight.shape[1] != x2.shape[1] or t1.shape[0] != x2.shape[0]:
        raise ValueError(
            f"linear_cross_entropy expects x (N, C), weight (V, C), target (N,); found x "
            f"{tuple(x.shape)}, weight {tuple(weight.shape)}, target {tuple(target.shape)}.\n"
            "Tip: pass the head's weight as stored by nn.Linear (out_features, in_features)."
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}.")
    if chunk_size is None:
        chunk_size = default_chunk_size(x2.shape[0], weight.shape[0], x2.shape[1])
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.\nTip: leave it None for the default.")
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, weight, bias)
    )
    device_type = x2.device.type
    if torch.is_autocast_enabled(device_type):
        # As autocast treats F.linear: the matmuls in the autocast dtype (the casts are
        # differentiable, so gradients come back in fp32). The op itself then runs with autocast
        # off, so eager and compiled graphs compute the same thing.
        dtype = torch.get_autocast_dtype(device_type)
        x2, weight = x2.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    with torch.autocast(device_type, enabled=False):
        loss, *_ = linear_cross_entropy_op(
            x2, weight, t1, bias, int(chunk_size), int(ignore_index), float(label_smoothing), reduction, needs_grad
        )
    return loss

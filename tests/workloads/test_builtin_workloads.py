"""Built-in workloads: determinism, epoch ordering, batch contracts, and a gpt-mini smoke training."""

from __future__ import annotations

import pytest
import torch

from torchsmith.workload import Workload, load_workload
from torchsmith.workloads import cnn_mini, gpt_mini, mlp

# Small knobs keep every build and forward pass well under a second on 2 cores.
FACTORIES = {
    "gpt-mini": lambda seed=0: gpt_mini.workload(seed, batches_per_epoch=4, eval_batches=2),
    "cnn-mini": lambda seed=0: cnn_mini.workload(seed, train_images=640, val_images=128),
    "mlp": lambda seed=0: mlp.workload(seed, train_rows=2048, val_rows=512),
}
EXPECTED = {  # name -> (x shape, x dtype, y shape, y dtype)
    "gpt-mini": ((16, 128), torch.int64, (16, 128), torch.int64),
    "cnn-mini": ((64, 3, 32, 32), torch.float32, (64,), torch.int64),
    "mlp": ((256, 32), torch.float32, (256, 4), torch.float32),
}


def first(w: Workload, epoch: int = 0):
    w.batches.set_epoch(epoch)
    return next(iter(w.iter_batches()))


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture(params=list(FACTORIES))
def name(request) -> str:
    return request.param


def test_name_and_throughput_fields(name):
    w = FACTORIES[name]()
    assert w.name == name
    assert w.samples_per_batch == EXPECTED[name][0][0]
    if name == "gpt-mini":
        assert w.tokens_per_batch == 16 * 128
    assert len(list(w.iter_eval_batches())) > 0


def test_same_seed_same_batches_and_params(name):
    a, b = FACTORIES[name](0), FACTORIES[name](0)
    assert same(first(a), first(b))
    assert same(next(iter(a.iter_eval_batches())), next(iter(b.iter_eval_batches())))
    torch.manual_seed(0)
    pa = a.model().state_dict()
    torch.manual_seed(0)
    pb = b.model().state_dict()
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def test_different_seed_different_batches(name):
    assert not same(first(FACTORIES[name](0)), first(FACTORIES[name](1)))


def test_iteration_does_not_touch_global_rng(name):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    w = FACTORIES[name]()
    list(w.iter_batches())
    assert torch.equal(torch.rand(3), expected)


def test_set_epoch_changes_order_deterministically(name):
    w = FACTORIES[name]()
    e0, e1 = first(w, 0), first(w, 1)
    assert not same(e0, e1)
    assert same(first(w, 1), e1) and same(first(w, 0), e0)
    # Re-iterable: two passes of the same epoch yield the same batches, and len matches.
    w.batches.set_epoch(2)
    one, two = list(w.iter_batches()), list(w.iter_batches())
    assert len(one) == len(w.batches) and all(same(p, q) for p, q in zip(one, two, strict=True))


def test_batch_shapes_dtypes_and_finite_loss(name):
    w = FACTORIES[name]()
    xs, xd, ys, yd = EXPECTED[name]
    x, y = first(w)
    assert (tuple(x.shape), x.dtype, tuple(y.shape), y.dtype) == (xs, xd, ys, yd)
    assert x.device.type == "cpu" and x.is_contiguous() and y.is_contiguous()
    torch.manual_seed(0)
    model = w.model()
    assert isinstance(model.blocks, (torch.nn.ModuleList, torch.nn.Sequential)) and len(model.blocks) >= 2
    loss = w.loss(model, (x, y))
    assert loss.dim() == 0 and torch.isfinite(loss)
    opt = w.optimizer(model.parameters())
    assert isinstance(opt, torch.optim.Optimizer)


def test_load_workload_resolves_builtins():
    assert load_workload("mlp").name == "mlp"


def test_gpt_param_count_and_hidden_matches_forward():
    w = FACTORIES["gpt-mini"]()
    torch.manual_seed(0)
    model = w.model()
    n = sum(p.numel() for p in model.parameters())
    assert 2_500_000 <= n <= 3_500_000, n
    assert isinstance(model.lm_head, torch.nn.Linear)
    assert all(type(b) is type(model.blocks[0]) for b in model.blocks)
    x, _ = first(w)
    with torch.no_grad():
        logits = model(x[:2])
        h = model.hidden(x[:2])
        assert h.shape == (2, 128, 256)
        torch.testing.assert_close(model.lm_head(h), logits)
    assert logits.shape == (2, 128, w.extras["vocab_size"])


def test_gpt_vocab_and_targets_are_shifted_by_one():
    w = gpt_mini.workload(0, batches_per_epoch=1, eval_batches=1, block_size=32)
    x, y = first(w)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < w.extras["vocab_size"] == len(w.extras["vocab"])


@pytest.mark.slow
def test_gpt_smoke_training_lowers_loss():
    # Default model, shorter windows: ~0.1 s a step on 2 cores.
    w = gpt_mini.workload(0, batches_per_epoch=30, block_size=64)
    torch.manual_seed(0)
    model = w.model()
    opt = w.optimizer(model.parameters())
    sched = w.scheduler(opt)
    losses = []
    for batch in w.iter_batches():
        loss = w.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    assert losses[0] > 3.8, losses  # ~ln(62) = 4.13 at init
    assert sum(losses[-5:]) / 5 < losses[0] - 0.8, losses

import torch
import torch.nn.functional as F

import torchsmith
from torchsmith.plan import MicroBatching, OptimizerImpl, Plan


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))


def _batches(n=5):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)) for _ in range(n)]


def loss_fn(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


def test_prepare_default_plan_matches_a_bare_loop_exactly():
    bare = _model()
    opt = torch.optim.AdamW(bare.parameters(), lr=1e-2)
    bare_losses = []
    for b in _batches():
        loss = loss_fn(bare, b)
        loss.backward()
        opt.step()
        opt.zero_grad()
        bare_losses.append(loss.item())

    model = _model()
    step = torchsmith.prepare(Plan(), model, torch.optim.AdamW(model.parameters(), lr=1e-2), loss_fn)
    losses = [step(b).item() for b in _batches()]
    assert losses == bare_losses
    for p, q in zip(model.parameters(), bare.parameters(), strict=True):
        assert torch.equal(p, q)


def test_gradients_equal_a_bare_backward():
    bare, model = _model(), _model()
    batch = _batches(1)[0]
    loss_fn(bare, batch).backward()
    captured = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    step = torchsmith.prepare(Plan(optimizer=OptimizerImpl(set_to_none=False)), model, opt, loss_fn)
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: captured.__setitem__(name, p.grad.clone()))
    step(batch)
    for name, p in bare.named_parameters():
        torch.testing.assert_close(captured[name], p.grad, rtol=0, atol=0)


def test_microbatching_accumulates_the_full_batch_gradient():
    full, micro = _model(), _model()
    batch = _batches(1)[0]
    grads = {}
    for model, plan in ((full, Plan()), (micro, Plan(microbatching=MicroBatching(count=4)))):
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        step = torchsmith.prepare(plan, model, opt, loss_fn)
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, key=(id(model), name): grads.__setitem__(key, p.grad.clone()))
        loss = step(batch)
        if model is full:
            full_loss = loss
        else:
            torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
    for name, _ in full.named_parameters():
        torch.testing.assert_close(grads[(id(micro), name)], grads[(id(full), name)], rtol=1e-5, atol=1e-6)


def test_step_revert_restores_the_optimizer_flags():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [dict(g) for g in opt.param_groups]
    step = torchsmith.prepare(Plan(optimizer=OptimizerImpl(impl="foreach")), model, opt, loss_fn)
    assert all(g["foreach"] is True for g in opt.param_groups)
    step.revert()
    assert [g["foreach"] for g in opt.param_groups] == [b["foreach"] for b in before]


def test_forward_backward_then_optimizer_step_is_the_whole_step():
    # The two halves debug nan uses, with micro-batches and a schedule: the same losses and
    # parameters as step(batch), bit for bit.
    def prepared():
        model = _model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return model, torchsmith.prepare(Plan(microbatching=MicroBatching(count=2)), model, opt, loss_fn,
                                         scheduler=sched)

    whole_model, whole = prepared()
    whole_losses = [whole(b).item() for b in _batches()]
    split_model, split = prepared()
    split_losses = []
    for b in _batches():
        split_losses.append(split.forward_backward(b).item())
        assert all(p.grad is not None for p in split_model.parameters())  # accumulated, not yet applied
        split.optimizer_step()
        assert all(p.grad is None for p in split_model.parameters())  # zero_grad(set_to_none) ran
    assert split_losses == whole_losses
    assert split.optimizer.param_groups[0]["lr"] == whole.optimizer.param_groups[0]["lr"] == 1e-2 * 0.5 ** 5
    for p, q in zip(split_model.parameters(), whole_model.parameters(), strict=True):
        assert torch.equal(p, q)

"""Plan.loss_impl: the chunked head + loss trains exactly like the loss as written, on less memory."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.engine.step import prepare
from torchsmith.measure.memory import track_peak_memory
from torchsmith.plan import Autocast, BF16Params, CompressSaved, LossImpl, MicroBatching, Plan
from torchsmith.transforms.base import TransformError
from torchsmith.transforms.loss_impl import apply_loss_impl
from torchsmith.transforms.parts import StepParts
from torchsmith.workloads.gpt_mini import GPT, GPTConfig, gpt_loss

CHUNKED = LossImpl(impl="chunked", chunk_size=48)


def _gpt(vocab=62, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=32, n_layer=1, n_head=2, n_embd=64))


def _batches(vocab=62, n=3, b=4, t=32):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, vocab, (b, t), generator=g), torch.randint(0, vocab, (b, t), generator=g))
            for _ in range(n)]


def _train(plan, batches, vocab=62):
    model = _gpt(vocab)
    # SGD, not Adam: Adam divides by sqrt(v), which blows float noise on parameters whose true
    # gradient is zero (the key bias: softmax ignores it) up to a full-size update.
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    step = prepare(plan, model, opt, gpt_loss)
    losses = [step(b).item() for b in batches]
    return model, step, losses


def test_chunked_trains_like_standard():
    batches = _batches()
    m0, _, ref = _train(Plan(), batches)
    m1, step, got = _train(Plan(loss_impl=CHUNKED), batches)
    assert got == pytest.approx(ref, rel=1e-5)
    for (name, a), b in zip(m1.named_parameters(), m0.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    assert any("chunked" in line for line in step.describe())


def test_head_keeps_its_identity_and_reverts():
    model = _gpt()
    keys = list(model.state_dict())
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=gpt_loss, device=torch.device("cpu"))
    x, y = _batches(n=1)[0]
    change = apply_loss_impl(parts, CHUNKED)
    assert isinstance(model.lm_head, nn.Linear) and list(model.state_dict()) == keys
    assert model(x).shape == (4, 32, 62)  # outside the chunked loss, forward still returns logits
    torch.testing.assert_close(parts.loss_fn(model, (x, y)), gpt_loss(model, (x, y)))
    with pytest.raises(TransformError, match="already applied"):
        apply_loss_impl(parts, CHUNKED)
    change.revert()
    assert type(model.lm_head) is nn.Linear and parts.loss_fn is gpt_loss
    apply_loss_impl(parts, CHUNKED).revert()  # applies again after a revert


def test_refuses_a_model_without_a_linear_head():
    model = nn.Sequential(nn.Embedding(8, 4), nn.ReLU())
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=lambda m, b: F.cross_entropy(m(b[0]), b[1]), device=torch.device("cpu"))
    with pytest.raises(TransformError, match=r"output head.*nn.Linear.*Sequential has no nn.Linear head"):
        apply_loss_impl(parts, CHUNKED)
    assert apply_loss_impl(parts, LossImpl()).summary.startswith("standard")  # the default does nothing


def test_first_batch_check_catches_a_different_loss():
    model = _gpt()
    scaled = lambda m, b: F.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten()) * 1.5
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=scaled, device=torch.device("cpu"))
    apply_loss_impl(parts, CHUNKED)
    with pytest.raises(TransformError, match=r"(?s)loss as written gives .*Tip: keep loss_impl='standard'"):
        parts.loss_fn(model, _batches(n=1)[0])


def test_refuses_batches_that_are_not_inputs_and_targets():
    model = _gpt()
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=gpt_loss, device=torch.device("cpu"))
    apply_loss_impl(parts, CHUNKED)
    with pytest.raises(TransformError, match=r"dict batches only for Hugging Face causal LMs.*found GPT and a dict"):
        parts.loss_fn(model, {"x": torch.zeros(2, 4, dtype=torch.long)})


def _step_peak(plan, vocab):
    model = _gpt(vocab)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = prepare(plan, model, opt, gpt_loss)
    batches = _batches(vocab, n=2, b=8)
    step(batches[0])  # warm-up (and the chunked loss's one-time check)
    with track_peak_memory("cpu", live=(model, opt)) as mem:
        step(batches[1])
    return mem.result.peak_delta_bytes


def test_chunked_cuts_step_peak_memory_at_large_vocab():
    # vocab 16384 >> width 64: the step's (256 tokens x 16384) fp32 logits are 16 MiB each.
    standard = _step_peak(Plan(), 16384)
    chunked = _step_peak(Plan(loss_impl=LossImpl(impl="chunked", chunk_size=32)), 16384)
    assert chunked <= 0.6 * standard, (chunked, standard)


@pytest.mark.parametrize("knob", [dict(precision=BF16Params()), dict(precision=Autocast()),
                                  dict(microbatching=MicroBatching(count=2)), dict(saved_tensors=CompressSaved())],
                         ids=["bf16_params", "autocast", "microbatching", "compress_saved"])
def test_chunked_composes_with_other_knobs(knob):
    batches = _batches(vocab=500)
    _, _, ref = _train(Plan(**knob), batches, vocab=500)
    _, _, got = _train(Plan(loss_impl=CHUNKED, **knob), batches, vocab=500)
    assert got == pytest.approx(ref, rel=1e-4)


def test_regression_targets_make_the_plan_not_applicable_not_failed():
    # mlp's loss is MSE against float targets: the chunked op's check on the first batch refuses, and the
    # measurement says refused (tune's "n/a"), naming the targets, instead of a failed candidate.
    from torchsmith.harness.compare import measure_plans
    from torchsmith.workload import load_workload

    _, chunked = measure_plans(load_workload("mlp"), [Plan(), Plan(loss_impl=CHUNKED)], warmup=0, steps=1,
                               device="cpu", measure_memory=False)
    assert chunked.refused and chunked.step_seconds is None
    assert "targets are float32 of shape (256, 4)" in chunked.error  # the first line: what a table shows

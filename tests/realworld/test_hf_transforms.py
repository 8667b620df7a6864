"""Every knob on the hf-* workloads (tiny configs): it applies, or says why not, and a plan that applies
trains within the tune guard's loss tolerance of the plan as written, over the same seed and batches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from torchsmith.engine.loop import build_step  # noqa: E402
from torchsmith.engine.registry import registered_transforms  # noqa: E402
from torchsmith.plan import BF16Params, CheckpointBlocks, Compile, LossImpl, MicroBatching, Plan, SelectiveCheckpoint  # noqa: E402
from torchsmith.transforms.base import DeviceInfo, TransformError  # noqa: E402
from torchsmith.transforms.loss_impl import apply_loss_impl  # noqa: E402
from torchsmith.transforms.parts import StepParts  # noqa: E402
from torchsmith.tuner.guard import GuardConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "workloads"))
from test_hf_workloads import TINY  # noqa: E402

CPU = torch.device("cpu")
LMS = ("hf-gpt2", "hf-llama")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: steadier on 2 shared cores


def _knobs() -> list[tuple[str, object]]:
    device = DeviceInfo(type="cpu", cores=2, native_bf16=False)
    return [(info.plan_field, value) for info in registered_transforms().values()
            if info.plan_field not in ("compile", "threads", "loader")  # compile: the slow test below
            for value in info.candidates(device)]


# Knobs that do not apply to a workload, for a reason the error names.
NOT_APPLICABLE = {
    ("inplace", "hf-gpt2"): "no activation module", ("inplace", "hf-llama"): "no activation module",
    ("inplace", "hf-vit"): "no activation module", ("inplace", "hf-resnet"): "cannot be trac",
    ("memory_format", "hf-gpt2"): "no Conv2d", ("memory_format", "hf-llama"): "no Conv2d",
    ("loss_impl", "hf-vit"): "only for causal LMs", ("loss_impl", "hf-resnet"): "only for causal LMs",
}


def _losses(workload, plan: Plan) -> list[float]:
    step = build_step(workload, plan, CPU)
    return [step(b).item() for b in workload.iter_batches()]


@pytest.mark.parametrize("field, value", _knobs(), ids=lambda v: repr(v)[:40])
@pytest.mark.parametrize("name", list(TINY))
def test_knob_applies_and_trains_within_the_guard(name, field, value):
    workload = TINY[name]()
    plan = Plan().replace(**{field: value})
    reason = NOT_APPLICABLE.get((field, name))
    if reason:
        with pytest.raises(TransformError, match=reason):
            _losses(workload, plan)
        return
    if name == "hf-resnet" and isinstance(value, MicroBatching):
        pytest.skip("BatchNorm normalises over each micro-batch, so the loss differs; the guard rejects it")
    want, got = _losses(workload, Plan()), _losses(workload, plan)
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want, strict=True))
    assert worst <= GuardConfig().loss_rtol, (got, want)


def test_gpt2_tie_survives_bf16_parameters():
    workload = TINY["hf-gpt2"]()
    step = build_step(workload, Plan(precision=BF16Params()), CPU)
    model = step.model
    keys = list(model.state_dict())
    for batch in workload.iter_batches():
        step(batch)
    assert model.lm_head.weight is model.transformer.wte.weight  # one tensor, as written
    assert model.lm_head.weight.dtype == torch.float32  # ... and it is its own fp32 master
    assert model.transformer.h[0].attn.c_attn.weight.dtype == torch.bfloat16  # Conv1D converted
    assert list(model.state_dict()) == keys
    masters = {id(p) for g in step.optimizer.param_groups for p in g["params"]}
    assert id(model.transformer.wte.weight) in masters and len(masters) == len(list(workload.model().parameters()))
    step.revert()
    assert model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize("name", LMS)
def test_chunked_loss_matches_the_models_loss_and_gradients(name):
    workload = TINY[name]()
    batch = next(iter(workload.iter_batches()))
    batch["labels"][0, :5] = -100  # ignored positions count as the model's own loss counts them

    def fresh():
        torch.manual_seed(0)
        return workload.model()

    ref = fresh()
    want = ref(**batch).loss
    want.backward()
    model = fresh()
    parts = StepParts(model=model, optimizer=workload.optimizer(model.parameters()), loss_fn=workload.loss,
                      device=CPU)
    change = apply_loss_impl(parts, LossImpl(impl="chunked", chunk_size=8))
    got = parts.loss_fn(model, batch)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    ref_grads = dict(ref.named_parameters())
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n].grad, rtol=1e-4, atol=1e-6, msg=n)
    assert change.targets == ["lm_head"]
    # Outside the step's loss, the head still computes logits.
    assert model(input_ids=batch["input_ids"]).logits.shape[-1] == model.config.vocab_size


def test_selective_checkpointing_keeps_resnet_batchnorm_statistics():
    workload = TINY["hf-resnet"]()
    stats = []
    plans = (Plan(), Plan(checkpointing=SelectiveCheckpoint(every=1)), Plan(checkpointing=CheckpointBlocks(every=1)))
    for plan in plans:
        step = build_step(workload, plan, CPU)
        for batch in workload.iter_batches():
            step(batch)
        stats.append({k: v.clone() for k, v in step.model.state_dict().items() if "running" in k})
    for other in stats[1:]:
        for k in stats[0]:
            torch.testing.assert_close(other[k], stats[0][k], rtol=1e-4, atol=1e-6, msg=k)


@pytest.mark.parametrize("name", LMS)
def test_microbatching_splits_dict_batches_with_the_full_batch_gradient(name):
    workload = TINY[name]()
    batch = next(iter(workload.iter_batches()))
    grads = []
    for plan in (Plan(), Plan(microbatching=MicroBatching(count=2))):
        step = build_step(workload, plan, CPU)
        step.optimizer.step = lambda *a, **k: None  # keep the gradients for the comparison
        step.optimizer.zero_grad = lambda *a, **k: None
        step(batch)
        grads.append({n: p.grad.clone() for n, p in step.model.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf-gpt2", "hf-resnet"])
def test_regional_compile_on_discovered_blocks(name):
    torch._dynamo.reset()
    workload = TINY[name]()
    step = build_step(workload, Plan(compile=Compile(enabled=True, regional=True)), CPU)
    assert any("2 blocks" in d for d in step.describe())
    got = [step(b).item() for b in workload.iter_batches()]
    want = _losses(workload, Plan())
    assert max(abs(g - w) / abs(w) for g, w in zip(got, want, strict=True)) <= GuardConfig().loss_rtol
    compiled = [m for m in step.model.modules() if m._compiled_call_impl is not None]
    assert len(compiled) == 2


def test_split_batch_splits_every_tensor_of_a_dict_and_keeps_the_rest():
    from torchsmith.batch import split_batch

    batch = {"task": "lm", "input_ids": torch.arange(12).view(6, 2), "labels": torch.arange(12).view(6, 2)}
    parts = split_batch(batch, 3)
    assert [p["input_ids"].shape[0] for p in parts] == [2, 2, 2] and all(p["task"] == "lm" for p in parts)
    assert torch.equal(torch.cat([p["labels"] for p in parts]), batch["labels"])

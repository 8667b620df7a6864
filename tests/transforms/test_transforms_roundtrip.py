"""Every transform: revert restores state dict and structure exactly; a second application is
refused or changes nothing (never a double wrap)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from transforms_helpers import (  # noqa: F401 (one_thread: autouse fixture)
    assert_state_equal,
    cnn_batch,
    cnn_loss,
    gpt_batch,
    gpt_loss,
    one_thread,
    state,
    structure,
    tiny_cnn,
    tiny_gpt,
)

from torchsmith.engine.registry import registered_transforms
from torchsmith.engine.step import train_step
from torchsmith.plan import (
    Autocast,
    BF16Params,
    CheckpointBlocks,
    Compile,
    CompressSaved,
    InPlace,
    LossImpl,
    MemoryFormat,
    MicroBatching,
    OptimizerImpl,
    SelectiveCheckpoint,
    Threads,
)
from torchsmith.transforms.activation_checkpoint import apply_checkpointing
from torchsmith.transforms.base import TransformError
from torchsmith.transforms.compile import apply_compile
from torchsmith.transforms.inplace import apply_inplace
from torchsmith.transforms.loss_impl import apply_loss_impl
from torchsmith.transforms.memory_format import apply_memory_format
from torchsmith.transforms.microbatching import apply_microbatching
from torchsmith.transforms.optimizer_impl import apply_optimizer_impl
from torchsmith.transforms.parts import StepParts
from torchsmith.transforms.precision import apply_precision
from torchsmith.transforms.saved_tensors import apply_saved_tensors
from torchsmith.transforms.threads import apply_threads


def conv_relu_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3),
                         nn.Flatten(), nn.LazyLinear(10) if False else nn.Linear(4 * 14 * 14, 10))


def _parts(model: nn.Module, loss_fn) -> StepParts:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return StepParts(model=model, optimizer=opt, loss_fn=loss_fn, device=torch.device("cpu"))


GPT_CASE = (tiny_gpt, gpt_loss, gpt_batch)
CNN_CASE = (tiny_cnn, cnn_loss, cnn_batch)
CONV_CASE = (conv_relu_net, cnn_loss, cnn_batch)

# name -> (model case, apply(parts) -> Change)
CASES = {
    "checkpoint_all": (GPT_CASE, lambda p: apply_checkpointing(p.model, CheckpointBlocks(every=1))),
    "checkpoint_every2": (GPT_CASE, lambda p: apply_checkpointing(p.model, CheckpointBlocks(every=2))),
    "checkpoint_selective": (GPT_CASE, lambda p: apply_checkpointing(p.model, SelectiveCheckpoint(every=1))),
    "compile_regional": (GPT_CASE, lambda p: apply_compile(p.model, Compile(enabled=True, regional=True),
                                                           recover=p.recover, backend="eager")),
    "compile_whole": (GPT_CASE, lambda p: apply_compile(p.model, Compile(enabled=True), recover=p.recover,
                                                        backend="eager")),
    "channels_last": (CNN_CASE, lambda p: apply_memory_format(p.model, MemoryFormat(channels_last=True))),
    "inplace": (CONV_CASE, lambda p: apply_inplace(p.model, InPlace(activations=True))),
    "bf16_params": (GPT_CASE, lambda p: apply_precision(p, BF16Params())),
    "bf16_params_cnn": (CNN_CASE, lambda p: apply_precision(p, BF16Params())),
    "autocast": (GPT_CASE, lambda p: apply_precision(p, Autocast(dtype="bfloat16"))),
    "compress_saved": (GPT_CASE, lambda p: apply_saved_tensors(p, CompressSaved(dtype="bfloat16"))),
    "microbatching": (GPT_CASE, lambda p: apply_microbatching(p, MicroBatching(count=2))),
    "optimizer_foreach": (GPT_CASE, lambda p: apply_optimizer_impl(p.optimizer, OptimizerImpl(impl="foreach"))),
    "optimizer_fused": (GPT_CASE, lambda p: apply_optimizer_impl(p.optimizer, OptimizerImpl(impl="fused"))),
    "loss_impl_chunked": (GPT_CASE, lambda p: apply_loss_impl(p, LossImpl(impl="chunked"))),
}

COMPILES = {"compile_regional", "compile_whole"}
"""The cases that call torch.compile (seconds even with backend="eager"): slow, as tests/spawn_guard.py asks."""
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n in COMPILES else n for n in sorted(CASES)]


def _step_fields(parts: StepParts) -> dict:
    fields = {f.name: getattr(parts, f.name) for f in dataclasses.fields(parts)}
    fields["forward_contexts"] = list(parts.forward_contexts)
    fields["recover"] = list(parts.recover)
    fields["param_groups"] = [{k: v for k, v in g.items() if k != "params"} for g in parts.optimizer.param_groups]
    fields["optimizer_params"] = [id(p) for g in parts.optimizer.param_groups for p in g["params"]]
    return fields


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_restores_state_and_structure(name):
    (make, loss_fn, make_batch), apply = CASES[name]
    model = make().eval()  # eval: batch norm statistics must not move, so any change is the transform's
    parts = _parts(model, loss_fn)
    batch = make_batch()
    before_state, before_structure, before_fields = state(model), structure(model), _step_fields(parts)
    change = apply(parts)
    assert change.targets, f"{name} reported no targets"
    loss_fn(model, batch).backward()  # the transformed model is actually used, hooks fire
    model.zero_grad(set_to_none=True)
    change.revert()
    assert structure(model) == before_structure
    assert_state_equal(before_state, model)
    after_fields = _step_fields(parts)
    assert after_fields.keys() == before_fields.keys()
    for key, value in before_fields.items():
        if key != "optimizer":
            assert after_fields[key] == value, key
    change.revert()  # reverting twice does nothing
    assert structure(model) == before_structure


@pytest.mark.parametrize("name", NAMES)
def test_second_application_is_refused_or_a_no_op(name):
    (make, loss_fn, make_batch), apply = CASES[name]
    model = make().eval()
    parts = _parts(model, loss_fn)
    first = apply(parts)
    once_structure, once_fields = structure(model), _step_fields(parts)
    try:
        second = apply(parts)
    except TransformError as err:
        assert "Tip:" in str(err)
        assert structure(model) == once_structure  # a refusal leaves nothing half-applied
    else:
        # Accepted only as a no-op: nothing wrapped or added twice.
        assert structure(model) == once_structure
        fields = _step_fields(parts)
        assert len(fields["forward_contexts"]) == len(once_fields["forward_contexts"])
        assert len(fields["recover"]) == len(once_fields["recover"])
        assert fields["autocast"] == once_fields["autocast"] or name == "autocast"
        second.revert()
    loss_fn(model, make_batch()).backward()
    first.revert()


def test_threads_round_trip():
    before = torch.get_num_threads()
    change = apply_threads(Threads(intra_op=before + 1))
    assert torch.get_num_threads() == before + 1
    change.revert()
    assert torch.get_num_threads() == before


def test_train_step_with_transforms_then_revert_keeps_trained_values():
    """After real optimizer steps, revert keeps what was learned (bf16 masters, channels_last data)."""
    model = tiny_cnn().train()
    parts = _parts(model, cnn_loss)
    changes = [apply_memory_format(model, MemoryFormat(channels_last=True)), apply_precision(parts, BF16Params())]
    for _ in range(2):
        train_step(parts, cnn_batch())
    trained = state(model)
    for c in reversed(changes):
        c.revert()
    after = model.state_dict()
    for k, v in trained.items():
        assert after[k].dtype == v.dtype and torch.equal(after[k], v), k
    assert all(p.is_contiguous() for p in model.parameters())


def test_every_plan_transform_registers_candidates():
    from torchsmith.transforms.base import DeviceInfo

    infos = registered_transforms()
    for name in ("threads", "precision", "compile", "checkpointing", "saved_tensors", "optimizer",
                 "microbatching", "memory_format", "inplace", "loss_impl", "loader"):
        assert name in infos, name
        cands = infos[name].candidates(DeviceInfo(type="cpu", cores=2))
        assert cands, name
        from torchsmith.plan import Plan
        for c in cands:
            Plan().replace(**{infos[name].plan_field: c})  # every candidate is a valid plan value
    cuda = infos["saved_tensors"].candidates(DeviceInfo(type="cuda", cores=8))
    assert any(c.kind == "offload" for c in cuda)
    assert not any(c.kind == "offload" for c in infos["saved_tensors"].candidates(DeviceInfo(type="cpu")))

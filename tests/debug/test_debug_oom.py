"""OOM explainer and Plan.auto_microbatch, with an injected CPU allocation failure."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchsmith
from torchsmith.debug.oom import OOMError, explain_oom, is_oom
from torchsmith.engine.step import prepare
from torchsmith.plan import MicroBatching, Plan


def _cpu_oom(n: int) -> RuntimeError:
    # The message c10's DefaultCPUAllocator raises on a failed allocation.
    return RuntimeError(f"[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                        f"you tried to allocate {n} bytes.")


class _Limited(nn.Module):
    """An MLP that 'runs out of memory' when a pass holds more than ``limit`` samples."""

    def __init__(self, limit: int | None):
        super().__init__()
        self.limit = limit
        self.calls: list[int] = []
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 1)

    def forward(self, x):
        self.calls.append(x.shape[0])
        h = torch.tanh(self.fc1(x))  # (B, 32): an activation saved for backward
        if self.limit is not None and x.shape[0] > self.limit:
            raise _cpu_oom(x.shape[0] * 1 << 20)
        return self.fc2(h)


def _mse(m, b):
    return F.mse_loss(m(b[0]), b[1])


def _setup(limit, plan):
    torch.manual_seed(0)
    model = _Limited(limit)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, prepare(plan, model, opt, _mse)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)) for _ in range(3)]


def test_auto_microbatch_gradients_equal_a_run_at_the_smaller_microbatch():
    model, step = _setup(4, Plan(auto_microbatch=True))
    ref_model, ref_step = _setup(None, Plan(microbatching=MicroBatching(count=4)))
    grads, ref_grads = [], []
    step.optimizer.register_step_pre_hook(lambda o, a, k: grads.append([p.grad.clone() for p in model.parameters()]))
    ref_step.optimizer.register_step_pre_hook(
        lambda o, a, k: ref_grads.append([p.grad.clone() for p in ref_model.parameters()]))
    with pytest.warns(RuntimeWarning, match="auto_microbatch"):
        for b in _batches():
            step(b)
    for b in _batches():
        ref_step(b)
    assert step.parts.microbatches == 4
    assert model.calls[:3] == [16, 8, 4]  # failed at 16 and at 8 samples, then 4 micro-batches of 4
    for g, r in zip(grads, ref_grads, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(g, r, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters(), strict=True))


def test_microbatch_of_one_sample_raises_a_clear_error():
    model, step = _setup(0, Plan(auto_microbatch=True))  # even one sample is too many
    with pytest.warns(RuntimeWarning), pytest.raises(OOMError, match="micro-batch size 1 .*16 micro-batches"):
        step(_batches()[0])


def test_non_oom_errors_pass_through_unchanged():
    model, step = _setup(None, Plan(auto_microbatch=True))
    boom = ValueError("not a memory problem")

    def fail(*a):
        raise boom

    model.fc2.register_forward_pre_hook(fail)
    with pytest.raises(ValueError) as info:
        step(_batches()[0])
    assert info.value is boom and step.parts.microbatches == 1 and not getattr(boom, "__notes__", None)


def test_explain_oom_splits_memory_and_ranks_fixes():
    assert torchsmith.explain_oom is explain_oom
    model, step = _setup(4, Plan())
    step((torch.randn(4, 8), torch.randn(4, 1)))  # AdamW state exists now
    x = (torch.randn(64, 8), torch.randn(64, 1))
    with pytest.raises(RuntimeError) as info, explain_oom(model, step.optimizer) as oom:
        _mse(model, x).backward()
    assert is_oom(info.value)
    report = oom.report
    n_params = sum(p.numel() * 4 for p in model.parameters())
    assert report.params == n_params and report.optimizer_state >= 2 * n_params
    assert report.activations >= 64 * 32 * 4  # at least the (64, 32) hidden activation of the failing pass
    assert report.requested_bytes == 64 << 20
    assert [f.saving_bytes for f in report.fixes] == sorted((f.saving_bytes for f in report.fixes), reverse=True)
    assert {f.name for f in report.fixes} >= {"micro-batching x2", "activation checkpointing",
                                              "saved-tensor compression", "bf16 autocast"}
    assert "empty_cache() does not help" in "\n".join(info.value.__notes__)
    assert any(t.what == "param fc1.weight" for t in report.largest)
    # tanh saves its (64, 32) output for backward: found through the autograd graph of the failing frame.
    assert any(t.what == "saved for backward" and t.shape == [64, 32] for t in report.largest)


def test_engine_attaches_the_explanation_without_auto_microbatch():
    model, step = _setup(4, Plan())
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator") as info:
        step(_batches()[0])
    assert "torchsmith OOM explanation" in "\n".join(info.value.__notes__)
    assert info.value.torchsmith_oom.activations > 0

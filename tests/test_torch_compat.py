"""One test per torch-internal shim: a torch upgrade that moves an internal fails here, by name."""

import torch
from torch import nn

from torchsmith import torch_compat as tc


def test_storage_key_is_shared_by_views_and_differs_between_storages():
    a = torch.zeros(8)
    assert tc.storage_key(a) == tc.storage_key(a[2:]) == tc.storage_key(a.view(2, 4))
    assert tc.storage_key(a) != tc.storage_key(a.clone())


def test_current_autograd_node_and_in_backward():
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            seen.append((tc.current_autograd_node() is not None, tc.in_backward()))
            return g * 2

    assert tc.current_autograd_node() is None and not tc.in_backward()
    Probe.apply(torch.ones(2, requires_grad=True)).sum().backward()
    assert seen == [(True, True)]


def test_profiler_running_and_event_tree_with_allocations():
    assert not tc.profiler_running()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        assert tc.profiler_running()
        torch.ones(1024) + 1
    roots, event_type = tc.profiler_event_tree(prof)
    stack, tags = list(roots), set()
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        tags.add(ev.tag)
    assert event_type.Allocation in tags


def test_compile_seconds_and_errors_are_readable():
    assert tc.compile_seconds(("no such phase",)) == 0.0
    assert all(issubclass(e, BaseException) for e in tc.compile_errors())


def test_set_compiled_call_routes_calls_and_reverts_to_eager():
    m = nn.Linear(2, 2)
    assert tc.compiled_call(m) is None
    tc.set_compiled_call(m, lambda *a, **k: "compiled")
    assert m(torch.ones(2)) == "compiled" and tc.compiled_call(m) is not None
    tc.set_compiled_call(m, None)
    assert isinstance(m(torch.ones(2)), torch.Tensor) and tc.compiled_call(m) is None
    assert list(m.state_dict()) == ["weight", "bias"]


def test_unwrapped_name_drops_wrapper_components():
    assert tc.unwrapped_name("_orig_mod.blocks.0._checkpoint_wrapped_module.attn") == "blocks.0.attn"

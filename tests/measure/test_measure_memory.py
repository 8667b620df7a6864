"""Peak memory: exact against allocations of known size, and sane on a training step."""

import pytest
import torch
from torch import nn

from torchsmith.measure.memory import (
    CPU_METHOD,
    MemoryTrackingError,
    memory_split,
    tensor_bytes,
    track_peak_memory,
)

MiB = 1 << 20
SLACK = 4096  # scalar wrappers and the like: a few bytes, never KiB


def _bytes(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8)


def test_cpu_peak_of_known_allocations():
    with track_peak_memory("cpu") as mem:
        a = _bytes(4 * MiB)
        b = _bytes(8 * MiB)
        del a
        c = _bytes(2 * MiB)
    r = mem.result
    assert r.method == CPU_METHOD and r.device == "cpu"
    assert r.start_bytes == 0
    assert 12 * MiB <= r.peak_bytes <= 12 * MiB + SLACK
    assert 10 * MiB <= r.end_bytes <= 10 * MiB + SLACK
    assert r.peak_delta_bytes == r.peak_bytes
    del b, c


def test_live_at_start_counts_until_freed_inside():
    held = _bytes(4 * MiB)
    with track_peak_memory("cpu", live=[held]) as mem:
        big = _bytes(8 * MiB)  # 12 MiB live
        del held  # its allocation predates the region; it must still stop counting
        small = _bytes(2 * MiB)  # 10 MiB live
    r = mem.result
    assert r.start_bytes == 4 * MiB
    assert 12 * MiB <= r.peak_bytes <= 12 * MiB + SLACK
    assert 10 * MiB <= r.end_bytes <= 10 * MiB + SLACK
    assert 8 * MiB <= r.peak_delta_bytes <= 8 * MiB + SLACK
    del big, small


def test_temporaries_freed_inside_do_not_raise_end():
    x = torch.randn(256, 256)
    with track_peak_memory("cpu", live=[x]) as mem:
        y = (x * 2 + 1).sum()  # (256, 256) temporaries, freed at once
    r = mem.result
    assert r.peak_delta_bytes >= 256 * 256 * 4  # at least one temporary was live
    assert r.end_bytes - r.start_bytes <= SLACK  # only the scalar result survives
    del y


def test_training_step_peak_above_params_and_grads():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # creates grads and Adam state, so the tracked step is a steady one
    split = memory_split(model, opt)
    with track_peak_memory("cpu", live=(model, opt)) as mem:
        step()
    r = mem.result
    assert r.start_bytes == split.total
    assert r.peak_bytes > split.params + split.grads
    # Steady state: grads freed by zero_grad and recreated by backward, Adam state
    # updated in place, so the step ends where it started.
    assert abs(r.end_bytes - r.start_bytes) <= SLACK
    # The grads are recreated while the activations for backward are still live.
    assert r.peak_delta_bytes >= split.grads + 32 * 256 * 4


def test_tensor_bytes_counts_shared_storage_once():
    a = torch.zeros(1000)
    assert tensor_bytes([a, a[10:], a.view(10, 100), {"k": a}]) == 4000
    assert tensor_bytes([a, torch.zeros(10, dtype=torch.float64)]) == 4080


def test_memory_split_of_linear_and_adam():
    layer = nn.Linear(100, 50)
    opt = torch.optim.Adam(layer.parameters())
    params = (100 * 50 + 50) * 4
    assert memory_split(layer, opt).total == params  # no grads, no state yet
    layer(torch.randn(4, 100)).sum().backward()
    opt.step()
    split = memory_split(layer, opt)
    assert split.params == params and split.grads == params
    # exp_avg + exp_avg_sq per parameter, plus one scalar `step` tensor each.
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    assert split.optimizer_state == 2 * params + steps
    assert tensor_bytes(layer) == 2 * params  # a module's bytes include its grads


def test_result_before_exit_explains():
    with track_peak_memory("cpu") as mem:
        with pytest.raises(MemoryTrackingError, match="Tip:"):
            mem.result  # noqa: B018 - the property access is what raises


def test_refuses_to_nest_in_a_profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(MemoryTrackingError, match="Tip:"):
            with track_peak_memory("cpu"):
                pass


def test_exception_inside_region_stops_profiler():
    with pytest.raises(ZeroDivisionError):
        with track_peak_memory("cpu"):
            1 / 0  # noqa: B018 - raises inside the region on purpose
    assert not torch.autograd.profiler._is_profiler_enabled
    with track_peak_memory("cpu") as mem:  # usable again
        t = _bytes(MiB)
    assert mem.result.peak_bytes >= MiB
    del t


def test_unsupported_device_explains():
    with pytest.raises(MemoryTrackingError, match="Tip:"):
        track_peak_memory("meta")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_of_known_allocations():
    dev = torch.device("cuda")
    with track_peak_memory(dev) as mem:
        a = torch.empty(4 * MiB, dtype=torch.uint8, device=dev)
        b = torch.empty(8 * MiB, dtype=torch.uint8, device=dev)
        del a
    r = mem.result
    assert r.peak_delta_bytes == 12 * MiB
    assert r.end_bytes - r.start_bytes == 8 * MiB
    del b


def test_tensor_bytes_refuses_unknown_objects():
    with pytest.raises(TypeError, match="Tip:"):
        tensor_bytes("model")
    assert tensor_bytes({"step": 3, "t": torch.zeros(2)}) == 8  # non-tensors inside are skipped


@pytest.mark.slow
def test_sees_allocations_of_compiled_code():
    # The reason for the profiler method: Inductor's generated code allocates its
    # buffers straight from the CPU allocator, which a dispatch mode would not see.
    @torch.compile
    def f(x):
        y = x.sin() * 2
        return y.cos() @ y

    x = torch.randn(512, 512)
    f(x)  # compile outside the region
    with track_peak_memory("cpu") as mem:
        out = f(x)
    buf = 512 * 512 * 4
    assert mem.result.peak_delta_bytes >= 2 * buf  # at least y and the result at once
    assert mem.result.end_bytes >= buf
    del out


@pytest.mark.parametrize("as_view", [False, True])
def test_ddp_gradient_buckets_count_toward_the_cpu_peak(one_rank_group, as_view):
    """DDP's buckets are allocated in its C++ reducer, out of reach of the tensors `live` names:
    without a bucket view they hold a second copy of every gradient, counted once either way."""
    from torch.nn.parallel import DistributedDataParallel

    from torchsmith.measure.memory import ddp_bucket_bytes

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=as_view)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.randn(8, 512)
    for _ in range(2):  # after the first step: grads exist (views into the buckets, with as_view)
        opt.zero_grad(set_to_none=False)
        ddp(x).sum().backward()
        opt.step()
    assert ddp_bucket_bytes([ddp, opt]) == (0 if as_view else params)  # with a view, the grads show them
    opt.zero_grad(set_to_none=True)
    assert ddp_bucket_bytes({"model": ddp, "again": [ddp]}) == params  # no grads: DDP's count shows them, once
    with track_peak_memory("cpu", live=(ddp, opt)) as mem:
        pass
    assert mem.result.start_bytes == 2 * params  # the parameters and the buckets, nothing twice
    ddp._get_ddp_logging_data = dict  # a torch whose logging data lacks the sizes: the same count
    assert ddp_bucket_bytes(ddp) == params

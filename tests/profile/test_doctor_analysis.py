"""The trace analysis on hand-built traces whose breakdown is known exactly."""

import json

import pytest

from torchsmith.profile.analysis import analyse_trace

TID = 7


def _x(name, ts, dur, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": TID, "args": args}


def _step(t0, item_in_optimizer=True, item_in_step=True, pyid=0):
    """One 1000 us step: data 300, forward 200, backward 300, optimizer 150, sync 30, other 20."""
    evs = [
        _x(f"ProfilerStep#{t0}", t0, 1000, cat="user_annotation"),
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 300, cat="user_annotation"),
        _x("train.py(20): main", t0, 1000, cat="python_function", **{"Python id": pyid + 1, "Python parent id": 0}),
        _x("nn.Module: Net_0", t0 + 300, 200, cat="python_function",
           **{"Python id": pyid + 2, "Python parent id": pyid + 1}),
        _x("aten::addmm", t0 + 310, 100, **{"Input Dims": [[4], [8, 4], [4, 4]], "Input type": ["float"]}),
        _x("torch/_tensor.py(570): backward", t0 + 500, 300, cat="python_function",
           **{"Python id": pyid + 3, "Python parent id": pyid + 1}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", t0 + 510, 200),
        _x("AddmmBackward0", t0 + 511, 190),
        _x("aten::mm", t0 + 520, 150),
        _x("Optimizer.step#SGD.step", t0 + 800, 150, cat="user_annotation"),
    ]
    if item_in_optimizer:  # the optimizer's own .item() on a CPU step counter: not a sync finding
        evs.append(_x("aten::item", t0 + 810, 5))
    if item_in_step:
        evs += [_x("<built-in method item of Tensor object>", t0 + 960, 30, cat="python_function",
                   **{"Python id": pyid + 4, "Python parent id": pyid + 1}),
                _x("aten::item", t0 + 960, 30), _x("aten::_local_scalar_dense", t0 + 965, 20),
                _x("cudaStreamSynchronize", t0 + 970, 10, cat="cuda_runtime")]  # the device wait
    return evs


def _write(tmp_path, events):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_breakdown_matches_known_spans(tmp_path):
    a = analyse_trace(_write(tmp_path, _step(0) + _step(1000, pyid=10)))
    assert len(a.steps) == 2
    expected = {"data": 300e-6, "forward": 200e-6, "backward": 300e-6, "optimizer": 150e-6, "sync": 30e-6,
                "other": 20e-6}
    for cat, seconds in expected.items():
        assert a.seconds(cat) == pytest.approx(seconds, abs=1e-9), cat
    assert a.share("data") == pytest.approx(0.3)
    # one sync per step (item + its nested _local_scalar_dense), located in the user's frame
    assert a.steps_with_sync == 2
    assert [(s.where, s.count) for s in a.sync_sites] == [("train.py:20 in main", 2)]
    # self time: AddmmBackward0 190 - mm 150; the evaluate_function wrapper is transparent
    ops = {o.name: o for o in a.top_ops}
    assert ops["AddmmBackward0"].self_seconds == pytest.approx(2 * 40e-6)
    assert ops["aten::addmm"].shapes == "(4,), (8, 4), (4, 4)"
    assert a.ops_per_step == 2  # addmm in forward, AddmmBackward0 in backward


def test_no_sync_when_only_the_optimizer_reads_scalars(tmp_path):
    a = analyse_trace(_write(tmp_path, _step(0, item_in_step=False)))
    assert a.steps_with_sync == 0 and a.sync_sites == []
    assert a.seconds("optimizer") == pytest.approx(150e-6)
    assert a.seconds("other") == pytest.approx(50e-6)


def test_cpu_memory_peak_per_step(tmp_path):
    def mem(ts, nbytes, addr):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts, "pid": 1, "tid": TID,
                "args": {"Bytes": nbytes, "Addr": addr, "Device Type": 0, "Total Allocated": 0}}
    events = _step(0) + [mem(10, 100, 1), mem(20, 50, 2), mem(30, -100, 1), mem(40, -999, 99), mem(50, 200, 3)]
    a = analyse_trace(_write(tmp_path, events))
    # running: 100, 150, 50, (free of an unknown block ignored) 50, 250
    assert a.peak_delta_bytes == [250]


def test_a_trace_without_steps_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no ProfilerStep"):
        analyse_trace(_write(tmp_path, [_x("aten::mm", 0, 10)]))


def test_gradient_accumulation_counts_every_forward(tmp_path):
    """Two micro-batches per optimizer step: forward, backward, forward, backward, step."""
    events = [
        _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _x("nn.Module: Net_0", 100, 100, cat="python_function", **{"Python id": 1}),
        _x("torch/_tensor.py(570): backward", 200, 200, cat="python_function", **{"Python id": 2}),
        _x("torch/autograd/__init__.py(255): backward", 210, 180, cat="python_function", **{"Python id": 3}),
        _x("nn.Module: Net_0", 450, 100, cat="python_function", **{"Python id": 4}),
        _x("torch/_tensor.py(570): backward", 600, 200, cat="python_function", **{"Python id": 5}),
        _x("Optimizer.step#SGD.step", 850, 150, cat="user_annotation"),
    ]
    a = analyse_trace(_write(tmp_path, events))
    # forward: the module calls 100-200 and 450-550
    assert a.seconds("forward") == pytest.approx(200e-6)
    assert a.seconds("backward") == pytest.approx(400e-6)
    assert a.seconds("data") == 0.0  # no DataLoader wait measured: the gap before forward is not guessed as data
    assert a.seconds("other") == pytest.approx(250e-6)  # 0-100, 400-450, 550-600, 800-850


def test_gpu_kernels_are_ranked_and_judged_for_launch_bound(tmp_path):
    kernels = [dict(_x("void gemm_kernel", 100 + i, 200, cat="kernel"), tid=99) for i in range(2)]
    kernels += [dict(_x("elementwise_add", 600 + i * 5, 3, cat="kernel"), tid=99) for i in range(150)]
    a = analyse_trace(_write(tmp_path, _step(0) + kernels))
    assert a.device == "cuda"
    assert [k.name for k in a.top_kernels] == ["elementwise_add", "void gemm_kernel"]  # 450 us vs 400 us
    assert a.ops_per_step == 152 and a.small_op_share == pytest.approx(450 / 850)


def test_a_closure_inside_optimizer_step_is_forward_and_backward(tmp_path):
    """Lightning and LBFGS run forward and backward inside optimizer.step(closure): they stay
    forward and backward; only the update itself is the optimizer's."""
    events = [
        _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _x("Optimizer.step#Adam.step", 0, 1000, cat="user_annotation"),
        _x("torchsmith.optimizer #1 Adam", 10, 980, cat="user_annotation"),
        _x("nn.Module: LitNet_0", 100, 300, cat="python_function", **{"Python id": 1}),
        _x("aten::conv2d", 110, 250,
           **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3]], "Input type": ["float", "float"]}),
        _x("aten::mul", 370, 10, **{"Input Dims": [[8, 16], []], "Input type": ["float", "double"]}),  # 0.5 * x
        _x("autograd::engine::evaluate_function: ConvolutionBackward0", 450, 400),
        _x("aten::_foreach_add_", 900, 50),
    ]
    a = analyse_trace(_write(tmp_path, events))
    assert a.seconds("forward") == pytest.approx(300e-6)
    assert a.seconds("backward") == pytest.approx(400e-6)
    assert a.seconds("optimizer") == pytest.approx(300e-6)  # 0-100, 400-450, 850-1000
    # in its labelled span 10-990: 10-100, 400-450, 850-990
    assert a.optimizer_shares() == {"#1 Adam": pytest.approx(0.28)}
    assert a.float64_ops == []  # a Python float scalar is recorded as double with no dims
    assert a.foreach_ops_per_step == 1 and a.optimizer_ops_per_step == 1


def test_float64_tensor_arguments_are_found(tmp_path):
    events = [_x("ProfilerStep#1", 0, 100, cat="user_annotation"),
              _x("nn.Module: Net_0", 0, 50, cat="python_function", **{"Python id": 1}),
              _x("aten::addmm", 5, 40, **{"Input Dims": [[4], [8, 4], [4, 4]], "Input type": ["double"] * 3})]
    assert analyse_trace(_write(tmp_path, events)).float64_ops == ["aten::addmm (4,), (8, 4), (4, 4)"]


def test_a_cpu_item_is_no_device_sync(tmp_path):
    """nanoGPT indexes a numpy memmap with 0-d tensors: aten::item on CPU, no device waits."""
    events = [_x("ProfilerStep#1", 0, 100, cat="user_annotation"),
              _x("aten::item", 10, 5), _x("aten::_local_scalar_dense", 11, 3)]
    a = analyse_trace(_write(tmp_path, events))
    assert a.steps_with_sync == 0 and a.seconds("sync") == 0.0


def test_a_custom_optimizers_own_step_and_helpers_stay_optimizer(tmp_path):
    """An optimizer outside torch/ (its step and helpers are non-torch frames) calling a closure:
    only the closure frame, which ran forward and backward, leaves the optimizer phase."""
    py = {"cat": "python_function"}
    events = [
        _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _x("Optimizer.step#MyOpt.step", 0, 1000, cat="user_annotation"),
        _x("myopt.py(10): step", 5, 990, **py),
        _x("train.py(30): closure", 10, 500, **py),
        _x("nn.Module: Net_0", 20, 200, **py),
        _x("torch/_tensor.py(570): backward", 250, 200, **py),
        _x("myopt.py(40): _update", 600, 300, **py),
    ]
    a = analyse_trace(_write(tmp_path, events))
    assert a.seconds("forward") == pytest.approx(200e-6) and a.seconds("backward") == pytest.approx(200e-6)
    assert a.seconds("other") == pytest.approx(100e-6)  # the closure's own 10-20, 220-250, 450-510
    assert a.seconds("optimizer") == pytest.approx(500e-6)  # 0-10, 510-1000: the update and its helper

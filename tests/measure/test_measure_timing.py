"""PhaseTimer synchronises CUDA once per step unless exact phases were asked for (timing.py)."""

import time

import torch

from torchsmith.measure.timing import PhaseTimer


def _step(timer):
    timer.add("data", 0.001)
    for name in ("forward", "backward", "optimizer"):
        with timer.phase(name):
            time.sleep(0.001)
    return timer.end_step()


def test_step_sync_is_once_per_step_and_phase_sync_is_opt_in(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append(1))
    done = _step(PhaseTimer(sync_step=True))
    assert len(calls) == 1  # one CPU-GPU sync point per step
    assert done["step"] >= done["data"] + 0.003  # the step is timed from its first phase to the sync
    calls.clear()
    _step(PhaseTimer(sync_cuda=True, sync_step=True))
    assert len(calls) == 6  # exact phases: a sync at both ends of each of the 3 phases, none extra
    calls.clear()
    _step(PhaseTimer())
    assert calls == []  # CPU: no sync at all


def test_run_on_cpu_never_synchronises(monkeypatch):
    from toy_workloads import dropout_workload

    from torchsmith.engine.loop import run

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append(1))
    run(dropout_workload(), steps=2)
    assert calls == []

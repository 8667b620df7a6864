"""Machine peak FLOP/s: measured, cached per key, and MFU arithmetic."""

import json
import time

import pytest
import torch

from torchsmith.measure.peak import PeakFlops, cache_path, machine_peak_flops, mfu


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    import torchsmith.measure.peak as peak_mod

    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    # A quiet machine, whatever the real load: the re-measure policy is tested apart.
    monkeypatch.setattr(peak_mod, "load_per_core", lambda: 0.5)
    return tmp_path


def test_measures_then_reads_cache(cache_dir):
    t0 = time.perf_counter()
    first = machine_peak_flops("cpu")
    t1 = time.perf_counter()
    second = machine_peak_flops("cpu")
    t2 = time.perf_counter()
    assert cache_path() == cache_dir / "peak_flops.json" and cache_path().exists()
    assert not first.cached and second.cached
    assert second.flops_per_s == first.flops_per_s
    assert (t2 - t1) < (t1 - t0) / 10  # reading a file vs timing matmuls
    assert first.flops_per_s > 1e8  # any CPU this decade does 0.1 GFLOP/s
    assert first.threads == torch.get_num_threads() and first.dtype == "float32"
    assert first.size > 0


def test_thread_count_is_part_of_the_key(cache_dir):
    machine_peak_flops("cpu")
    threads = torch.get_num_threads()
    data = json.loads(cache_path().read_text())
    key = next(iter(data))
    # Another thread count must not reuse this entry: plant a fake one and check.
    data[key.replace(f"threads={threads}", f"threads={threads + 7}")] = {**data[key], "flops_per_s": 1.0}
    cache_path().write_text(json.dumps(data))
    assert machine_peak_flops("cpu").flops_per_s != 1.0


def test_corrupt_cache_is_rewritten(cache_dir, caplog):
    cache_path().write_text("{not json")
    with caplog.at_level("WARNING", logger="torchsmith"):
        peak = machine_peak_flops("cpu")
    assert "unreadable peak-FLOPs cache" in caplog.text
    assert not peak.cached
    assert json.loads(cache_path().read_text())  # valid again


def test_mfu_arithmetic_and_errors():
    peak = PeakFlops(flops_per_s=8e12, dtype="float32", device="x", threads=1, size=1,
                     measured_at="", load_per_core=None, cached=True)
    assert mfu(2e12, 0.5, peak) == pytest.approx(0.5)
    assert mfu(2e12, 0.5, 8e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="Tip:"):
        mfu(1e9, 0.0, peak)


def _plant(rate: float, load: float) -> None:
    data = json.loads(cache_path().read_text())
    key = next(iter(data))
    data[key].update(flops_per_s=rate, load_per_core=load)
    cache_path().write_text(json.dumps(data))


def test_contended_figure_is_remeasured_when_quiet(cache_dir, monkeypatch):
    import torchsmith.measure.peak as peak_mod

    machine_peak_flops("cpu")
    _plant(1.0, load=4.0)  # as if measured on oversubscribed cores
    monkeypatch.setattr(peak_mod, "load_per_core", lambda: 4.0)
    assert machine_peak_flops("cpu").cached  # still busy: no point measuring again
    monkeypatch.setattr(peak_mod, "load_per_core", lambda: 0.2)
    again = machine_peak_flops("cpu")
    assert not again.cached and again.flops_per_s > 1.0


def test_refresh_keeps_the_higher_figure(cache_dir):
    machine_peak_flops("cpu")
    _plant(1e30, load=0.1)  # higher than any real measurement
    assert machine_peak_flops("cpu", refresh=True).flops_per_s == 1e30


def test_a_figure_measured_under_load_is_not_cached(cache_dir, monkeypatch):
    import torchsmith.measure.peak as peak_mod

    monkeypatch.setattr(peak_mod, "load_per_core", lambda: 3.0)  # 3 runnable threads per core
    first = machine_peak_flops("cpu")
    assert not first.cached and first.load_per_core == 3.0
    assert not cache_path().exists()  # used for this call, never kept
    assert not machine_peak_flops("cpu").cached  # so the next call measures again


def test_peak_at_the_plans_thread_count(cache_dir):
    before = torch.get_num_threads()
    peak = machine_peak_flops("cpu", threads=1)
    assert peak.threads == 1 and torch.get_num_threads() == before
    assert machine_peak_flops("cpu", threads=1).cached


def _stub(rates):
    calls = []

    def peak_fn(device, dtype, *, threads=None, refresh=False):
        calls.append(refresh)
        rate = rates[min(len(calls), len(rates)) - 1]
        return PeakFlops(flops_per_s=rate, dtype=str(dtype).removeprefix("torch."), device="stub",
                         threads=threads or 1, size=1, measured_at="now", load_per_core=None, cached=not refresh)

    return peak_fn, calls


def test_checked_mfu_remeasures_above_100_percent_and_never_returns_it():
    from torchsmith.measure.peak import checked_mfu

    low_then_true, calls = _stub([1e9, 4e9])  # 2e9 FLOP/s achieved: 200% of the stale peak
    value, peak = checked_mfu(2e9, 1.0, "cpu", torch.float32, threads=2, peak_fn=low_then_true)
    assert value == pytest.approx(0.5) and calls == [False, True] and peak.threads == 2
    always_low, calls = _stub([1e9])
    value, _ = checked_mfu(2e9, 1.0, "cpu", torch.float32, peak_fn=always_low)
    assert value is None and calls == [False, True]
    fine, calls = _stub([8e9])
    assert checked_mfu(2e9, 1.0, "cpu", torch.float32, peak_fn=fine)[0] == pytest.approx(0.25) and calls == [False]


def test_no_mfu_above_100_percent_is_printed(monkeypatch):
    """A run whose peak is stubbed far too low: the rendered report shows '-' for MFU, not 1000000%."""
    import re

    from rich.console import Console

    import torchsmith.measure.peak as peak_mod
    from torchsmith.engine.loop import run
    from torchsmith.harness.run_metrics import measure_run_metrics
    from torchsmith.report.run import render_run
    from torchsmith.workloads import mlp

    stub, calls = _stub([1.0])  # 1 FLOP/s: any real step is far above it
    monkeypatch.setattr(peak_mod, "machine_peak_flops", stub)
    monkeypatch.setattr("torchsmith.harness.run_metrics.machine_peak_flops", stub)
    workload = mlp.workload(0, train_rows=1024, val_rows=256)
    result = run(workload, steps=3, log_every=0, eval_batches=1)
    result.metrics.update(measure_run_metrics(workload, result))
    assert result.metrics["mfu"] is None and calls == [False, True]
    console = Console(record=True, width=200)
    render_run(result, console)
    text = console.export_text()
    assert "MFU" in text
    assert all(float(p) <= 100 for p in re.findall(r"(\d+(?:\.\d+)?)%", text)), text

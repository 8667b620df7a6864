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
    monkeypatch.setattr(peak_mod, "_load_per_core", lambda: 0.5)
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
    monkeypatch.setattr(peak_mod, "_load_per_core", lambda: 4.0)
    assert machine_peak_flops("cpu").cached  # still busy: no point measuring again
    monkeypatch.setattr(peak_mod, "_load_per_core", lambda: 0.2)
    again = machine_peak_flops("cpu")
    assert not again.cached and again.flops_per_s > 1.0


def test_refresh_keeps_the_higher_figure(cache_dir):
    machine_peak_flops("cpu")
    _plant(1e30, load=0.1)  # higher than any real measurement
    assert machine_peak_flops("cpu", refresh=True).flops_per_s == 1e30

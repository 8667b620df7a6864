"""The machine's peak matmul throughput, measured once and cached, and MFU against it.

A datasheet peak is not what PyTorch reaches on this machine with this thread count
and this BLAS, so it is measured: square matmuls of a few sizes, best sustained rate
after a warm-up. The result is cached per (device, dtype, threads, torch version,
fp32 matmul precision) in ``$TORCHSMITH_CACHE_DIR/peak_flops.json``, default
``~/.cache/torchsmith/peak_flops.json``.

An MFU must not lie, and a peak measured too low makes it lie upwards (a run once printed
169% against a peak measured while another process held the cores). So: a figure measured on
oversubscribed cores is used once but never cached; the peak is taken at the plan's own thread
count and dtype; and :func:`checked_mfu` measures the peak again when a figure would exceed
100%, and reports no MFU at all rather than one above 100%.

Example::

    peak = machine_peak_flops("cpu")            # measured the first time (_BUDGET_S), then cached
    mfu(stats.total, step_seconds, peak)  # stats from count_flops
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from torchsmith.atomic import atomic_write_text
from torchsmith.measure.fingerprint import machine_fingerprint
from torchsmith.measure.load import load_per_core, under_load

logger = logging.getLogger(__name__)

__all__ = ["PeakFlops", "machine_peak_flops", "mfu", "checked_mfu", "cache_path"]

CACHE_ENV = "TORCHSMITH_CACHE_DIR"
CACHE_FILE = "peak_flops.json"

# Sizes tried, smallest first. CPU: 1024^3 fp32 is ~2 GFLOP. CUDA: big enough to saturate
# tensor cores, small enough to stay well under 1 s.
_SIZES = {"cpu": (256, 512, 1024), "cuda": (2048, 4096, 8192)}
_BUDGET_S = {"cpu": 1.5, "cuda": 2.0}
_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_ROUND_S = 0.05  # one timed round: long enough to dwarf timer and launch overhead
_ROUNDS = 3  # best of this many rounds per size


@dataclass(frozen=True, kw_only=True)
class PeakFlops:
    """Best sustained matmul throughput measured on this machine."""

    flops_per_s: float
    """Best sustained FLOP/s over the sizes tried (one multiply-add = 2 FLOPs)."""
    dtype: str
    """Matmul dtype, e.g. ``"float32"``."""
    device: str
    """Device name: the CPU model, or the CUDA device name."""
    threads: int
    """Intra-op threads in use when measured (CPU figures scale with it)."""
    size: int
    """Side of the square matmul that reached the best rate."""
    measured_at: str
    """When it was measured, ISO 8601 UTC."""
    load_per_core: float | None
    """1-minute load average per available core when measured (CPU only, else ``None``).
    Above 1, other processes shared the cores and the figure is likely low: a later call
    made on a quieter machine measures again and keeps the higher figure."""
    cached: bool
    """True when read from the cache instead of measured in this call."""


def cache_path() -> Path:
    """Where the peak cache lives: ``$TORCHSMITH_CACHE_DIR`` or ``~/.cache/torchsmith``."""
    root = os.environ.get(CACHE_ENV)
    base = Path(root) if root else Path.home() / ".cache" / "torchsmith"
    return base / CACHE_FILE


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    fp = machine_fingerprint()
    return f"{fp.cpu_model} ({fp.cpu_capability})"


def _cache_key(device_name: str, dtype: torch.dtype, threads: int) -> str:
    # fp32 matmul precision ("high" allows TF32 on CUDA, "medium" bf16 on CPU)
    # changes fp32 throughput severalfold, so it is part of the key.
    return (
        f"{device_name}|{str(dtype).removeprefix('torch.')}|threads={threads}"
        f"|torch={torch.__version__}|fp32_precision={torch.get_float32_matmul_precision()}"
    )


def _read_cache(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        logger.warning("ignoring unreadable peak-FLOPs cache %s: %s; it will be rewritten", path, err)
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write-then-rename: several processes (torchrun ranks) may measure at once,
    # and a reader must never see half a file.
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))


def _from_cache(entry: object) -> PeakFlops | None:
    if not isinstance(entry, dict):
        return None
    try:
        return PeakFlops(**{**entry, "cached": True})
    except TypeError:
        return None  # written by another torchsmith version: measure again


def _worth_remeasuring(cached: PeakFlops, load_now: float | None) -> bool:
    """A figure measured on oversubscribed cores (caches written before they stopped being
    stored), when the cores are free now."""
    return under_load(cached.load_per_core) and not under_load(load_now)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: kernels are asynchronous


def _measure(device: torch.device, dtype: torch.dtype, budget_s: float) -> tuple[float, int]:
    """Best FLOP/s over square matmuls, within about ``budget_s`` seconds."""
    deadline = time.perf_counter() + budget_s
    best_rate, best_size = 0.0, 0
    for n in _SIZES[device.type]:
        flops = 2 * n**3
        if best_rate > 0:
            # Skip a size whose rounds would overrun the budget at the rate seen so
            # far (a CPU without bf16 hardware runs bf16 many times slower than fp32).
            predicted = (_ROUNDS * max(_ROUND_S, flops / best_rate)) + flops / best_rate
            if time.perf_counter() + predicted > deadline:
                break
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)  # warm-up: BLAS thread pool, kernel selection, caches
        _sync(device)
        warm = time.perf_counter() - t0
        reps = max(1, int(_ROUND_S / max(warm, 1e-6)))
        for _ in range(_ROUNDS):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            _sync(device)
            elapsed = time.perf_counter() - t0
            rate = flops * reps / elapsed
            if rate > best_rate:
                best_rate, best_size = rate, n
            if time.perf_counter() > deadline:
                return best_rate, best_size
            reps = max(1, int(_ROUND_S * rate / flops))
    return best_rate, best_size


def machine_peak_flops(
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    refresh: bool = False,
    threads: int | None = None,
) -> PeakFlops:
    """Peak matmul FLOP/s of ``device`` in ``dtype``, from the cache or measured (within ``_BUDGET_S``).

    The CPU figure is for the current ``torch.get_num_threads()``; change the thread
    count and it is measured again. Other processes on the same cores lower it (see
    ``PeakFlops.load_per_core``), so the cache keeps the highest figure measured.
    ``refresh=True`` measures again even when cached. ``threads`` measures at that intra-op
    thread count (a plan's ``threads.intra_op``) and restores the current one after. A figure
    measured while the cores were oversubscribed is returned but not cached.

    Example::

        >>> peak = machine_peak_flops("cpu")
        >>> peak.flops_per_s > 1e9, peak.dtype
        (True, 'float32')
    """
    dev = _checked_device(device, dtype)
    if threads is not None and dev.type == "cpu" and threads != torch.get_num_threads():
        return _at_threads(threads, lambda: machine_peak_flops(dev, dtype, refresh=refresh))
    name, threads = _device_name(dev), torch.get_num_threads()
    key, path = _cache_key(name, dtype, threads), cache_path()
    cache = _read_cache(path)
    previous = _from_cache(cache.get(key))
    load_now = load_per_core() if dev.type == "cpu" else None
    if previous is not None and not refresh and not _worth_remeasuring(previous, load_now):
        return previous
    result = _measured(dev, dtype, name, threads, load_now)
    if previous is not None and previous.flops_per_s > result.flops_per_s:
        # A peak is a maximum: a slower re-measurement means a busier machine, not a
        # slower one, so the higher figure stands.
        result = replace(previous, cached=False)
    elif under_load(load_now):
        # Measured on oversubscribed cores: good for this call (it is all there is), too low to keep.
        return result
    _store(path, cache, key, result)
    return result


def _checked_device(device: str | torch.device, dtype: torch.dtype) -> torch.device:
    """``device`` as a torch.device with its CUDA index, after checking a peak can be measured there in ``dtype``."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type not in _SIZES:
        raise ValueError(
            f"Peak FLOP/s is measured on 'cpu' or 'cuda'; got {str(dev)!r}.\n"
            "Tip: pass device='cpu' or device='cuda'."
        )
    if dtype not in _DTYPES:
        raise ValueError(
            f"Peak FLOP/s is measured for {sorted(str(d) for d in _DTYPES)}; got {dtype}.\n"
            "Tip: pass dtype=torch.float32, or torch.bfloat16 for the autocast peak."
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"Asked for the peak of {dev} but CUDA is not available in this process.\n"
            "Tip: pass device='cpu', or check CUDA_VISIBLE_DEVICES and the torch build."
        )
    return dev


def _at_threads(threads: int, measure: Callable[[], PeakFlops]) -> PeakFlops:
    """``measure()`` at ``threads`` intra-op threads; the current count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return measure()
    finally:
        torch.set_num_threads(before)


def _measured(dev: torch.device, dtype: torch.dtype, name: str, threads: int, load_now: float | None) -> PeakFlops:
    rate, size = _measure(dev, dtype, _BUDGET_S[dev.type])
    return PeakFlops(
        flops_per_s=rate,
        dtype=str(dtype).removeprefix("torch."),
        device=name,
        threads=threads,
        size=size,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        load_per_core=load_now,
        cached=False,
    )


def _store(path: Path, cache: dict[str, dict], key: str, result: PeakFlops) -> None:
    stored = asdict(result)
    del stored["cached"]
    cache[key] = stored
    try:
        _write_cache(path, cache)
    except OSError as err:
        # A read-only home must not stop a measurement; it only costs re-measuring.
        logger.warning("could not write the peak-FLOPs cache %s: %s. Tip: set %s to a writable directory.",
                       path, err, CACHE_ENV)


def mfu(flops_per_step: float, step_seconds: float, peak: PeakFlops | float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over peak FLOP/s, a fraction in [0, ~1].

    ``flops_per_step`` is typically ``count_flops(step).total``; ``peak`` a
    :class:`PeakFlops` or a FLOP/s figure. Above 1 means the FLOP count or the peak
    is wrong (e.g. a bf16 step against an fp32 peak).

    Example::

        >>> mfu(2e12, 0.5, 8e12)
        0.5
    """
    peak_rate = peak.flops_per_s if isinstance(peak, PeakFlops) else float(peak)
    if step_seconds <= 0 or peak_rate <= 0 or flops_per_step < 0:
        raise ValueError(
            f"MFU needs flops_per_step >= 0, step_seconds > 0 and peak > 0; got "
            f"flops_per_step={flops_per_step}, step_seconds={step_seconds}, peak={peak_rate}.\n"
            "Tip: time the step with a synchronised timer (median over steps) and take "
            "the peak from machine_peak_flops()."
        )
    return flops_per_step / step_seconds / peak_rate


def checked_mfu(flops_per_step: float, step_seconds: float, device: str | torch.device, dtype: torch.dtype,
                *, threads: int | None = None,
                peak_fn: Callable[..., PeakFlops] | None = None) -> tuple[float | None, PeakFlops]:
    """MFU against the peak of ``dtype`` at ``threads``, never above 1: ``(mfu or None, peak used)``.

    A figure above 100% means the peak was measured too low (a loaded machine) or the step was
    timed wrong, so the peak is measured again (``refresh=True``); if the figure still exceeds
    100%, the MFU is None ("not known") rather than a number that cannot be true.
    ``peak_fn`` stands in for :func:`machine_peak_flops` in tests.

    Example::

        >>> value, peak = checked_mfu(1e9, 0.5, "cpu", torch.float32)   # doctest: +SKIP
    """
    peak_fn = peak_fn or machine_peak_flops  # looked up at call time: tests may replace it
    peak = peak_fn(device, dtype, threads=threads)
    value = mfu(flops_per_step, step_seconds, peak)
    if value > 1.0:
        peak = peak_fn(device, dtype, threads=threads, refresh=True)
        value = mfu(flops_per_step, step_seconds, peak)
        if value > 1.0:
            logging.getLogger(__name__).warning(
                "MFU would be %.0f%% of a %.3g FLOP/s peak (%s, %d threads) even after measuring the peak again; "
                "reporting none. The peak was probably measured on a busy machine.",
                100 * value, peak.flops_per_s, peak.dtype, peak.threads)
            return None, peak
    return value, peak

"""A fingerprint of the machine a measurement was taken on.

A measured gain belongs to the hardware it was measured on: bf16 autocast speeds up
a CPU with AVX512-BF16 or AMX and makes an AVX2-only CPU many times slower. Every
report and cache entry therefore carries this fingerprint.

Example::

    fp = machine_fingerprint()
    if fp.native_bf16 is False:
        ...  # do not try bf16 autocast on this CPU
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

__all__ = ["MachineFingerprint", "machine_fingerprint"]

# /proc/cpuinfo flags meaning bf16 arithmetic in hardware: AVX512-BF16 and AMX tiles
# on x86; FEAT_BF16 ("bf16") on aarch64.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


@dataclass(frozen=True, kw_only=True)
class MachineFingerprint:
    """What a measurement's hardware and software were."""

    cpu_model: str
    """CPU model name, e.g. ``"AMD EPYC 9R14 96-Core Processor"``; ``"unknown"`` if unreadable."""
    cpu_capability: str
    """The SIMD level PyTorch's CPU kernels dispatch to: ``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``, ..."""
    native_bf16: bool | None
    """Whether the CPU computes bf16 in hardware (AVX512-BF16, AMX-BF16, ARM FEAT_BF16).
    ``None`` when it could not be determined on this OS."""
    cpu_flags: tuple[str, ...]
    """The CPU's bf16/AMX/AVX512 feature flags that matter for kernel choice, sorted."""
    logical_cores: int
    """Logical CPUs in the machine (``os.cpu_count``)."""
    available_cores: int
    """Physical cores this process may run on (affinity and container limits; hyper-threads not
    counted): ``usable_cores()``, the count every thread decision uses."""
    torch_threads: int
    """Intra-op threads PyTorch uses now (``torch.get_num_threads``)."""
    torch_version: str
    """``torch.__version__``."""
    cuda_device: str | None
    """Name of the current CUDA device, or ``None`` without CUDA."""
    cuda_capability: tuple[int, int] | None
    """Compute capability of that device, e.g. ``(9, 0)``; ``None`` without CUDA."""
    python_version: str
    """``platform.python_version()``."""
    platform: str
    """OS and architecture, e.g. ``"Linux-6.1-x86_64"``."""


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """(model name, flags) from /proc/cpuinfo; empty on other systems."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "", frozenset()
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:  # x86 / aarch64
            flags = set(value.split())
    return model, frozenset(flags)


def _macos_bf16() -> bool | None:
    try:
        out = subprocess.run(
            ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"],
            capture_output=True, text=True, timeout=2, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() == "1" if out.returncode == 0 else None


def _cpu_model(proc_model: str) -> str:
    if proc_model:
        return proc_model
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True, text=True, timeout=2, check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def machine_fingerprint() -> MachineFingerprint:
    """Describe this machine and the torch build measuring on it.

    Cheap (reads /proc/cpuinfo once per process); safe to call for every report.

    Example::

        >>> fp = machine_fingerprint()
        >>> fp.cpu_capability, fp.native_bf16  # on an AVX2-only laptop
        ('AVX2', False)
    """
    proc_model, flags = _cpuinfo()
    if flags:
        native_bf16: bool | None = bool(flags & _BF16_FLAGS)
    elif sys.platform == "darwin":
        native_bf16 = _macos_bf16()
    else:
        native_bf16 = None
    if native_bf16 is None and hasattr(torch.cpu, "_is_avx512_bf16_supported"):
        # Private and x86-only, but a second opinion where /proc is missing.
        native_bf16 = bool(torch.cpu._is_avx512_bf16_supported()) or None
    shown = tuple(sorted(f for f in flags if f in _BF16_FLAGS or f.startswith(("amx", "avx512"))))
    cuda_device = cuda_capability = None
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        cuda_device = torch.cuda.get_device_name(index)
        cuda_capability = torch.cuda.get_device_capability(index)
    return MachineFingerprint(
        cpu_model=_cpu_model(proc_model),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        native_bf16=native_bf16,
        cpu_flags=shown,
        logical_cores=os.cpu_count() or 1,
        available_cores=usable_cores(),
        torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        cuda_device=cuda_device,
        cuda_capability=cuda_capability,
        python_version=platform.python_version(),
        platform=platform.platform(terse=True),
    )


def usable_cores() -> int:
    """Physical cores this process may run on: the one core count for thread decisions.

    It is PyTorch's default intra-op thread count; tune's thread candidates, the DataLoader
    worker candidates and doctor's threads rule all count with it.

    Hyper-threads share a core's execution units, so they are not counted: two threads on
    one core's two hyper-threads rarely beat one for matmuls.
    """
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
    cores = set()
    try:
        with open("/proc/cpuinfo") as f:
            info: dict[str, str] = {}
            for line in f:
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
                if not line.strip():
                    cpu = int(info.get("processor", -1))
                    if cpu in cpus:
                        cores.add((info.get("physical id"), info.get("core id", cpu)))
                    info = {}
    except OSError:
        pass
    return max(1, min(len(cpus), len(cores) or len(cpus)))

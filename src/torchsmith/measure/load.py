"""How busy the CPU is: the 1-minute load average, where other processes show up.

Speed verdicts on a CPU follow the load of the moment: on an oversubscribed 2-core VM one
trainer thread beat two by several times (two OpenMP threads spin against the other processes),
and not at all on a quiet machine; an fp32 matmul peak measured there came out far too low. Callers read
the load before they measure and say when the cores were oversubscribed.
"""

from __future__ import annotations

import os

BUSY_PER_CORE = 1.0
"""More runnable threads than cores, averaged over a minute: other processes take turns on ours."""


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_per_core() -> float | None:
    """The 1-minute load average per core this process may run on."""
    load = load_average()
    if load is None:
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return load / cores


def under_load(per_core: float | None) -> bool:
    return per_core is not None and per_core > BUSY_PER_CORE


def busy_note(per_core: float | None) -> str | None:
    """What a tune result should say when it started on oversubscribed cores, else None."""
    if not under_load(per_core):
        return None
    return (f"the machine was busy when tune started (1-minute load average {per_core:.1f} per core): "
            "other processes shared the cores, and changes that free cores (fewer trainer threads) win "
            "more under load than on a quiet machine. Tune again at the load you will train at.")

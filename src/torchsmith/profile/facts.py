"""What the capture's hooks saw on live objects during a doctor window, as plain data.

It crosses from the script's process to doctor's as JSON (``facts.json`` next to the trace).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Facts:
    """What the hooks saw on live objects. Plain data: it crosses from the script's process as JSON."""

    steps_seen: int = 0
    """Optimizer steps seen while hooked (hooks go once the window is done)."""
    steps_recorded: int = 0
    window_done: bool = False
    stopped: bool = False
    device: str = "cpu"
    model: str = ""
    param_numel_by_dtype: dict[str, int] = field(default_factory=dict)
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    anomaly_enabled: bool = False
    autocast_enabled: bool = False
    grad_checks: int = 0
    """Forward starts (outside the recorded window) where the gradients were inspected."""
    grads_zero_filled: int = 0
    """Of those, how many found existing ``.grad`` tensors that were all zeros."""
    zero_filled_grad_bytes: int = 0
    memory: dict[str, int] = field(default_factory=dict)
    """params / grads / optimizer_state bytes (measure.memory.memory_split at an optimizer step)."""
    unprofiled_step_seconds: list[float] = field(default_factory=list)
    """Wall time of the wait steps (hooked, not traced): the step time without profiler overhead."""
    live_bytes: int = 0
    """Persistent state bytes (params, grads, optimizer state) at a step boundary: the CPU peak baseline."""
    cuda_peak_bytes: int | None = None
    threads: dict[str, int] = field(default_factory=dict)
    thread_probe: dict[str, Any] = field(default_factory=dict)
    """Step seconds at the current and at a suspected thread count (thread_probe.ThreadProbe.result)."""
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Facts:
        return cls(**json.loads(text))




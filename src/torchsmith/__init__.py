"""torchsmith: measured PyTorch training optimisation.

Public API (imported lazily, so ``import torchsmith`` stays fast)::

    torchsmith.Workload, torchsmith.load_workload   # what to train
    torchsmith.Plan                                 # which optimisations to apply
    torchsmith.prepare(plan, model, opt, loss_fn)   # the tuned step for your own loop
    torchsmith.run(workload, plan, steps=...)       # the engine: progress, checkpoints, resume
    with torchsmith.inference(model): ...          # evaluation: inference_mode + eval(), modes restored
    torchsmith.tune(workload, budget="5m")         # the main job: a TuneResult
    torchsmith.write_tune_report(result, "report.html")  # its self-contained HTML report
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Workload": "torchsmith.workload",
    "load_workload": "torchsmith.workload",
    "Plan": "torchsmith.plan",
    "prepare": "torchsmith.engine.step",
    "run": "torchsmith.engine.loop",
    "explain_oom": "torchsmith.debug.oom",
    "GradMonitor": "torchsmith.debug.grad_monitor",
    "NaNSentinel": "torchsmith.debug.nan_sentinel",
    "inference": "torchsmith.transforms.inference",
    "write_tune_report": "torchsmith.report.tune_html",
    "tune": "torchsmith.tuner",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from torchsmith.debug.grad_monitor import GradMonitor
    from torchsmith.debug.nan_sentinel import NaNSentinel
    from torchsmith.debug.oom import explain_oom
    from torchsmith.engine.loop import run
    from torchsmith.engine.step import prepare
    from torchsmith.plan import Plan
    from torchsmith.report.tune_html import write_tune_report
    from torchsmith.transforms.inference import inference
    from torchsmith.tuner import tune
    from torchsmith.workload import Workload, load_workload


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'torchsmith' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)

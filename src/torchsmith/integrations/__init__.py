"""Thin framework adapters: one line in a Lightning or Hugging Face Trainer script.

``TorchsmithCallback`` (Lightning) and ``TorchsmithTrainerCallback`` (HF ``Trainer``) turn on
the NaN/Inf sentinel with a ``Plan.nonfinite`` policy, the gradient monitor and a doctor
capture window, and hand back the same reports as the CLI. Each framework is an optional
extra, imported only when its adapter is::

    from torchsmith.integrations import TorchsmithCallback            # pip install 'torchsmith[lightning]'
    trainer = L.Trainer(callbacks=[TorchsmithCallback(nonfinite="raise")])

    from torchsmith.integrations import TorchsmithTrainerCallback     # pip install 'torchsmith[hf]'
    Trainer(model=model, args=args, callbacks=[TorchsmithTrainerCallback()])

Modules:
    hf            TorchsmithTrainerCallback: the Hugging Face TrainerCallback
    lightning     TorchsmithCallback: the Lightning Callback (a non-finite step replayed op by op)
    render        a callback's findings shown with the CLI's own renderers
    watch         Watch / WatchConfig: what the adapters share, driven from three points of a step
"""

from __future__ import annotations

from typing import Any

from torchsmith.integrations.watch import Watch, WatchConfig, WatchReport

__all__ = ["TorchsmithCallback", "TorchsmithTrainerCallback", "Watch", "WatchConfig", "WatchReport"]


def __getattr__(name: str) -> Any:
    # Lazy: importing torchsmith.integrations must not import Lightning or transformers.
    if name == "TorchsmithCallback":
        from torchsmith.integrations.lightning import TorchsmithCallback
        return TorchsmithCallback
    if name == "TorchsmithTrainerCallback":
        from torchsmith.integrations.hf import TorchsmithTrainerCallback
        return TorchsmithTrainerCallback
    raise AttributeError(f"module 'torchsmith.integrations' has no attribute {name!r}")

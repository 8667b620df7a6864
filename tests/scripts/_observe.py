"""What the script-tuning test scripts observe about their own model, optimizer and loader."""

import json
import os

import torch


class Observer:
    """Records, from inside the model, whether its forward ran under autocast; dumps facts as JSON."""

    def __init__(self, path):
        self.path = path
        self.autocast = False

    def watch(self, module):
        def hook(mod, args):
            # Also traced by torch.compile: the attribute update is replayed at every compiled call.
            if torch.is_autocast_enabled("cpu"):
                self.autocast = True

        module.register_forward_pre_hook(hook)

    def dump(self, model, optimizer, blocks=(), loader=None, **extra):
        if not self.path:
            return
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        facts = {
            "threads": torch.get_num_threads(), "autocast": self.autocast,
            "compiled": getattr(model, "_compiled_call_impl", None) is not None,
            "checkpointed": bool(blocks) and all("forward" in b.__dict__ for b in blocks),
            "fused": opt.param_groups[0].get("fused"), "foreach": opt.param_groups[0].get("foreach"),
            "num_workers": getattr(loader, "num_workers", None), "tune_env": os.environ.get("TORCHSMITH_TUNE"),
            "matmul_precision": torch.get_float32_matmul_precision(), **extra,
        }
        with open(self.path, "w") as f:
            json.dump(facts, f)

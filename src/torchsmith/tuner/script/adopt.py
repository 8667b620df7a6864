"""The edit that adopts a tuned plan in the script itself, and a readable list of written files.

The plan applies with no edit (``torchsmith run --plan plan.json -- python train.py``); these
lines are for a user who would rather keep the change in their code. Each is plain data
(text); the report renders it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from torchsmith.inject.outcome import KnobOutcome
from torchsmith.plan import DDP, FP32, Autocast, Compile, NoCheckpointing, Plan


def adoption_lines(plan: Plan, applied: dict[str, KnobOutcome], facts: dict[str, Any]) -> list[str]:
    """One snippet per knob of ``plan`` that the injection applied (knobs found "as written" need no edit)."""
    out = []

    def done(knob: str) -> bool:
        return knob not in applied or applied[knob].applied

    model = facts.get("model") or "model"
    var = "model"
    device = (facts.get("device") or "cpu").split(":")[0]
    if plan.threads.intra_op is not None and done("threads"):
        out.append(f"torch.set_num_threads({plan.threads.intra_op})  # once, at the top of the script")
    if plan.threads.inter_op is not None:
        out.append(f"torch.set_num_interop_threads({plan.threads.inter_op})  # before any other torch work")
    if plan.backend.matmul_precision is not None and done("matmul_precision"):
        out.append(f'torch.set_float32_matmul_precision("{plan.backend.matmul_precision}")')
    if plan.backend.cudnn_benchmark is not None and done("cudnn_benchmark"):
        out.append(f"torch.backends.cudnn.benchmark = {plan.backend.cudnn_benchmark}")
    if plan.optimizer.impl != "as_written" and done("optimizer"):
        name = (facts.get("optimizer") or {}).get("name", "AdamW")
        arg = {"fused": "fused=True", "foreach": "foreach=True", "for_loop": "foreach=False"}[plan.optimizer.impl]
        out.append(f"optimizer = torch.optim.{name}(..., {arg})")
    loader = {k: v for k, v in vars(plan.loader).items() if v is not None and k != "batch_fetch"}
    if loader and done("loader"):
        said = applied.get("loader")
        args = said.detail if said else ", ".join(f"{k}={v}" for k, v in loader.items())
        out.append(f"DataLoader(..., {args})")
    if isinstance(plan.precision, Autocast) and done("precision"):
        out.append(
            f'with torch.autocast("{device}", dtype=torch.{plan.precision.dtype}):\n'
            f"    out = {var}(inputs)  # the forward only\n"
            f"loss = loss_fn(out.float(), targets)  # {model}'s output back to fp32"
        )
    if not isinstance(plan.checkpointing, NoCheckpointing) and done("checkpointing"):
        out.append(
            "from torch.utils.checkpoint import checkpoint\n"
            "x = checkpoint(block, x, use_reentrant=False)  # for each repeated block, in the model's forward"
        )
    if plan.compile != Compile() and done("compile"):
        mode = "" if plan.compile.mode == "default" else f'mode="{plan.compile.mode}"'
        out.append(f"{var}.compile({mode})  # after building {model}, before the training loop")
    if isinstance(plan.parallel, DDP):
        out += _ddp_lines(plan.parallel, done)
    if not isinstance(plan.precision, (FP32, Autocast)):
        out.append(f"# {plan.precision.kind}: not expressible as a script edit; use torchsmith.prepare(plan, ...)")
    return out


def _ddp_lines(cfg: DDP, done: Callable[[str], bool]) -> list[str]:
    """The script's DDP call as it should be written, with the knobs the injection applied."""
    base = DDP()
    args = [f"{f}={getattr(cfg, f)}" for f in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph")
            if getattr(cfg, f) != getattr(base, f) and done(f"ddp.{f}")]
    out = []
    if args:
        out.append(f"model = DistributedDataParallel(model, {', '.join(args)})  # your DDP(...) call, with these added")
    if cfg.comm_hook is not None and done("ddp.comm_hook"):
        from torchsmith.distributed.ddp import comm_hook_code

        out.append(comm_hook_code(cfg) + "  # after DDP(...), before the first forward")
    return out


def summarise_written(paths: list[str], keep: int = 20) -> list[str]:
    """The files a run opened for writing, with compile caches (one entry each) collapsed."""
    caches: dict[str, int] = {}
    rest = []
    for p in paths:
        m = re.search(r"^(.*?/(torchinductor_[^/]+|triton|\.triton|torch_extensions))(/|$)", p)
        if m:
            caches[m.group(1)] = caches.get(m.group(1), 0) + 1
        else:
            rest.append(p)
    out = [p for p in rest[:keep]]
    if len(rest) > keep:
        out.append(f"... and {len(rest) - keep} more")
    out += [f"{root}{os.sep} ({n} files: compile cache)" for root, n in sorted(caches.items())]
    return out

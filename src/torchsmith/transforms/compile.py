"""torch.compile of the whole model or of each repeated block (regional compilation)."""

from __future__ import annotations

from torch import nn

from torchsmith.plan import Compile
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied, register


def apply_compile(model: nn.Module, cfg: Compile) -> Change:
    """Compile in place with ``nn.Module.compile`` so state_dict keys stay unchanged.

    Compilation itself happens lazily at the first call; the engine times that call apart.

    >>> change = apply_compile(model, Compile(enabled=True, regional=True))  # doctest: +SKIP
    """
    change = Change("compile", "eager, as written")
    if not cfg.enabled:
        return change
    if cfg.regional:
        blocks = getattr(model, "blocks", None)
        if not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or len(blocks) == 0:
            raise TransformError(
                f"regional compile needs repeated blocks at `model.blocks` (an nn.ModuleList); "
                f"{type(model).__name__} has {type(blocks).__name__ if blocks is not None else 'none'}.\n"
                "Tip: use Compile(enabled=True, regional=False) to compile the whole model."
            )
        targets = [(f"blocks.{i}", b) for i, b in enumerate(blocks)]
    else:
        targets = [("", model)]
    mark_applied(model, "compile", change)
    for name, module in targets:
        module.compile(mode=cfg.mode)
        change.on_revert(lambda m=module: setattr(m, "_compiled_call_impl", None))
        change.targets.append(name or type(model).__name__)
    change.summary = f"torch.compile(mode={cfg.mode!r}) of " + (f"{len(targets)} blocks" if cfg.regional else "the whole model")
    return change


def _candidates(device: DeviceInfo) -> list[Compile]:
    return [Compile(enabled=True), Compile(enabled=True, regional=True)]


register(TransformInfo(
    name="compile",
    plan_field="compile",
    summary="torch.compile the whole model or each repeated block.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
))

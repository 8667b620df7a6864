"""The plan's DDP knobs in the script's own ``DistributedDataParallel(...)``, without an edit.

:func:`patch_ddp` wraps ``DistributedDataParallel.__init__``: the knobs the plan changes from
PyTorch's defaults (``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``) become
constructor arguments, and ``comm_hook`` is registered (``register_comm_hook(process_group,
fp16_compress_hook)``) just before the model's first forward. Not at construction: a script that
registers its own hook after ``DDP(...)`` would then fail (DDP takes one hook per model); at the
first forward its hook is there, and kept.

A knob the plan leaves at PyTorch's default is not touched, so the script's own value stays. A
knob the plan changes wins over the script's own argument (the plan is what was measured), and
its outcome's ``detail`` names the value it replaced: ``bucket_cap_mb=100 (the script passed
bucket_cap_mb=50)``. Each knob reports under ``ddp.<field>``; ``parallel`` reports when the script
constructs no DDP (``not_applied``) or the plan's strategy is not DDP (``refused``: the script owns
its strategy).

:func:`observe_ddp` only lists each DDP the script builds (its bucket size, bucket view, static
graph): the tuner searches the DDP knobs only for a script that builds one.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torchsmith.inject.outcome import OutcomeStatus, record
from torchsmith.plan import DDP

DDP_FIELDS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook")
"""The plan's DDP fields a script's DDP takes, each reported under ``ddp.<field>``."""
HOOK_NAMES = {"fp16": "default_hooks.fp16_compress_hook", "bf16": "default_hooks.bf16_compress_hook",
              "powersgd": "powerSGD_hook.powerSGD_hook"}
"""comm_hook -> its function in ``torch.distributed.algorithms.ddp_comm_hooks``."""


def outcome_key(field: str) -> str:
    """The key of ``field``'s outcome: ``ddp.bucket_cap_mb``."""
    return f"ddp.{field}"


def changed_fields(cfg: DDP) -> dict[str, Any]:
    """The fields of ``cfg`` that differ from ``DDP()`` (PyTorch's defaults): the ones to set."""
    base = DDP()
    return {f: getattr(cfg, f) for f in DDP_FIELDS if getattr(cfg, f) != getattr(base, f)}


def patch_ddp(cfg: DDP, applied: dict[str, dict[str, str]], seen: list[dict[str, Any]]) -> None:
    """Make every ``DistributedDataParallel`` this process builds take ``cfg``'s changed fields."""
    from torch.nn.parallel import DistributedDataParallel

    wanted = changed_fields(cfg)
    orig = DistributedDataParallel.__init__
    sig = inspect.signature(orig)
    ctor = {k: v for k, v in wanted.items() if k != "comm_hook"}

    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the class's __init__
        bound = sig.bind_partial(self, *args, **kwargs).arguments
        call = {n: x for n, x in bound.items() if n != "self"}  # by name: positional ones too
        overrides = {k: v for k, v in ctor.items() if not (k == "bucket_cap_mb" and "bucket_cap_mb_list" in call)}
        orig(self, **{**call, **overrides})
        for k in ctor:
            record(applied, outcome_key(k), *constructor_outcome(k, ctor[k], call))
        if "comm_hook" in wanted:
            _register_hook_before_first_forward(self, cfg, applied)
        seen.append(ddp_facts(self))

    DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]  # the injection's purpose


def observe_ddp(seen: list[dict[str, Any]]) -> None:
    """List each DDP the script builds, as written (for a plan without DDP knobs)."""
    from torch.nn.parallel import DistributedDataParallel

    orig = DistributedDataParallel.__init__

    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the class's __init__
        orig(self, *args, **kwargs)
        seen.append(ddp_facts(self))

    DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]  # observes only


def refuse_strategy(plan_parallel: Any, applied: dict[str, dict[str, str]]) -> None:
    """A script plan's strategy other than DDP (``Zero1``, ``FSDP2``): the script owns its strategy."""
    record(applied, "parallel", "refused", strategy_refusal(plan_parallel))


def strategy_refusal(plan_parallel: Any) -> str:
    """Why ``parallel=<kind>`` cannot be put into a script from outside, in words."""
    return (f"parallel={plan_parallel.kind} cannot be injected into a script: the script builds its own "
            "strategy (its DistributedDataParallel, ZeroRedundancyOptimizer or fully_shard calls); only "
            "DDP's knobs (bucket_cap_mb, gradient_as_bucket_view, static_graph, comm_hook) reach the script's "
            "own DistributedDataParallel")


def no_ddp_built(applied: dict[str, dict[str, str]]) -> None:
    """At the end of a run whose plan has DDP knobs: when no DDP was built, say so (once)."""
    record(applied, "parallel", "not_applied", "the script constructs no torch.nn.parallel.DistributedDataParallel",
           keep=True)


def ddp_facts(model: Any) -> dict[str, Any]:
    """What a built DDP runs with: bucket bytes, bucket view, static graph, world size."""
    return {"bucket_bytes_cap": int(model.bucket_bytes_cap),
            "gradient_as_bucket_view": bool(model.gradient_as_bucket_view),
            "static_graph": bool(model.static_graph), "world_size": int(model.process_group.size()),
            "backend": str(_backend(model))}


def constructor_outcome(field: str, value: Any, call: dict[str, Any]) -> tuple[OutcomeStatus, str]:
    """(status, detail) of setting ``field=value`` in a DDP call whose own arguments were ``call``."""
    if field == "bucket_cap_mb" and "bucket_cap_mb_list" in call:
        return "as_written", "the script sets per-bucket sizes (bucket_cap_mb_list): kept"
    if field not in call or call[field] is None:
        return "applied", f"DistributedDataParallel(..., {field}={value})"
    if call[field] == value:
        return "as_written", f"the script passes {field}={value} itself"
    return "applied", f"DistributedDataParallel(..., {field}={value}) (the script passed {field}={call[field]})"


def _register_hook_before_first_forward(model: Any, cfg: DDP, applied: dict[str, dict[str, str]]) -> None:
    key, hook = outcome_key("comm_hook"), cfg.comm_hook
    assert hook is not None  # called only when the plan sets a hook
    backend = _backend(model)
    if hook == "bf16" and backend != "nccl":
        record(applied, key, "refused", f"comm_hook=bf16 needs the NCCL backend; this process group uses {backend} "
                                        "(fp16 compression works on gloo)")
        return
    handle: list[Any] = []

    def before_first_forward(module: Any, args: Any) -> None:
        handle.pop().remove()
        if module._comm_hooks:  # noqa: SLF001 - DDP's own list of registered hooks; no public reader
            name = getattr(module._comm_hooks[0][0], "__qualname__", "its own")  # noqa: SLF001
            record(applied, key, "as_written", f"the script registers its own comm hook ({name}): kept")
            return
        from torchsmith.distributed.ddp import comm_hook

        try:
            module.register_comm_hook(*comm_hook(cfg, module.process_group))
        except (RuntimeError, ValueError) as err:
            record(applied, key, "refused", f"register_comm_hook({HOOK_NAMES[hook]}): {err}")
            return
        state = "PowerSGDState(process_group, ...)" if hook == "powersgd" else "process_group"
        record(applied, key, "applied", f"model.register_comm_hook({state}, {HOOK_NAMES[hook]})")

    handle.append(model.register_forward_pre_hook(before_first_forward))


def _backend(model: Any) -> str:
    import torch.distributed as dist

    return str(dist.get_backend(model.process_group))

"""The input pipeline: rebuild a workload's DataLoader with the plan's loader arguments.

Only workloads that give a loader factory (``Workload.loader``) can be changed; their
batches as written are ``workload.batches``. The transform builds the training source
once per run, so persistent workers live across epochs, and its Change stops them on revert.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchsmith.plan import LoaderConfig, Threads
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo


def apply_loader(workload: Any, cfg: LoaderConfig) -> tuple[Iterable[Any] | None, Change]:
    """The training batch source under ``cfg`` (None: the workload's batches as written), and the Change.

    >>> source, change = apply_loader(load_workload("cnn-mini"), LoaderConfig(num_workers=2))
    >>> change.summary
    'DataLoader num_workers=2, prefetch_factor=2, persistent_workers=False, ...'
    """
    if workload.loader is None:
        if cfg != LoaderConfig():
            raise TransformError(
                f"the plan sets loader arguments ({_set_fields(cfg)}) but workload {workload.name!r} has no "
                "loader factory, so its batches cannot be rebuilt.\n"
                "Tip: give Workload(loader=lambda cfg: torchsmith.data.loader.make_loader(dataset, cfg, ...)), "
                "or drop the loader section from the plan.")
        # None: the engine keeps calling workload.iter_batches() at each epoch, as written.
        return None, Change("loader", "batches as written (no loader factory)")
    source = workload.loader(cfg)
    args = getattr(source, "args", None)
    summary = f"DataLoader {args.describe()}" if args is not None else f"loader factory with {_set_fields(cfg)}"
    change = Change("loader", summary, targets=["workload.loader"])
    if hasattr(source, "close"):
        change.on_revert(source.close)
    return source, change


def _set_fields(cfg: LoaderConfig) -> str:
    fields = {k: v for k, v in vars(cfg).items() if v is not None}
    return ", ".join(f"{k}={v}" for k, v in fields.items()) or "as written"


def _candidates(device: DeviceInfo) -> list[LoaderConfig]:
    # Workers overlap decoding with the step; persistent ones skip the start-up at every epoch.
    # One worker per core too: when decoding is most of the step, the trainer mostly waits and
    # all cores decode. More workers than cores only adds contention.
    counts = sorted({1, max(1, device.cores // 2), device.cores})
    pin = [None, True] if device.type == "cuda" else [None]
    return [LoaderConfig(num_workers=n, persistent_workers=True, pin_memory=p) for n in counts for p in pin]


def _companions(device: DeviceInfo, cfg: LoaderConfig) -> list[dict[str, Any]]:
    """On CPU, workers and the trainer's intra-op threads share the cores: also try each worker
    count with the trainer's threads cut to the cores the workers leave (at least one).

    On 2 cores with cnn-mini, data-bound as written, neither one trainer thread nor 2 workers wins
    alone and the pair does (``benchmarks/tune_data_bound.py`` measures all three), so a search over
    one knob at a time never reaches the pair."""
    if device.type != "cpu" or not cfg.num_workers:
        return []
    return [{"threads": Threads(intra_op=threads_beside_workers(device.cores, cfg.num_workers))}]


def threads_beside_workers(cores: int, workers: int) -> int:
    """Trainer intra-op threads that leave one core to each DataLoader worker (at least one)."""
    return max(1, cores - workers)


INFO = TransformInfo(
    name="loader",
    plan_field="loader",
    summary="DataLoader workers, prefetch and pinning for workloads with a loader factory.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    companions=_companions,
    trade="speed",
    rank=lambda device: 4,
)

"""``run``: train a workload under a plan, with progress, metrics and exact checkpoint/resume."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from torchsmith.engine.checkpoint import (
    load_latest_checkpoint, prune_checkpoints, save_checkpoint,
)
from torchsmith.distributed.session import DistSession
from torchsmith.engine.evaluate import evaluate
from torchsmith.engine.step import Step, prepare
from torchsmith.measure.timing import PhaseSummary, PhaseTimer
from torchsmith.plan import Plan
from torchsmith.seeding import rng_state, seed_everything, set_rng_state
from torchsmith.transforms.loader import apply_loader
from torchsmith.workload import Workload


@dataclass(frozen=True)
class StepInfo:
    step: int
    total_steps: int
    loss: float | None
    """None on steps where the loss was not read (reading it is a sync point on CUDA)."""
    step_seconds: float
    items_per_s: float | None


@dataclass
class RunCallbacks:
    """The few named points where ``run`` reports progress. All optional."""

    on_start: Callable[[int, int], None] | None = None
    """(first step to run, total steps)"""
    on_step: Callable[[StepInfo], None] | None = None
    on_eval: Callable[[int, float], None] | None = None
    on_checkpoint: Callable[[Path], None] | None = None


@dataclass
class RunResult:
    workload: str
    plan: Plan
    device: str
    start_step: int
    """Steps already done before this process started (0 unless resumed)."""
    end_step: int
    losses: list[float]
    """Training loss of each step run by this process, steps start_step+1 .. end_step."""
    val_losses: list[tuple[int, float]]
    phases: PhaseSummary
    first_step_seconds: float
    """The first step, including one-off costs such as compilation."""
    throughput: float | None
    throughput_unit: str
    resumed_from: Path | None = None
    skipped_checkpoints: list[tuple[Path, str]] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    """Extra measurements (peak memory, FLOPs, MFU) filled in by ``measure``."""
    compile_seconds: float = 0.0
    """Time torch.compile spent tracing and compiling (forward and backward) during the run, as
    Dynamo records it; part of ``first_step_seconds`` (and of any step that recompiled)."""

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def final_val_loss(self) -> float | None:
        return self.val_losses[-1][1] if self.val_losses else None


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def build_step(workload: Workload, plan: Plan, device: torch.device) -> Step:
    """Seeded fresh model and optimizer for ``workload``, with ``plan`` applied."""
    seed_everything(workload.seed)
    model = workload.model().to(device)
    optimizer = workload.optimizer(model.parameters())
    scheduler = workload.scheduler(optimizer) if workload.scheduler else None
    return prepare(plan, model, optimizer, workload.loss, scheduler=scheduler, device=device)


def run(workload: Workload, plan: Plan | None = None, *, steps: int = 100, eval_every: int | None = None,
        eval_batches: int = 10, checkpoint_dir: str | Path | None = None, checkpoint_every: int | None = None,
        resume: bool = False, device: str | torch.device | None = None, log_every: int = 1,
        callbacks: RunCallbacks | None = None, keep_last_k: int | None = 3,
        async_checkpoint: bool = False) -> RunResult:
    """Train ``workload`` for ``steps`` total optimizer steps under ``plan``.

    ``steps`` counts from the start of training: resuming a 10-step checkpoint with
    ``steps=20`` runs steps 11..20 and ends exactly where an uninterrupted 20-step run
    ends (bit for bit on CPU).

    Only the newest ``keep_last_k`` checkpoints are kept (None keeps all). Under torchrun
    (``torchsmith launch``) each rank trains on its slice of every batch, and checkpoints are
    DCP step directories, optionally written in the background (``async_checkpoint``).

    Example::

        result = torchsmith.run(torchsmith.load_workload("gpt-mini"), steps=200,
                                checkpoint_dir="ckpt", checkpoint_every=50)
        result.final_loss, result.throughput, result.throughput_unit
    """
    plan = plan or Plan()
    cb = callbacks or RunCallbacks()
    device = resolve_device(device)
    # Under torchrun: join the group, DDP by default, batch slices, DCP checkpoints (distributed/session.py).
    distributed = DistSession.from_env(device, checkpoint_dir, keep_last_k=keep_last_k, async_save=async_checkpoint)
    if distributed is not None:
        device, plan = distributed.ctx.device, distributed.plan(plan)
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs a checkpoint_dir to resume from.\nTip: pass --checkpoint-dir DIR.")
    step_fn = build_step(workload, plan, device)
    start, position, resumed, skipped, resume_rng = 0, (0, 0), None, [], None
    if resume:
        loaded = distributed.load_latest(step_fn) if distributed else load_latest_checkpoint(checkpoint_dir)
        if loaded is not None:
            start, position, epoch_rng = _restore(step_fn, loaded.state)
            resumed, skipped = loaded.path, loaded.skipped
            resume_rng = (epoch_rng, loaded.state["rng"])
    if steps < start:
        raise ValueError(f"--steps {steps} is below the checkpoint's step {start}; steps counts the total run.\n"
                         f"Tip: pass --steps {start + 1} or more to continue training.")
    # On resume, the data iterator is rebuilt from the RNG state of its epoch's start, then the
    # RNG is set to the checkpoint's: the data source may draw from the global RNG too.
    source, loader_change = apply_loader(workload, plan.loader)  # plan.loader rebuilds a factory-made loader
    batches = _batches(workload, *position, resume_rng=resume_rng, source=source)

    unit, per_batch = workload.throughput_unit
    timer = PhaseTimer(sync_cuda=device.type == "cuda")
    step_fn.timer = timer
    losses: list[torch.Tensor] = []
    val_losses: list[tuple[int, float]] = []
    checkpoints: list[Path] = []
    memory: dict[str, Any] = {}
    from torchsmith.transforms.compile import compile_seconds

    compiled_before = compile_seconds()
    if cb.on_start:
        cb.on_start(start, steps)
    for step in range(start + 1, steps + 1):
        t0 = time.perf_counter()
        epoch, index, batch, epoch_rng = next(batches)
        timer.add("data", time.perf_counter() - t0)
        # Peak memory is tracked on the second step (a warm-up step, outside the median): the first
        # may include compilation, and tracking costs ~10% of a step on CPU.
        with _track_memory(step_fn, memory, enabled=step == min(start + 2, steps)):
            losses.append(step_fn(distributed.shard(batch) if distributed else batch))
        times = timer.end_step()
        if cb.on_step:
            read = step % log_every == 0 or step == steps
            rate = per_batch / times["step"] if per_batch and times["step"] > 0 else None
            cb.on_step(StepInfo(step, steps, losses[-1].item() if read else None, times["step"], rate))
        if eval_every and (step % eval_every == 0 or step == steps):
            val = evaluate(step_fn.model, workload.iter_eval_batches(), workload.loss, device, eval_batches)
            if val is not None:
                val_losses.append((step, val))
                if cb.on_eval:
                    cb.on_eval(step, val)
        if checkpoint_dir is not None and (step == steps or (checkpoint_every and step % checkpoint_every == 0)):
            if distributed is not None:
                checkpoints.append(distributed.save(step_fn, step, plan, (epoch, index + 1), epoch_rng))
            else:
                state = _state(step_fn, plan, (epoch, index + 1), epoch_rng)
                checkpoints.append(save_checkpoint(checkpoint_dir, step, state))
                prune_checkpoints(checkpoint_dir, keep_last_k)
            if cb.on_checkpoint:
                cb.on_checkpoint(checkpoints[-1])

    loader_change.revert()  # stops persistent workers now, not at garbage collection
    if distributed is not None:
        distributed.finish()  # commit an async checkpoint still being written
        losses = list(distributed.losses(torch.stack(losses))) if losses else losses
    summary = timer.summary(warmup=min(2, max(0, len(timer.steps) - 1)))
    return RunResult(
        workload=workload.name, plan=plan, device=str(device), start_step=start, end_step=steps,
        losses=torch.stack(losses).tolist() if losses else [], val_losses=val_losses, phases=summary,
        first_step_seconds=timer.steps[0]["step"] if timer.steps else 0.0,
        throughput=per_batch / summary.step_median if per_batch and summary.step_median else None,
        throughput_unit=f"{unit}/s", resumed_from=resumed, skipped_checkpoints=skipped,
        checkpoints=checkpoints, changes=step_fn.describe() + ([f"loader: {loader_change.summary}"] if workload.loader else []),
        metrics=memory, compile_seconds=compile_seconds() - compiled_before,
    )


@contextmanager
def _track_memory(step_fn: Step, out: dict[str, Any], enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    from torchsmith.measure.memory import track_peak_memory

    parts = step_fn.parts
    with track_peak_memory(parts.device, live=(parts.model, parts.optimizer)) as mem:
        yield
    out["peak_memory_bytes"] = mem.result.peak_bytes
    out["peak_memory_method"] = mem.result.method


def _batches(workload: Workload, epoch: int, index: int, resume_rng: tuple[dict, dict] | None = None,
             source: Any = None) -> Iterator[tuple[int, int, Any, dict]]:
    """Yield (epoch, index, batch, RNG state at the epoch's start) forever, from a data position.

    After a resume the epoch's iterator is rebuilt from the same RNG state and fast-forwarded
    past ``index`` batches, so the remaining batches equal the uninterrupted run's.
    """
    while True:
        if resume_rng is not None:
            set_rng_state(resume_rng[0])
        epoch_rng = rng_state()
        src = source if source is not None else workload.iter_batches()
        if hasattr(src, "set_epoch"):
            src.set_epoch(epoch)
        skip = index
        if index and hasattr(src, "set_start"):
            src.set_start(index)  # a resumable loader starts at the position: nothing is re-read
            skip = 0
        it = iter(src)
        seen = index - skip + sum(1 for _ in zip(range(skip), it))  # fast-forward after a resume
        if resume_rng is not None:
            set_rng_state(resume_rng[1])
            resume_rng = None
        for i, batch in enumerate(it, start=index):
            seen += 1
            yield epoch, i, batch, epoch_rng
        if seen == 0:
            raise ValueError(f"workload {workload.name!r} yielded no batches in epoch {epoch}.\n"
                             "Tip: check that `batches` is re-iterable (a list or DataLoader, not a generator).")
        epoch, index = epoch + 1, 0


def _state(step_fn: Step, plan: Plan, position: tuple[int, int], epoch_rng: dict) -> dict[str, Any]:
    parts = step_fn.parts
    return {
        "model": parts.model.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict() if parts.scheduler is not None else None,
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "rng": rng_state(),
        "epoch_rng": epoch_rng,
        "data_position": {"epoch": position[0], "index": position[1]},
        "plan": plan.to_dict(),
    }


def _restore(step_fn: Step, state: dict[str, Any]) -> tuple[int, tuple[int, int], dict]:
    parts = step_fn.parts
    if "model" in state:  # a distributed checkpoint was already loaded in place (distributed/checkpoint.py)
        parts.model.load_state_dict(state["model"])
        parts.optimizer.load_state_dict(state["optimizer"])
    if parts.scheduler is not None and state.get("scheduler") is not None:
        parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler is not None and state.get("scaler") is not None:
        parts.scaler.load_state_dict(state["scaler"])
    pos = state["data_position"]
    return int(state["step"]), (int(pos["epoch"]), int(pos["index"])), state["epoch_rng"]

"""``run``: train a workload under a plan, with progress, metrics and exact checkpoint/resume."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from torchsmith.distributed.runtime import under_torchrun
from torchsmith.engine.evaluate import evaluate
from torchsmith.engine.identity import RunIdentity, inherited_run_id, plan_fingerprint, workload_fingerprint
from torchsmith.engine.outcome import RunFailedError, check_outcome  # noqa: F401  (RunFailedError re-exported)
from torchsmith.engine.preemption import Preempted, Preemption, preemption_handler
from torchsmith.engine.run_checkpoints import DistCheckpoints, LocalCheckpoints, restore
from torchsmith.engine.step import Step, prepare
from torchsmith.measure.timing import PhaseSummary, PhaseTimer
from torchsmith.plan import Plan
from torchsmith.seeding import rng_state, seed_everything, set_rng_state
from torchsmith.text import first_line
from torchsmith.transforms.loader import apply_loader
from torchsmith.workload import Workload

if TYPE_CHECKING:
    from torchsmith.engine.dist_session import DistSession

log = logging.getLogger(__name__)

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
    """The last step trained: ``steps``, or the step a stop signal ended training after."""
    losses: list[float]
    """Training loss of each step run by this process, steps start_step+1 .. end_step."""
    val_losses: list[tuple[int, float]]
    phases: PhaseSummary
    first_step_seconds: float
    """The first step, including one-off costs such as compilation."""
    throughput: float | None
    throughput_unit: str
    resumed_from: Path | None = None
    resume_note: str | None = None
    """Set when ``resume`` found nothing to resume (training started at step 0)."""
    skipped_checkpoints: list[tuple[Path, str]] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    """Extra measurements (peak memory, FLOPs, MFU) filled in by ``measure``."""
    compile_seconds: float = 0.0
    """Time torch.compile spent tracing and compiling (forward and backward) during the run, as
    Dynamo records it; part of ``first_step_seconds`` (and of any step that recompiled)."""
    stop_signal: int = 0
    """The signal (SIGTERM, SIGUSR1) that ended training after ``end_step``, saved; 0: it ran to ``steps``."""

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def final_val_loss(self) -> float | None:
        return self.val_losses[-1][1] if self.val_losses else None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/``"auto"``: CUDA when available. A device this machine lacks is a one-line error."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"--device {device!r} is not a device ({first_line(err)}).\n"
                         "Tip: use cpu, cuda, cuda:1 or auto.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"--device {device}: {why} (torch {torch.__version__}).\n"
                             "Tip: pass --device cpu, or --device auto to use a GPU only when there is one.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible.\n"
                             f"Tip: use cuda:0 .. cuda:{torch.cuda.device_count() - 1}.")
    return dev


def build_step(workload: Workload, plan: Plan, device: torch.device) -> Step:
    """Seeded fresh model and optimizer for ``workload``, with ``plan`` applied."""
    return _build(workload, plan, plan, device)[0]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """How ``run`` trains: steps, evaluation, checkpoints and what counts as failure."""

    steps: int = 100
    """Total optimizer steps of the run, counted from the start of training (a resume continues up to it)."""
    eval_every: int | None = None
    """Validation loss every K steps and at the end; None: no validation."""
    eval_batches: int = 10
    """Validation batches per evaluation."""
    checkpoint_dir: str | Path | None = None
    """Where checkpoints go; None: no checkpoints."""
    checkpoint_every: int | None = None
    """Checkpoint every K steps (always at the last step when ``checkpoint_dir`` is set)."""
    resume: bool = False
    """Continue from the newest good checkpoint in ``checkpoint_dir`` (nothing there: start at step 0, and say so)."""
    overwrite: bool = False
    """A fresh run into a directory holding checkpoints deletes them first; without it, the run refuses."""
    force: bool = False
    """Resume even from a checkpoint written with another workload or plan fingerprint."""
    device: str | torch.device | None = None
    """cpu, cuda, cuda:1; None or "auto": CUDA when available."""
    log_every: int = 1
    """Read the loss for progress every K steps (a CPU-GPU sync point on CUDA)."""
    keep_last_k: int | None = 3
    """Keep this run's newest K checkpoints; None keeps all."""
    async_checkpoint: bool = False
    """Under torchrun: write DCP checkpoints in a background thread."""
    allow_nonfinite: bool = False
    """Return normally even when the final loss is non-finite or every step was skipped as non-finite."""
    phase_sync: bool = False
    """On CUDA, synchronise at every phase boundary for exact forward/backward/optimizer times
    (slower steps). Off: one sync per step, so the step time is exact and the phases are launch times."""


def run(workload: Workload, plan: Plan | None = None, *, callbacks: RunCallbacks | None = None,
        config: RunConfig | None = None, **options: Any) -> RunResult:
    """Train ``workload`` for ``steps`` total optimizer steps under ``plan``.

    Options are the fields of :class:`RunConfig`, given as keywords or as ``config``.
    ``steps`` counts from the start of training: resuming a 10-step checkpoint with
    ``steps=20`` runs steps 11..20 and ends exactly where an uninterrupted 20-step run
    ends (bit for bit on CPU). A restarted torchrun attempt of the same job resumes its own
    newest checkpoint without ``resume`` (see ``engine/run_checkpoints.py``).

    Raises :class:`RunFailedError` (holding the result) when the final loss is non-finite or
    every step was skipped as non-finite, unless ``allow_nonfinite``; and, with a
    ``checkpoint_dir``, :class:`Preempted` after SIGTERM or SIGUSR1, once the step under way
    has finished and been saved (``engine/preemption.py``).

    Example::

        result = torchsmith.run(torchsmith.load_workload("gpt-mini"), steps=200,
                                checkpoint_dir="ckpt", checkpoint_every=50)
        result.final_loss, result.throughput, result.throughput_unit
    """
    cfg = dataclasses.replace(config, **options) if config is not None else RunConfig(**options)
    user_plan = plan or Plan()
    device = resolve_device(cfg.device)
    # Under torchrun: join the group, DDP by default, batch slices, DCP checkpoints (engine/dist_session.py,
    # imported only there: torch.distributed.checkpoint alone takes a second to import).
    distributed = None
    if under_torchrun():
        from torchsmith.engine.dist_session import DistSession

        distributed = DistSession.from_env(device, cfg.checkpoint_dir, keep_last_k=cfg.keep_last_k,
                                           async_save=cfg.async_checkpoint)
    plan = distributed.plan(user_plan) if distributed else user_plan
    device = distributed.ctx.device if distributed else device
    run_id = distributed.agreed(inherited_run_id()) if distributed else inherited_run_id()
    ckpt = _checkpoints(cfg, distributed)
    try:
        # Before any compute: writable, no other live writer, and not another run's files.
        continues = ckpt.prepare(cfg.resume, cfg.overwrite, run_id) if ckpt is not None else False
        step_fn, identity = _build(workload, plan, user_plan, device, run_id)
        resumed, identity, note = _resume(cfg, ckpt, step_fn, identity, continues)
        ctx = RunContext(workload=workload, plan=plan, cfg=cfg, callbacks=callbacks or RunCallbacks(),
                         step_fn=step_fn, checkpoints=ckpt, identity=identity, distributed=distributed,
                         device=device)
        with preemption_handler(enabled=ckpt is not None, redeliver_on_error=distributed is not None) as preemption:
            result = _train(ctx, _start_point(step_fn, resumed, cfg.steps), preemption)
    finally:
        if ckpt is not None:
            ckpt.release()  # the directory is free for the next process (a restart, a --resume)
    result.resumed_from, result.resume_note = (resumed.path if resumed else None), note
    result.skipped_checkpoints = resumed.skipped if resumed else []
    if result.stop_signal:
        stopped = Preempted(result.stop_signal, result.end_step, result.checkpoints[-1], result)
        if distributed is None or distributed.ctx.rank == 0:
            log.warning("%s", stopped)  # the one line that says where the work since the last checkpoint went
        raise stopped
    check_outcome(result, step_fn, cfg.allow_nonfinite)
    return result


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What the loop of one run works with, built once by ``run`` before step 1."""

    workload: Workload
    plan: Plan
    """The plan as applied (under torchrun ``Single`` has become ``DDP``)."""
    cfg: RunConfig
    callbacks: RunCallbacks
    step_fn: Step
    checkpoints: Any
    """LocalCheckpoints, DistCheckpoints (under torchrun) or None: no checkpoint directory."""
    identity: RunIdentity
    distributed: DistSession | None
    device: torch.device


@dataclass(frozen=True)
class StartPoint:
    """Where training starts: 0 for a fresh run, a checkpoint's step after a resume."""

    step: int = 0
    position: tuple[int, int] = (0, 0)
    """(epoch, batch index) of the next batch."""
    rng: tuple[dict, dict] | None = None
    """(RNG state at that epoch's start, RNG state at the checkpoint); None for a fresh run."""


def _start_point(step_fn: Step, resumed: Any, steps: int) -> StartPoint:
    if resumed is None:
        return StartPoint()
    start, position, epoch_rng = restore(step_fn, resumed.state)
    if steps < start:
        raise ValueError(f"--steps {steps} is below the checkpoint's step {start}; steps counts the total run.\n"
                         f"Tip: pass --steps {start + 1} or more to continue training.")
    return StartPoint(start, position, (epoch_rng, resumed.state["rng"]))


def _checkpoints(cfg: RunConfig, distributed: DistSession | None) -> Any:
    if cfg.resume and cfg.checkpoint_dir is None:
        raise ValueError("resume=True needs a checkpoint_dir to resume from.\nTip: pass --checkpoint-dir DIR.")
    if cfg.checkpoint_dir is None:
        return None
    if distributed is not None:
        return DistCheckpoints(distributed)
    return LocalCheckpoints(Path(cfg.checkpoint_dir), cfg.keep_last_k)


def _build(workload: Workload, plan: Plan, user_plan: Plan, device: torch.device,
           run_id: str | None = None) -> tuple[Step, RunIdentity]:
    """``build_step``, plus this run's identity (fingerprints of the model as built, before the plan)."""
    seed_everything(workload.seed)
    model = workload.model().to(device)
    optimizer = workload.optimizer(model.parameters())
    identity = RunIdentity.fresh(workload_fingerprint(workload, model, optimizer), plan_fingerprint(user_plan),
                                 run_id)
    scheduler = workload.scheduler(optimizer) if workload.scheduler else None
    return prepare(plan, model, optimizer, workload.loss, scheduler=scheduler, device=device), identity


def _resume(cfg: RunConfig, ckpt: Any, step_fn: Step, identity: RunIdentity,
            continues: bool) -> tuple[Any, RunIdentity, str | None]:
    """(the checkpoint resumed from or None, this run's identity, a note when there was nothing to resume).

    ``continues``: a restarted attempt of the run that owns checkpoints in the directory; it
    resumes that run's newest good one with no ``resume`` flag."""
    if not (cfg.resume or continues):
        return None, identity, None
    resumed = ckpt.load(step_fn, identity, cfg.force, own_only=continues)
    if resumed is None:
        note = f"--resume found no checkpoint in {cfg.checkpoint_dir}: nothing to resume, training starts at step 0."
        log.warning(note)
        return None, identity, note
    if continues:
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        log.info("run %s restarted (torchrun restart %s): resuming its checkpoint %s (step %s)",
                 identity.run_id, restart, resumed.path, resumed.state.get("step"))
    return resumed, identity.adopt(resumed.run_id), None


def _train(ctx: RunContext, start: StartPoint, preemption: Preemption) -> RunResult:
    """The training loop proper: steps start+1 .. cfg.steps, evaluation and checkpoints; a stop
    signal ends it after the step under way, with that step saved."""
    cfg, step_fn, distributed = ctx.cfg, ctx.step_fn, ctx.distributed
    # On resume, the data iterator is rebuilt from the RNG state of its epoch's start, then the
    # RNG is set to the checkpoint's: the data source may draw from the global RNG too.
    source, loader_change = apply_loader(ctx.workload, ctx.plan.loader)  # rebuilds a factory-made loader
    batches = _batches(ctx.workload, *start.position, resume_rng=start.rng, source=source)
    on_cuda = ctx.device.type == "cuda"
    timer = PhaseTimer(sync_cuda=cfg.phase_sync and on_cuda, sync_step=on_cuda and not cfg.phase_sync)
    step_fn.timer = timer
    out = _Trained()
    from torchsmith.transforms.compile import compile_seconds

    compiled_before = compile_seconds()
    if ctx.callbacks.on_start:
        ctx.callbacks.on_start(start.step, cfg.steps)
    step = start.step
    for step in range(start.step + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        epoch, index, batch, epoch_rng = next(batches)
        timer.add("data", time.perf_counter() - t0)
        # Peak memory is tracked on the second step (a warm-up step, outside the median): the first
        # may include compilation, and on CPU tracking (the profiler's allocator events) slows the step it watches.
        with _track_memory(step_fn, out.memory, enabled=step == min(start.step + 2, cfg.steps)):
            out.losses.append(step_fn(distributed.shard(batch) if distributed else batch))
        _report_step(ctx, step, out.losses[-1], timer.end_step())
        _evaluate_if_due(ctx, step, out.val_losses)
        out.stop_signal = preemption.stop_signal(distributed)  # the named point where a stop signal ends training
        if out.stop_signal or _checkpoint_due(cfg, step):
            _save(ctx, step, (epoch, index + 1), epoch_rng, out)
        if out.stop_signal:
            break

    loader_change.revert()  # stops persistent workers now, not at garbage collection
    losses = out.losses
    if distributed is not None:
        distributed.finish()  # commit an async checkpoint still being written
        losses = list(distributed.losses(torch.stack(losses))) if losses else losses
    summary = timer.summary(warmup=min(2, max(0, len(timer.steps) - 1)))
    unit, per_batch = ctx.workload.throughput_unit
    return RunResult(
        workload=ctx.workload.name, plan=ctx.plan, device=str(ctx.device), start_step=start.step, end_step=step,
        losses=torch.stack(losses).tolist() if losses else [], val_losses=out.val_losses, phases=summary,
        first_step_seconds=timer.steps[0]["step"] if timer.steps else 0.0,
        throughput=per_batch / summary.step_median if per_batch and summary.step_median else None,
        throughput_unit=f"{unit}/s", checkpoints=out.checkpoints,
        changes=step_fn.describe() + ([f"loader: {loader_change.summary}"] if ctx.workload.loader else []),
        metrics=out.memory, compile_seconds=compile_seconds() - compiled_before, stop_signal=out.stop_signal,
    )


@dataclass
class _Trained:
    """What the loop collects, step by step."""

    losses: list[torch.Tensor] = field(default_factory=list)
    val_losses: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    stop_signal: int = 0


def _report_step(ctx: RunContext, step: int, loss: torch.Tensor, times: dict[str, float]) -> None:
    if ctx.callbacks.on_step is None:
        return
    steps, per_batch = ctx.cfg.steps, ctx.workload.throughput_unit[1]
    read = step % ctx.cfg.log_every == 0 or step == steps
    rate = per_batch / times["step"] if per_batch and times["step"] > 0 else None
    ctx.callbacks.on_step(StepInfo(step, steps, loss.item() if read else None, times["step"], rate))


def _evaluate_if_due(ctx: RunContext, step: int, val_losses: list[tuple[int, float]]) -> None:
    every = ctx.cfg.eval_every
    if not every or (step % every and step != ctx.cfg.steps):
        return
    val = evaluate(ctx.step_fn.model, ctx.workload.iter_eval_batches(), ctx.workload.loss, ctx.device,
                   ctx.cfg.eval_batches)
    if val is not None:
        val_losses.append((step, val))
        if ctx.callbacks.on_eval:
            ctx.callbacks.on_eval(step, val)


def _checkpoint_due(cfg: RunConfig, step: int) -> bool:
    return cfg.checkpoint_dir is not None and (step == cfg.steps or bool(cfg.checkpoint_every
                                                                          and step % cfg.checkpoint_every == 0))


def _save(ctx: RunContext, step: int, position: tuple[int, int], epoch_rng: dict, out: _Trained) -> None:
    # A non-finite loss (with the update applied) must not push older good checkpoints out.
    prune = _skips_bad_steps(ctx.step_fn) or bool(torch.isfinite(out.losses[-1]).all())  # a sync, once per save
    out.checkpoints.append(ctx.checkpoints.save(ctx.step_fn, step, ctx.plan, ctx.identity, position, epoch_rng,
                                                prune))
    if ctx.callbacks.on_checkpoint:
        ctx.callbacks.on_checkpoint(out.checkpoints[-1])


def _skips_bad_steps(step_fn: Step) -> bool:
    guard = step_fn.parts.nonfinite
    return guard is not None and getattr(guard, "mode", None) == "skip_step"


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
        seen = index - skip + sum(1 for _ in zip(range(skip), it, strict=False))  # fast-forward after a resume
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

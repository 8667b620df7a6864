"""Diagnosis rules: each a small function that reads measurements and may return a Finding.

A rule sees only what was measured in this run (the trace analysis and the live facts), never
a workload's name. Register one with ``@rule("id", "what it checks")``; :func:`diagnose` runs
them all. A finding carries its evidence as numbers from this run, the fix as code, the
expected gain, and, where the fix maps to a Plan knob, the plan that ``--verify`` measures.

Example::

    @rule("huge-batch", "the batch does not fit the cache")
    def huge_batch(ctx: DoctorContext) -> Finding | None:
        ...

    findings = diagnose(DoctorContext(analysis, facts, mode="script"))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from torchsmith.plan import Compile, LoaderConfig, OptimizerImpl, Plan, Threads
from torchsmith.profile.analysis import TraceAnalysis
from torchsmith.profile.capture import Facts
from torchsmith.profile.thread_probe import MIN_SPEEDUP, MIN_WIN_SHARE, probe_verdict
from torchsmith.transforms.loader import threads_beside_workers

Severity = Literal["high", "medium", "low", "info"]
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
MIB = 1 << 20
MIN_OPTIMIZER_SHARE = 0.05
"""Below this share of the step, a per-tensor optimizer loop is not worth a finding."""
MIN_OPTIMIZER_TENSORS = 8
"""A per-tensor loop costs a few dispatches per tensor: over a handful of tensors (a small CNN's 6:
two convolutions and a linear layer) foreach saves next to nothing, and the profiler's per-op
overhead would make the loop look bigger than it is."""


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    severity: Severity
    evidence: list[str]
    """Measured facts from this run, with numbers."""
    fix: str
    """The fix, as code."""
    expected_gain: str
    share: float = 0.0
    """Fraction of the step time at stake (orders findings of equal severity)."""
    verify_plan: Plan | None = field(default=None, compare=False)
    """The plan that applies this fix, when it maps to a knob (workloads only)."""


@dataclass(frozen=True)
class DoctorContext:
    analysis: TraceAnalysis
    facts: Facts
    mode: Literal["script", "workload"]
    plan: Plan | None = None
    """The plan the workload ran under (workload mode)."""
    target: str = "WORKLOAD"
    """The workload's name, for commands in fixes."""

    @property
    def on_cpu(self) -> bool:
        return not self.facts.device.startswith("cuda")

    def memory(self) -> dict[str, int] | None:
        """Peak and its split: params, grads, optimizer_state, activations (peak minus the rest)."""
        m, a = self.facts.memory, self.analysis
        if not m:
            return None
        if a.cuda_peak_bytes or self.facts.cuda_peak_bytes:
            peak = a.cuda_peak_bytes or self.facts.cuda_peak_bytes or 0  # one is set (the condition above)
        elif a.peak_delta_bytes and self.facts.live_bytes:
            # The first recorded step cannot see frees of blocks allocated before the trace
            # began (e.g. last step's gradients); later steps are exact, so prefer them.
            peak = self.facts.live_bytes + max(a.peak_delta_bytes[1:] or a.peak_delta_bytes)
        else:
            return None
        persistent = m["params"] + m["grads"] + m["optimizer_state"]
        return {**m, "activations": max(0, peak - persistent), "peak": max(peak, persistent)}


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    check: Callable[[DoctorContext], Finding | None]


RULES: dict[str, Rule] = {}


def rule(rule_id: str, summary: str) -> Callable:
    """Register ``fn(ctx) -> Finding | None`` as the rule ``rule_id``."""
    def register(fn: Callable[[DoctorContext], Finding | None]) -> Callable:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id!r} is registered twice "
                             f"({RULES[rule_id].check.__qualname__}, {fn.__qualname__})")
        RULES[rule_id] = Rule(rule_id, summary, fn)
        return fn
    return register


def diagnose(ctx: DoctorContext) -> list[Finding]:
    """Every rule's finding, most severe first, then by the share of the step at stake."""
    found = [f for r in RULES.values() if (f := r.check(ctx)) is not None]
    return sorted(found, key=lambda f: (SEVERITY_ORDER[f.severity], -f.share))


def _severity(share: float) -> Severity:
    return "high" if share >= 0.25 else "medium" if share >= 0.10 else "low"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


# --- the rules ----------------------------------------------------------------------------


@rule("data-bound", "data wait over 10% of the step")
def data_bound(ctx: DoctorContext) -> Finding | None:
    a = ctx.analysis
    share = a.median_share("data")
    if share <= 0.10:
        return None
    evidence = [f"data wait {_ms(a.seconds('data'))} of a {_ms(a.step_seconds)} step "
                f"({share:.0%}, median of {len(a.steps)} recorded steps)"]
    for ld in ctx.facts.loaders:
        evidence.append(f"DataLoader over {ld['dataset']}: num_workers={ld['num_workers']}, "
                        f"pin_memory={ld['pin_memory']}, "
                        f"persistent_workers={ld['persistent_workers']}, prefetch_factor={ld['prefetch_factor']}")
    for site in a.getitem_sites[:2]:
        per_step = site.count / max(1, len(a.steps))
        evidence.append(f"__getitem__ at {site.where}: {site.seconds / site.count * 1e3:.2f} ms per call, "
                        f"{per_step:.0f} calls per step")
    compute = max(a.step_seconds - a.seconds("data"), 1e-9)
    workers = max(2, min(ctx.facts.threads.get("cores", 2), math.ceil(a.seconds("data") / compute) + 1))
    pin = "True)" if not ctx.on_cpu else "False)  # True when training on a GPU"
    fix = (f"loader = DataLoader(dataset, batch_size=..., shuffle=True,\n"
           f"                    num_workers={workers}, persistent_workers=True, prefetch_factor=4,\n"
           f"                    pin_memory={pin}\n")
    # On a CPU the workers decode on the cores the trainer's threads compute on. When data is
    # most of the step, leave the workers their cores: on 2 cores, data-bound cnn-mini gains from
    # workers only with one trainer thread (benchmarks/tune_data_bound.py measures it).
    threads = None
    if ctx.on_cpu and share >= 0.5:
        threads = threads_beside_workers(ctx.facts.threads.get("cores", 2), workers)
        fix += (f"torch.set_num_threads({threads})  # leave the {workers} workers their cores "
                "(torchsmith tune --knobs threads,loader measures it)\n")
    fix += ("# If __getitem__ decodes or parses, pre-process once into a memory-mapped array\n"
            "# (numpy.memmap / torchsmith.data) so that each sample is a slice, not a decode.")
    plan = None
    if ctx.plan is not None:  # verify rebuilds the workload's loader (needs Workload.loader)
        plan = ctx.plan.replace(loader=LoaderConfig(num_workers=workers, persistent_workers=True, prefetch_factor=4))
        if threads is not None:
            plan = plan.replace(threads=Threads(intra_op=threads))
    return Finding("data-bound", "Training waits for data", _severity(share), evidence, fix,
                   f"up to {share:.0%} of step time, once workers load ahead of the {_ms(compute)} of compute",
                   share, plan)


@rule("sync-in-loop", "host-device syncs inside most steps")
def sync_in_loop(ctx: DoctorContext) -> Finding | None:
    a = ctx.analysis
    if not a.sync_sites or a.steps_with_sync * 2 < len(a.steps):
        return None
    share = a.share("sync")
    evidence = [f"host-device syncs in {a.steps_with_sync} of {len(a.steps)} recorded steps "
                f"({sum(s.count for s in a.sync_sites)} calls, {_ms(a.seconds('sync'))} per step)"]
    evidence += [f"{s.count}x at {s.where}" for s in a.sync_sites[:3]]
    fix = ("running = torch.zeros((), device=device)\n"
           "...\n"
           "running += loss.detach()          # stays on the device: no sync\n"
           "if step % log_every == 0:\n"
           "    print((running / log_every).item())   # one sync per log_every steps\n"
           "    running.zero_()")
    gain = (f"{share:.1%} of step time on this CPU (a CPU sync is cheap); on a GPU each sync stalls the host "
            "until the queue drains, so it cannot queue the next step's kernels ahead")
    severity: Severity = "low" if ctx.on_cpu else _severity(max(share, 0.10))
    return Finding("sync-in-loop", "Host-device sync in every step", severity, evidence, fix, gain, share)


@rule("grad-not-set-to-none", "gradients zero-filled rather than set to None")
def grad_not_set_to_none(ctx: DoctorContext) -> Finding | None:
    f, a = ctx.facts, ctx.analysis
    if not f.grads_zero_filled and not a.zero_fill_ops_per_step:
        return None
    evidence = []
    if f.grads_zero_filled:
        evidence.append(f"{f.grads_zero_filled} of {f.grad_checks} checked steps began forward with "
                        f"{f.zero_filled_grad_bytes / MIB:.1f} MiB of .grad tensors holding zeros")
    if a.zero_fill_ops_per_step:
        evidence.append(f"zero_grad ran {a.zero_fill_ops_per_step:.0f} zero-fill ops per step, "
                        f"{_ms(a.zero_grad_seconds_per_step)} per step")
    share = a.zero_grad_seconds_per_step / a.step_seconds if a.step_seconds else 0.0
    plan = None
    if ctx.plan is not None and not ctx.plan.optimizer.set_to_none:
        plan = ctx.plan.replace(optimizer=dataclasses.replace(ctx.plan.optimizer, set_to_none=True))
    return Finding("grad-not-set-to-none", "Gradients are zeroed instead of freed", "low" if share < 0.05 else "medium",
                   evidence, "optimizer.zero_grad(set_to_none=True)   # the default since PyTorch 2.0",
                   f"{_ms(a.zero_grad_seconds_per_step)} per step ({share:.1%}) and "
                   f"{f.zero_filled_grad_bytes / MIB:.1f} MiB freed between steps", share, plan)


@rule("single-tensor-optimizer", "optimizer runs a per-parameter loop where foreach/fused exist")
def single_tensor_optimizer(ctx: DoctorContext) -> Finding | None:
    a = ctx.analysis
    slow = [o for o in ctx.facts.optimizers if o["supports_foreach"] and not any(o["foreach"]) and not any(o["fused"])
            and o["params"] >= MIN_OPTIMIZER_TENSORS]
    share = a.share("optimizer")
    if not slow or a.foreach_ops_per_step > 0 or a.optimizer_ops_per_step == 0 or share < MIN_OPTIMIZER_SHARE:
        return None
    o = slow[0]
    flags = f"foreach={o['foreach'][0]}" + (f", fused={o['fused'][0]}" if o["supports_fused"] else "")
    evidence = [f"{o['name']} ({flags}) over {o['params']} parameter tensors ran {a.optimizer_ops_per_step:.0f} "
                f"single-tensor ops per step and no multi-tensor (foreach/fused) kernel",
                f"optimizer {_ms(a.seconds('optimizer'))} per step ({share:.0%})"]
    fused = o["supports_fused"] and not o["device"].startswith("cpu")
    fix = f"torch.optim.{o['name']}(model.parameters(), lr=..., {'fused' if fused else 'foreach'}=True)"
    plan = None
    if ctx.plan is not None:
        plan = ctx.plan.replace(optimizer=OptimizerImpl(impl="fused" if fused else "foreach",
                                                        set_to_none=ctx.plan.optimizer.set_to_none))
    return Finding("single-tensor-optimizer", "Optimizer updates one tensor at a time", _severity(share / 2), evidence,
                   fix, f"part of the optimizer's {share:.0%}: one kernel per op over all {o['params']} tensors "
                   f"instead of one per tensor", share, plan)


@rule("many-small-ops", "small operators dominate forward and backward (dispatch/launch bound)")
def many_small_ops(ctx: DoctorContext) -> Finding | None:
    a = ctx.analysis
    if a.ops_per_step < 100 or a.small_op_share < 0.5:
        return None
    share = a.share("forward") + a.share("backward")
    where = "kernels" if a.device == "cuda" else "operators"
    evidence = [f"{a.ops_per_step:.0f} {where} per step in forward+backward, median {a.median_op_us:.1f} µs",
                f"{where} under the small-op threshold take {a.small_op_share:.0%} of forward+backward "
                f"{where[:-1]} time"]
    plan = (ctx.plan.replace(compile=Compile(enabled=True))
            if ctx.plan is not None and not ctx.plan.compile.enabled else None)
    return Finding("many-small-ops", "Many small operators: launch/dispatch bound", _severity(share * a.small_op_share),
                   evidence, "model = torch.compile(model)   # fuses small ops into fewer kernels",
                   f"a part of forward+backward ({share:.0%} of the step), after a one-off compile", share, plan)


@rule("threads", "a thread count measured slower, side by side, than the one suspected")
def threads(ctx: DoctorContext) -> Finding | None:
    # A suspicion alone (idle cores, oversubscription) is no finding: the capture timed the
    # script's own steps alternately at both counts (thread_probe.py); only a clear,
    # consistent win of the suspected count is reported, with its ratio.
    probe = ctx.facts.thread_probe
    verdict = probe_verdict(probe) if probe and ctx.on_cpu else None
    if verdict is None or verdict[1] < MIN_SPEEDUP or verdict[2] < MIN_WIN_SHARE:
        return None
    suspect, ratio, wins = verdict
    current, at_current = probe["threads"][0], probe["seconds"][0]
    at_suspect = probe["seconds"][probe["threads"].index(suspect)]
    cores = ctx.facts.threads.get("cores", current)
    workers = sum(ld["num_workers"] for ld in ctx.facts.loaders)
    beside = f" beside {workers} DataLoader worker(s)" if workers else ""
    evidence = [f"torch runs {current} intra-op thread(s) on {cores} usable core(s){beside}",
                f"measured on this run's own steps, taken in turns ({len(at_current)} each at "
                f"{', '.join(map(str, probe['threads']))} threads): "
                f"{suspect} thread(s) {ratio:.2f}x faster, "
                f"median {_ms(_median(at_suspect))} vs {_ms(_median(at_current))} "
                f"per step; faster in {wins:.0%} of step pairs"]
    title = "CPU cores left idle" if suspect > current else "Too many CPU threads for this step"
    share = 1 - 1 / ratio
    plan = ctx.plan.replace(threads=Threads(intra_op=suspect)) if ctx.plan is not None else None
    return Finding("threads", title, _severity(share), evidence,
                   f"torch.set_num_threads({suspect})   # before training; or OMP_NUM_THREADS={suspect}",
                   f"{ratio:.2f}x per step as measured here ({share:.0%} of step time); the best count depends on "
                   "the model size and the machine's load", share, plan)


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@rule("memory-heavy-activations", "activations dominate peak memory")
def memory_heavy_activations(ctx: DoctorContext) -> Finding | None:
    mem = ctx.memory()
    if mem is None or mem["activations"] < 32 * MIB or mem["activations"] < 0.6 * mem["peak"]:
        return None
    share = mem["activations"] / mem["peak"]
    evidence = [f"activations and temporaries {mem['activations'] / MIB:.0f} MiB of a {mem['peak'] / MIB:.0f} MiB peak "
                f"({share:.0%}); parameters {mem['params'] / MIB:.0f} MiB, gradients {mem['grads'] / MIB:.0f} MiB, "
                f"optimizer state {mem['optimizer_state'] / MIB:.0f} MiB"]
    fix = ("from torch.utils.checkpoint import checkpoint\n"
           "x = checkpoint(block, x, use_reentrant=False)   # per repeated block: recompute in backward\n"
           "# or keep saved activations in bf16 / offloaded: torch.autograd.graph.saved_tensors_hooks")
    return Finding("memory-heavy-activations", "Activations dominate peak memory", "medium" if share < 0.8 else "high",
                   evidence, fix, "most of the activation memory for one more forward of each block in backward; "
                   "room for a bigger batch",
                   0.0)


@rule("anomaly-mode", "autograd anomaly detection left on")
def anomaly_mode(ctx: DoctorContext) -> Finding | None:
    if not ctx.facts.anomaly_enabled:
        return None
    a = ctx.analysis
    evidence = ["torch.is_anomaly_enabled() was True at the start of forward",
                f"backward {_ms(a.seconds('backward'))} per step ({a.share('backward'):.0%}), forward "
                f"{_ms(a.seconds('forward'))}: anomaly mode records a traceback for every op and checks every gradient"]
    return Finding("anomaly-mode", "Anomaly detection is on", "high", evidence,
                   "# remove torch.autograd.set_detect_anomaly(True) / with torch.autograd.detect_anomaly():\n"
                   "# use it only while hunting a NaN",
                   "the per-op traceback and NaN-check cost in forward and backward",
                   a.share("forward") + a.share("backward"))


@rule("float64", "float64 parameters or ops in the model")
def float64(ctx: DoctorContext) -> Finding | None:
    n = ctx.facts.param_numel_by_dtype.get("float64", 0)
    ops = ctx.analysis.float64_ops
    if not n and not ops:
        return None
    evidence = []
    if n:
        total = sum(ctx.facts.param_numel_by_dtype.values())
        evidence.append(f"{n:,} of {total:,} parameters are float64")
    if ops:
        evidence.append(f"float64 ops in forward/backward, e.g. {', '.join(ops[:3])}")
    return Finding("float64", "Training in float64", "high", evidence,
                   "model = model.float()            # and data: x = x.float()\n"
                   "torch.set_default_dtype(torch.float32)", "half the parameter and activation memory; "
                   "float32 matmuls run faster on CPU and far faster on GPU", 0.5)


@rule("untested-compile-amp", "GPU fp32 without autocast, or compile never tried")
def untested_compile_amp(ctx: DoctorContext) -> Finding | None:
    f, a = ctx.facts, ctx.analysis
    evidence = []
    if not ctx.on_cpu and not f.autocast_enabled:
        evidence.append(f"training on {f.device} in {', '.join(f.param_numel_by_dtype)} with autocast off")
    if not a.compiled_regions and (ctx.mode == "workload" or not ctx.on_cpu):
        evidence.append("no torch.compile region ran in the recorded steps")
    if ctx.plan is not None and (ctx.plan.compile.enabled or ctx.plan.precision.kind != "fp32"):
        return None
    if not evidence:
        return None
    target = "mymod:workload" if ctx.mode == "script" else ctx.target
    return Finding("untested-compile-amp", "torch.compile / autocast not measured here", "info", evidence,
                   f"torchsmith tune {target}   # measures compile and autocast on this machine and keeps what wins",
                   "unknown until measured: on some machines either one is slower", 0.0)

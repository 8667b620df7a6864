"""Activation checkpointing and saved-tensor compression on gpt-mini, CPU, 2 threads.

Targets (issue 3):
- checkpointing every block cuts saved-for-backward bytes by >= 80% at a step-time cost of <= 30%;
- compressing saved activations to bf16 halves saved bytes.

Saved-for-backward bytes are what the autograd graph holds once forward returns, read from the
allocator (``measure.memory``): saved-tensor hooks do not nest, so a hook-based count would not
see inside checkpoint's or compression's own hooks. For the baseline the hook count
(``measure.saved``) is printed next to it as a cross-check. Step times come from
``measure_plans``: every plan interleaved in one process, same seed, same batches; "time x" is
the median over rounds of each step's time over the baseline step of the same round. On a
shared machine only the ratios mean anything.

    PYTHONPATH=src .venv/bin/python benchmarks/activation_memory.py [--steps 6]
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import ExitStack

import torch

from torchsmith.engine.loop import build_step
from torchsmith.harness.compare import measure_plans
from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.saved import count_saved_tensors
from torchsmith.plan import CheckpointBlocks, CompressSaved, Plan, SelectiveCheckpoint, Threads
from torchsmith.workload import load_workload


def retained_after_forward(workload, plan: Plan, batch) -> tuple[int, int | None]:
    """(bytes the graph holds after forward by the allocator, by saved-tensor hooks or None)."""
    step = build_step(workload, plan, torch.device("cpu"))
    parts = step.parts
    with track_peak_memory("cpu") as mem, ExitStack() as stack:
        stack.enter_context(parts.autocast())
        for ctx in parts.forward_contexts:  # the saved-tensor policy, as train_step enters it
            stack.enter_context(ctx())
        loss = parts.loss_fn(parts.model, batch)
    retained = mem.result.end_bytes - mem.result.start_bytes
    loss.backward()
    hooks = None
    if plan == BASE:
        parts.model.zero_grad(set_to_none=True)
        with count_saved_tensors(parts.model) as saved:
            parts.loss_fn(parts.model, batch)
        hooks = saved.result.bytes
    step.revert()
    return retained, hooks


BASE = Plan(threads=Threads(intra_op=2))
PLANS = {
    "baseline (eager fp32)": BASE,
    "checkpoint every block": BASE.replace(checkpointing=CheckpointBlocks(every=1)),
    "selective checkpoint": BASE.replace(checkpointing=SelectiveCheckpoint(every=1)),
    "compress saved to bf16": BASE.replace(saved_tensors=CompressSaved(dtype="bfloat16")),
}


def _paired(m, base) -> float:
    """Median over rounds of (plan step / baseline step of the same round): cancels load that drifts."""
    return statistics.median(t / b for t, b in zip(m.step_times, base.step_times, strict=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="timed steps per plan (median)")
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(2)
    w = load_workload("gpt-mini")
    batch = next(iter(w.iter_batches()))
    saved = {name: retained_after_forward(w, plan, batch) for name, plan in PLANS.items()}
    print(f"gpt-mini, CPU, {torch.get_num_threads()} threads, batch {tuple(batch[0].shape)}; "
          f"{args.steps} timed steps per plan after {args.warmup} warm-up, interleaved")
    ms = measure_plans(w, list(PLANS.values()), warmup=args.warmup, steps=args.steps, device="cpu",
                       measure_memory=True)
    base_saved, hooks = saved["baseline (eager fp32)"]
    base_peak = ms[0].peak_memory_bytes
    print(f"baseline saved for backward: {base_saved / 2**20:.1f} MiB by the allocator "
          f"({hooks / 2**20:.1f} MiB counted by saved-tensor hooks, activations only)")
    print(f"{'plan':26s} {'saved MiB':>10s} {'saved x':>8s} {'step s':>8s} {'time x':>7s} {'peak x':>7s} "
          f"{'loss rel diff':>14s}")
    for (name, (retained, _)), m in zip(saved.items(), ms, strict=True):
        if not m.ok:
            print(f"{name:26s} error: {m.error}")
            continue
        print(f"{name:26s} {retained / 2**20:10.1f} {retained / base_saved:8.3f} {m.step_seconds:8.3f} "
              f"{_paired(m, ms[0]):7.2f} {m.peak_memory_bytes / base_peak:7.2f} {m.loss_rel_diff:14.1e}")
    ck_saved = saved["checkpoint every block"][0] / base_saved
    ck_time = _paired(ms[1], ms[0]) if ms[1].ok else float("nan")
    bf_saved = saved["compress saved to bf16"][0] / base_saved
    print("targets:")
    print(f"  checkpoint every block: saved bytes cut by {1 - ck_saved:.0%} (target >= 80%): "
          f"{'met' if ck_saved <= 0.2 else 'MISSED'}; {1 / ck_saved:.1f}x fewer saved bytes")
    print(f"  checkpoint every block: step time {ck_time:.2f}x (target <= 1.30x): "
          f"{'met' if ck_time <= 1.3 else 'MISSED'} (machine noise: rerun if the load was high)")
    print(f"  bf16 compression: saved bytes {bf_saved:.3f}x (target 0.5x, +-0.05): "
          f"{'met' if abs(bf_saved - 0.5) <= 0.05 else 'MISSED'}")


if __name__ == "__main__":
    main()

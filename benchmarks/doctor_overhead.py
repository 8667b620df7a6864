"""What `torchsmith doctor` costs: profiling overhead inside the captured window, trace export,
and the analysis of the captured trace, each as a ratio to an unprofiled step.

Unprofiled and profiled rounds are interleaved in one process (A B C A B C ...), so noise on a
shared machine hits all variants alike. Variants of the capture detail:

- full:  Python frames + shapes + memory events (what doctor uses; names sync sites and forward)
- light: no Python frames, no shapes, no memory (ops and annotations only)

Run:  PYTHONPATH=src .venv/bin/python benchmarks/doctor_overhead.py [--workload mlp] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from itertools import islice

import torch

from torchsmith.batch import to_device
from torchsmith.engine.loop import build_step
from torchsmith.plan import Plan
from torchsmith.profile.analysis import analyse_trace
from torchsmith.profile.capture import CaptureConfig, StepCapture
from torchsmith.workload import load_workload

ACTIVE = 3
VARIANTS = {
    "full": CaptureConfig(wait=1, warmup=1, active=ACTIVE, probe_threads=False),  # rounds must keep their threads
    "light": CaptureConfig(wait=1, warmup=1, active=ACTIVE, with_stack=False, record_shapes=False, profile_memory=False,
                           probe_threads=False),
}


def timed_steps(step, batches, n):
    times = []
    for _ in range(n):
        batch = next(batches)
        t0 = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    workload = load_workload(args.workload)
    step = build_step(workload, Plan(), torch.device("cpu"))
    batches = iter([to_device(b, torch.device("cpu")) for b in islice(workload.cycle(), 64)] * 1000)
    timed_steps(step, batches, 5)  # warm-up: allocator, first-call costs
    plain: list[float] = []
    window = {k: [] for k in VARIANTS}
    export = {k: [] for k in VARIANTS}
    analysis = {k: [] for k in VARIANTS}
    sizes = {k: 0 for k in VARIANTS}
    for r in range(args.rounds):
        plain += timed_steps(step, batches, ACTIVE + 2)
        for name, cfg in VARIANTS.items():
            with tempfile.TemporaryDirectory() as tmp:
                with StepCapture(cfg, tmp) as cap:
                    times = timed_steps(step, batches, cfg.steps_needed)
                recorded = times[-ACTIVE:]  # the last one also stops the profiler and exports the trace
                window[name] += recorded[:-1]
                export[name].append(recorded[-1])
                t0 = time.perf_counter()
                analyse_trace(cap.trace_path)
                analysis[name].append(time.perf_counter() - t0)
                sizes[name] = cap.trace_path.stat().st_size
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    base = statistics.median(plain)
    print(f"\n{args.workload}: unprofiled step {base * 1e3:.2f} ms (median of {len(plain)}, "
          f"{torch.get_num_threads()} threads); ratios to it:")
    print(f"{'variant':8} {'step in window':>15} {'last step+export':>17} {'analysis':>9} {'trace MB/step':>14}")
    for name in VARIANTS:
        w = statistics.median(window[name]) / base
        e = statistics.median(export[name]) / base
        a = statistics.median(analysis[name]) / base
        print(f"{name:8} {w:14.2f}x {e:16.2f}x {a:8.2f}x {sizes[name] / ACTIVE / 1e6:13.2f}")
    print("\nThe warm-up step is traced too (and discarded). Wait steps pay only the hooks (a Python\n"
          "call per optimizer step and per module call); after the window the hooks are removed.\n"
          "Shared-machine caveat: compare the ratios, not the absolute times.")


if __name__ == "__main__":
    main()

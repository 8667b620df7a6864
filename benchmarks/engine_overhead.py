"""Engine overhead: ``torchsmith.run`` with the default plan vs a bare hand-written loop.

Both train gpt-mini from the same seed on the same batches for the same number of steps,
model construction included, alternating A B A B ... so machine noise hits both alike.
Prints the median wall time of each and the ratio engine/bare. Target: <= 1.02.

    PYTHONPATH=src .venv/bin/python benchmarks/engine_overhead.py [--rounds 5] [--steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torchsmith
from torchsmith.seeding import seed_everything
from torchsmith.workloads import gpt_mini


def bare_loop(w: torchsmith.Workload, steps: int) -> list[float]:
    """What a user writes by hand: no torchsmith in the loop."""
    seed_everything(w.seed)
    model = w.model()
    opt = w.optimizer(model.parameters())
    sched = w.scheduler(opt) if w.scheduler else None
    losses, it = [], iter(w.iter_batches())
    for _ in range(steps):
        batch = next(it)
        loss = w.loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sched is not None:
            sched.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    w = gpt_mini.workload(batches_per_epoch=max(args.steps, 10))
    times = {"engine": [], "bare": []}
    for r in range(args.rounds + 1):  # round 0 warms up both paths
        for name in ("engine", "bare") if r % 2 else ("bare", "engine"):
            start = time.perf_counter()
            if name == "engine":
                losses = torchsmith.run(w, steps=args.steps).losses
            else:
                bare = bare_loop(w, args.steps)
            if r:
                times[name].append(time.perf_counter() - start)
        assert losses == bare, "the engine must compute exactly what the bare loop computes"
    engine, bare = statistics.median(times["engine"]), statistics.median(times["bare"])
    print(f"gpt-mini, {args.steps} steps per run, {args.rounds} rounds, threads={torch.get_num_threads()}")
    print(f"  bare loop : {bare:.3f} s   engine run(): {engine:.3f} s")
    print(f"  engine/bare = {engine / bare:.3f}   (target <= 1.02)   losses identical: yes")


if __name__ == "__main__":
    main()

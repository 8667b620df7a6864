"""NaN/Inf checks on gpt-mini: step time of the sentinel's cheap mode vs detect_anomaly vs plain.

Four variants of one full training step (forward, backward, AdamW step) on the same model
state and batches, interleaved round by round so every variant sees the same machine noise:

- plain: the step as written;
- guard: ``Plan.nonfinite``'s check, ``isfinite`` of the loss and of one ``_foreach_norm`` over
  all gradients, read with one sync;
- sentinel: ``NaNSentinel`` cheap mode, one ``isfinite().all()`` per module output plus the
  guard's check, read with one sync;
- anomaly: ``torch.autograd.detect_anomaly(check_nan=True)``.

Prints the median step time of each and its ratio to plain, in wall-clock time and in CPU
time of this process (on a shared, oversubscribed machine CPU time is the steadier figure:
it does not count the time other processes hold the cores). Target: sentinel <= 1.10x.

    PYTHONPATH=src .venv/bin/python benchmarks/nan_sentinel.py [--rounds 6] [--threads 1] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings

import torch

from torchsmith.debug.nan_sentinel import NaNSentinel, step_finite
from torchsmith.workloads import gpt_mini


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    w = gpt_mini.workload(batches_per_epoch=4)
    torch.manual_seed(w.seed)
    model = w.model().to(device)
    opt = w.optimizer(model.parameters())
    batches = [tuple(t.to(device) for t in b) for b in w.iter_batches()]
    params = list(model.parameters())
    sentinel = NaNSentinel(model)
    sentinel.close()  # hooks are installed only inside the sentinel variant

    def plain(batch):
        w.loss(model, batch).backward()

    def guard(batch):
        loss = w.loss(model, batch)
        loss.backward()
        assert bool(step_finite(loss, params))  # the one sync

    def watched(batch):
        sentinel._resume()
        try:
            assert sentinel.watch(lambda: w.loss(model, batch).backward()) is None  # one sync
        finally:
            sentinel._pause()

    def anomaly(batch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled" on every entry
            with torch.autograd.detect_anomaly(check_nan=True):
                w.loss(model, batch).backward()

    variants = {"plain": plain, "guard": guard, "sentinel": watched, "anomaly": anomaly}
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.warmup + args.rounds):
        for name, fn in variants.items():
            batch = batches[r % len(batches)]
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            fn(batch)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            if r >= args.warmup:
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        print(f"round {r + 1}/{args.warmup + args.rounds}" + (" (warm-up)" if r < args.warmup else ""), flush=True)

    base, cbase = statistics.median(times["plain"]), statistics.median(cpu["plain"])
    print(f"\ngpt-mini step ({device}, {torch.get_num_threads()} threads, median of {args.rounds} interleaved rounds)")
    print(f"  {'variant':9s} {'wall':>10s} {'ratio':>7s} {'CPU time':>10s} {'ratio':>7s}")
    for name in variants:
        med, cmed = statistics.median(times[name]), statistics.median(cpu[name])
        print(f"  {name:9s} {med * 1e3:7.1f} ms {med / base:6.2f}x {cmed * 1e3:7.1f} ms {cmed / cbase:6.2f}x")
    ratio = lambda d, k: statistics.median(d[k]) / statistics.median(d["plain"])  # noqa: E731
    print(f"\nsentinel cheap mode: {ratio(times, 'sentinel'):.2f}x plain wall, {ratio(cpu, 'sentinel'):.2f}x CPU "
          f"(target <= 1.10x); detect_anomaly: {ratio(times, 'anomaly'):.2f}x wall, {ratio(cpu, 'anomaly'):.2f}x CPU")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

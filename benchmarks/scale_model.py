"""The scale model's acceptance figure: N ranks predicted from 1 rank, against the real N-rank run.

    PYTHONPATH=src .venv/bin/python benchmarks/scale_model.py [WORKLOAD ...] [--interconnect 100Gbps,5us]
        [--ranks 2] [--steps 8] [--rounds 3]          (default workloads: gpt-mini hf-llama)

Per workload, separate jobs, so the prediction never sees the run it predicts:

1. one process, in a world-size-1 gloo group (no one to communicate with), trains the workload
   as written and under each strategy on the micro-batch one rank gets at N ranks, with the
   N-rank run's threads per rank, one step of each strategy in turn, and measures forward, backward
   and optimizer medians per strategy (the strategy's own compute: bucket copies, hooks, DTensor
   parameters) and the plain
   step's peak memory (torchsmith.measure.memory: on CPU the
   "cpu-profiler-allocator-events" method, i.e. the bytes reachable from the model, optimizer
   state and DDP's gradient buckets plus every byte the CPU allocator hands out on the training
   thread during the step; gloo's own threads' allocations are not seen). Then the same with
   N - 1 copies of it running beside it (each in its own world-size-1 group): on a CPU
   host the ranks share its cores and memory bandwidth, which a rank alone does not see;
2. a torchrun job of N gloo ranks runs the collective microbenchmark
   (torchsmith.distributed.collective_bench) from 4 KiB to 2x the largest collective the model
   needs, and an alpha-beta link is fitted to each collective (and one to all, printed for comparison);
3. a torchrun job of N gloo ranks trains DDP, ZeRO-1 and FSDP2, their steps interleaved as in 1,
   and measures the same figures (slowest rank), plus the collectives each step issued (printed
   beside the derived ones).

The sequence is repeated ``--rounds`` times and each figure is the median over rounds, so a shared
machine's changing load falls on every figure alike. Then it prints predicted against measured
(targets: step time within 20%, per-rank peak within 15%), from the compute alone and from the
compute beside copies, and the predictions at 8, 64 and 512 ranks over ``--interconnect``. On CPU
the prediction assumes no overlap of communication with compute, since the ranks' threads fill
the cores (gloo's transfers and sums then take the compute's cores); both bounds are printed.
``--ranks 4`` on a 2-core machine is oversubscribed, and the output says so. Timing on a shared
machine is noisy: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP = 2
TABLE_RANKS = (8, 64, 512)
STRATEGIES = ("ddp", "zero1", "fsdp2")
PHASES = ("forward", "backward", "optimizer")
STEP_TARGET, PEAK_TARGET = 0.20, 0.15


def _batches(spec: str, count: int):
    from torchsmith.workload import load_workload

    w = load_workload(spec)
    return w, [b for b, _ in zip(w.iter_batches(), range(count), strict=False)]


def _fresh_step(w, kind: str):
    """Seeded model and optimizer with ``parallel=kind`` applied, as the engine builds them."""
    from torchsmith.engine.step import prepare
    from torchsmith.plan import Plan
    from torchsmith.seeding import seed_everything

    seed_everything(w.seed)
    model = w.model()
    optimizer = w.optimizer(model.parameters())
    plan = Plan.from_dict({**Plan().to_dict(), "parallel": {"kind": kind}})
    return prepare(plan, model, optimizer, w.loss)


def _local_optimizer(optimizer):
    """ZeRO-1's state lives in its local optimizer (``.optim``), not in ``.state``."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer


def _rotated(kinds: tuple[str, ...], i: int) -> tuple[str, ...]:
    """``kinds`` starting at the i-th: each strategy runs first, second, ... in turn, so none is always
    the one that runs right after another's allocation pattern or the machine's idle gap."""
    i %= len(kinds)
    return kinds[i:] + kinds[:i]


def one_rank(spec: str, steps: int, ranks: int, out: str) -> None:
    """Job 1: the 1-rank measurements the prediction is made from, in a world-size-1 gloo group.

    Each strategy is timed at world size 1, where its collectives have no one to talk to: what
    remains is the strategy's own compute (DDP's bucket copies, ZeRO-1's wrapped optimizer, FSDP2's
    hooks and DTensor parameters). The strategies' steps are interleaved, one step of each in turn,
    so that a shared machine's changing load falls on all of them alike: timed one strategy after
    another, two strategies with the same forward and backward differed by 25% (157/303 ms against
    121/239 ms in one run). The peak memory is the plain (single) step's."""
    import torch

    from torchsmith.distributed.runtime import init_from_env, shard_batch, shutdown
    from torchsmith.distributed.scale_model import model_shape
    from torchsmith.distributed.zero1 import optimizer_state_bytes
    from torchsmith.measure.memory import track_peak_memory
    from torchsmith.measure.timing import PhaseTimer

    init_from_env(torch.device("cpu"))  # RANK=0, WORLD_SIZE=1 from the parent
    w, batches = _batches(spec, WARMUP + steps + 2)
    local = [shard_batch(b, 0, ranks) for b in batches]  # the micro-batch rank 0 gets at `ranks` ranks
    kinds = ("single", *STRATEGIES)
    built = {kind: _fresh_step(w, kind) for kind in kinds}
    for step in built.values():
        for b in local[:WARMUP]:
            step(b)
    single = built["single"]
    with track_peak_memory("cpu", live=(single.model, single.optimizer)) as mem:
        single(local[WARMUP])
    shape = model_shape(single.model)
    result: dict = {"threads": torch.get_num_threads(), "phases": {}, "peak": mem.result.peak_bytes,
                    "optimizer_state": optimizer_state_bytes(single.optimizer),
                    "tensor_bytes": list(shape.tensor_bytes), "block_bytes": list(shape.block_bytes)}
    _file_barrier("timed")
    timers = {kind: PhaseTimer() for kind in kinds}
    for i, b in enumerate(local[WARMUP + 1:-1]):
        for kind in _rotated(kinds, i):
            built[kind].timer = timers[kind]
            built[kind](b)
            timers[kind].end_step()
            built[kind].timer = None
    for step in built.values():
        step(local[-1])  # untimed: keeps a copy running beside this one busy until its timed steps end
    for kind, timer in timers.items():
        phases = timer.summary(warmup=0).median
        result["phases"][kind] = {p: phases[p] for p in PHASES}
    Path(out).write_text(json.dumps(result))
    shutdown()


def _file_barrier(tag: str) -> None:
    """Wait until every copy started side by side (``SCALE_COPIES`` in ``SCALE_BARRIER_DIR``) reached
    barrier ``tag``, so that the copies start their timed steps at the same moment; no process group
    spans them."""
    folder, copies = os.environ.get("SCALE_BARRIER_DIR"), int(os.environ.get("SCALE_COPIES", "1"))
    if folder is None or copies == 1:
        return
    Path(folder, f"{tag}.{os.getpid()}").touch()
    deadline = time.monotonic() + 600
    while len(list(Path(folder).glob(f"{tag}.*"))) < copies:
        if time.monotonic() > deadline:
            sys.exit(f"copies never met at the {tag} barrier in {folder}")
        time.sleep(0.01)


def bench(sizes: list[int], out: str) -> None:
    """Job 2 (every rank): the collective microbenchmark."""
    import dataclasses

    import torch

    from torchsmith.distributed.collective_bench import BenchConfig, bench_collectives
    from torchsmith.distributed.runtime import init_from_env, shutdown

    ctx = init_from_env(torch.device("cpu"))
    # 9 repeats: on a shared CPU a descheduled rank stalls a collective; the median ignores a few.
    samples = bench_collectives(BenchConfig(sizes_bytes=tuple(sizes), repeats=9), ctx.device)
    if ctx.rank == 0:
        Path(out).write_text(json.dumps([dataclasses.asdict(s) for s in samples]))
    shutdown()


def two_ranks(spec: str, steps: int, out: str) -> None:
    """Job 3 (every rank): the real N-rank run of each strategy, their steps interleaved as in job 1."""
    import torch
    import torch.distributed as dist

    from torchsmith.distributed.commcount import CommStats, count_collectives, observe_ddp
    from torchsmith.distributed.runtime import init_from_env, shard_batch, shutdown
    from torchsmith.measure.memory import track_peak_memory
    from torchsmith.measure.timing import PhaseTimer

    ctx = init_from_env(torch.device("cpu"))
    w, batches = _batches(spec, WARMUP + steps + 2)
    local = [shard_batch(b, ctx.rank, ctx.world_size) for b in batches]
    built = {}
    for kind in STRATEGIES:
        step = built[kind] = _fresh_step(w, kind)
        if kind != "fsdp2":
            observe_ddp(step.model)  # DDP's reducer all-reduces from C++, out of count_collectives' sight
        for b in local[:WARMUP]:
            step(b)
    results = {}
    for kind, step in built.items():
        stats = CommStats()
        with count_collectives(stats):
            step(local[WARMUP])
        results[kind] = {"calls": dict(stats.calls), "bytes": dict(stats.bytes)}
    times: dict[str, list[float]] = {kind: [] for kind in STRATEGIES}
    timers = {kind: PhaseTimer() for kind in STRATEGIES}  # where the N-rank step's time goes, printed
    for i, b in enumerate(local[WARMUP + 1:-1]):
        for kind in _rotated(STRATEGIES, i):
            built[kind].timer = timers[kind]
            start = time.perf_counter()
            built[kind](b)
            times[kind].append(time.perf_counter() - start)
            timers[kind].end_step()
            built[kind].timer = None
    for kind, step in built.items():
        # DDP's gradient buckets live in its C++ reducer; the tracker counts them (ddp_bucket_bytes).
        with track_peak_memory("cpu", live=(step.model, _local_optimizer(step.optimizer))) as mem:
            step(local[-1])
        phases = timers[kind].summary(warmup=0).median
        slowest = torch.tensor([statistics.median(times[kind]), float(mem.result.peak_bytes),
                                *(phases[p] for p in PHASES)], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        results[kind].update(step=slowest[0].item(), peak=int(slowest[1].item()),
                             phases=dict(zip(PHASES, slowest[2:].tolist(), strict=True)))
    if ctx.rank == 0:
        Path(out).write_text(json.dumps({"threads": torch.get_num_threads(), "results": results}))
    shutdown()


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}


def _check(proc: subprocess.CompletedProcess, args: list[str]) -> None:
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:2])}: failed (exit {proc.returncode})\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def _job(args: list[str], *, ranks: int, threads: int) -> None:
    """Run this file with ``args`` under torchrun on ``ranks`` ranks."""
    from torchsmith.distributed.launch import LaunchConfig, build_command

    cmd, _ = build_command(LaunchConfig(nproc_per_node=ranks), args, entry=[__file__])
    _check(subprocess.run(cmd, env=_env(threads), capture_output=True, text=True), args)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _side_by_side(args: list[list[str]], *, threads: int) -> None:
    """Run this file once per ``args`` entry, all at once, each in its own world-size-1 group."""
    with tempfile.TemporaryDirectory() as barrier:
        def env() -> dict[str, str]:
            return {**_env(threads), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(_free_port()), "SCALE_BARRIER_DIR": barrier, "SCALE_COPIES": str(len(args))}

        procs = [subprocess.Popen([sys.executable, __file__, *a], env=env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for a in args]
        for a, proc in zip(args, procs, strict=True):
            out, err = proc.communicate()
            _check(subprocess.CompletedProcess(a, proc.returncode, out, err), a)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _error(predicted: float, measured: float, target: float) -> str:
    err = (predicted - measured) / measured
    return f"{err:+.1%}{'' if abs(err) <= target else ' MISS'}"


def _median_profile(ones: list[dict], kind: str):
    """``kind``'s per-phase medians over rounds, with the plain step's peak and optimizer state."""
    from torchsmith.distributed.scale_model import StepProfile

    return StepProfile(**{f"{phase}_seconds": statistics.median(o["phases"][kind][phase] for o in ones)
                          for phase in PHASES},
                       peak_bytes=max(o["peak"] for o in ones), optimizer_state_bytes=ones[0]["optimizer_state"])


def _compute(o: dict) -> float:
    return sum(sum(phases.values()) for phases in o["phases"].values())


def _measure(spec: str, steps: int, ranks: int, rounds: int, threads: int) -> dict:
    """``rounds`` rounds of: 1 rank alone, 1 rank beside ranks-1 copies, the collective benchmark, the
    real run. Repeating the whole sequence spreads a shared machine's changing load over every figure."""
    from torchsmith.distributed.collective_bench import sizes_up_to
    from torchsmith.distributed.scale_model import ModelShape, ScaleAssumptions, comm_calls

    alone, beside, samples, runs = [], [], [], []
    sizes: tuple[int, ...] = ()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            outs = [str(Path(tmp) / f"one{r}_{i}.json") for i in range(ranks + 1)]
            bench_out, two_out = str(Path(tmp) / f"bench{r}.json"), str(Path(tmp) / f"two{r}.json")
            _side_by_side([["--one", spec, str(steps), str(ranks), outs[0]]], threads=threads)  # alone
            # Beside ranks - 1 copies of itself: on a CPU host the ranks share cores and memory bandwidth.
            _side_by_side([["--one", spec, str(steps), str(ranks), o] for o in outs[1:]], threads=threads)
            ones = [json.loads(Path(o).read_text()) for o in outs]
            alone.append(ones[0])
            beside.append(max(ones[1:], key=_compute))  # the slowest copy: a step waits for the slowest rank
            if not sizes:
                shape = ModelShape(tensor_bytes=tuple(ones[0]["tensor_bytes"]),
                                   block_bytes=tuple(ones[0]["block_bytes"]))
                sizes = sizes_up_to(2 * max(c.nbytes for s in STRATEGIES
                                            for c in comm_calls(s, shape, ScaleAssumptions())))
            _job(["--bench", json.dumps(sizes), bench_out], ranks=ranks, threads=threads)
            samples += json.loads(Path(bench_out).read_text())
            _job(["--two", spec, str(steps), two_out], ranks=ranks, threads=threads)
            runs.append(json.loads(Path(two_out).read_text())["results"])
    measured = {kind: {"step": statistics.median(r[kind]["step"] for r in runs),
                       "step_range": (min(r[kind]["step"] for r in runs), max(r[kind]["step"] for r in runs)),
                       "phases": {p: statistics.median(r[kind]["phases"][p] for r in runs) for p in PHASES},
                       "peak": max(r[kind]["peak"] for r in runs), "calls": runs[0][kind]["calls"],
                       "bytes": runs[0][kind]["bytes"]} for kind in STRATEGIES}
    return {"alone": alone, "beside": beside, "samples": samples, "sizes": sizes, "measured": measured}


def evaluate(spec: str, steps: int, ranks: int, rounds: int, interconnect: str, threads: int) -> list[str]:
    from torchsmith.distributed.alpha_beta import CollectiveSample, fit_link, fit_links, links_of, parse_interconnect
    from torchsmith.distributed.scale_model import ModelShape, ScaleAssumptions, comm_calls, predict

    got = _measure(spec, steps, ranks, rounds, threads)
    one, measured = got["alone"][0], got["measured"]
    shape = ModelShape(tensor_bytes=tuple(one["tensor_bytes"]), block_bytes=tuple(one["block_bytes"]))
    cfg = ScaleAssumptions(overlap=False)  # CPU: the ranks' threads fill the cores (see the docstring)
    samples = [CollectiveSample(**s) for s in got["samples"]]
    fit, fits = fit_link(samples), fit_links(samples)
    links = links_of(fits)
    profile = {kind: _median_profile(got["alone"], kind) for kind in ("single", *STRATEGIES)}
    profile_beside = {kind: _median_profile(got["beside"], kind) for kind in ("single", *STRATEGIES)}
    k = profile["single"].optimizer_state_bytes / (shape.param_bytes / 4)
    print(f"\n{spec}: W = {_mib(shape.param_bytes)} of fp32 parameters ({len(shape.tensor_bytes)} tensors, "
          f"{len(shape.block_bytes)} blocks + root {_mib(shape.root_bytes)}), K = {k:.2f} optimizer bytes/parameter, "
          f"{one['threads']} thread(s) per rank, medians of {rounds} rounds, load {os.getloadavg()[0]:.2f}")
    print(f"  1 rank (world size 1, micro-batch of 1/{ranks} of the global batch), forward / backward / optimizer; "
          f"plain step's peak {_mib(profile['single'].peak_bytes)}:")
    for name, profiles in (("alone", profile), (f"beside {ranks - 1} copies", profile_beside)):
        print(f"    {name:<17} " + "   ".join(
            f"{kind} {p.forward_seconds * 1e3:.0f}/{p.backward_seconds * 1e3:.0f}/{p.optimizer_seconds * 1e3:.0f} ms"
            for kind, p in profiles.items()))
    print(f"    {ranks} ranks (measured) " + "   ".join(
        f"{kind} " + "/".join(f"{measured[kind]['phases'][p] * 1e3:.0f}" for p in PHASES) + " ms"
        for kind in STRATEGIES) + "   (slowest rank's; DDP's all-reduce ends inside backward)")
    bias = ", ".join(f"{c} {b:+.0%}" for c, b in fit.bias_by_collective.items())
    largest = _mib(got["sizes"][-1])
    print(f"  one link for all collectives on {ranks} gloo ranks ({fit.samples} samples, 4 KiB..{largest}): "
          f"{fit.link.describe()}; relative residual {fit.relative_residual:.1%} (worst {fit.max_relative_error:.1%}); "
          f"mean error by collective: {bias}")
    print("  one link per collective (what the prediction uses): " + "; ".join(
        f"{c} {f.link.describe()} (residual {f.relative_residual:.1%})" for c, f in fits.items()))
    print(f"  {'strategy':<8} {'step pred':>9} {'(bounds)':>17} {'measured':>9} {'(rounds)':>17} {'error':>11} "
          f"{'pred beside':>11} {'error':>11}   {'peak pred':>10} {'measured':>10} {'error':>8}")
    misses = []
    for kind in STRATEGIES:
        p = predict(kind, ranks, profile=profile[kind], shape=shape, link=links, cfg=cfg)
        q = predict(kind, ranks, profile=profile_beside[kind], shape=shape, link=links, cfg=cfg)
        m = measured[kind]
        errors = {"step time (1 rank alone)": _error(p.step.predicted_seconds, m["step"], STEP_TARGET),
                  "step time (1 rank beside copies)": _error(q.step.predicted_seconds, m["step"], STEP_TARGET),
                  "peak memory": _error(p.memory.peak_bytes, m["peak"], PEAK_TARGET)}
        misses += [f"{spec} {kind} at {ranks} ranks: {what} {e}" for what, e in errors.items() if "MISS" in e]
        step_err, beside_err, peak_err = errors.values()
        low, high = m["step_range"]
        print(f"  {kind:<8} {p.step.predicted_seconds * 1e3:>7.1f}ms "
              f"({p.step.full_overlap_seconds * 1e3:>6.1f}-{p.step.no_overlap_seconds * 1e3:>6.1f}ms) "
              f"{m['step'] * 1e3:>7.1f}ms ({low * 1e3:>6.1f}-{high * 1e3:>6.1f}ms) {step_err:>11} "
              f"{q.step.predicted_seconds * 1e3:>9.1f}ms {beside_err:>11}   "
              f"{_mib(p.memory.peak_bytes):>10} {_mib(m['peak']):>10} {peak_err:>8}")
    print(f"  comm per step, derived from the shape | counted on the {ranks}-rank run (printed only, not an input):")
    for kind in STRATEGIES:
        m, derived = measured[kind], {}
        for c in comm_calls(kind, shape, cfg):
            derived.setdefault(c.collective, [0, 0])
            derived[c.collective][0] += c.nbytes
            derived[c.collective][1] += 1
        print(f"    {kind:<6} " + ", ".join(f"{op} {_mib(b)} in {n}" for op, (b, n) in sorted(derived.items()))
              + " | " + ", ".join(f"{op} {_mib(b)} in {m['calls'][op]}" for op, b in sorted(m["bytes"].items())))
    link = parse_interconnect(interconnect)
    print(f"  predicted at scale over {interconnect} ({link.describe()}) with this rank's compute (alone): "
          "step without / with full overlap, comm share (no overlap), peak per rank")
    table = [predict(kind, n, profile=profile[kind], shape=shape, link=link, cfg=cfg)
             for n in TABLE_RANKS for kind in STRATEGIES]
    for p in table:
        print(f"    {p.ranks:>4} ranks {p.strategy:<6} {p.step.no_overlap_seconds * 1e3:>9.1f} / "
              f"{p.step.full_overlap_seconds * 1e3:>7.1f} ms  comm {p.step.comm_share:>5.1%}  "
              f"peak {_mib(p.memory.peak_bytes)}")
    return misses


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["gpt-mini", "hf-llama"])
    parser.add_argument("--interconnect", default="100Gbps,5us",
                        help="the assumed link for the 8/64/512-rank table: BANDWIDTH,LATENCY")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks to predict and run (more than the cores: oversubscribed, and said so)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="repeats of the whole measurement sequence")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    threads = max(1, cores // args.ranks)  # the cores a rank gets when the ranks share the machine
    over = f", OVERSUBSCRIBED ({args.ranks} ranks x {threads} thread on {cores} cores)" if args.ranks > cores else ""
    print(f"scale model: {args.ranks} ranks predicted from 1, {threads} thread(s) per rank, "
          f"{cores} cores{over}, load {os.getloadavg()[0]:.2f} at start")
    misses = [m for spec in args.workloads
              for m in evaluate(spec, args.steps, args.ranks, args.rounds, args.interconnect, threads)]
    print(f"\nload {os.getloadavg()[0]:.2f} at end")
    print("targets missed:\n  " + "\n  ".join(misses) if misses else "every target met")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one_rank(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1:2] == ["--bench"]:
        bench(json.loads(sys.argv[2]), sys.argv[3])
    elif sys.argv[1:2] == ["--two"]:
        two_ranks(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main(sys.argv[1:])

"""Communication volume and optimizer-state memory per strategy, measured on 2 gloo ranks.

    PYTHONPATH=src .venv/bin/python benchmarks/dist_comm.py [WORKLOAD ...]   (default: mlp gpt-mini)

Starts one torchrun job (2 CPU workers) per workload. Each worker trains every strategy for
a few steps on the same global batches and counts the collectives a step issues
(torchsmith.distributed.commcount), then rank 0 prints bytes per step as multiples of the model's
parameter bytes P, and the per-rank optimizer state. Step times are printed too, but on a
shared 2-core machine they are noise-prone: read the ratios, not the seconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

STEPS = 3
STRATEGIES = {"ddp": {"kind": "ddp"}, "ddp fp16 hook": {"kind": "ddp", "comm_hook": "fp16"},
              "zero1": {"kind": "zero1"}, "fsdp2": {"kind": "fsdp2"}}


def worker(spec: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from torchsmith.distributed.commcount import CommStats, count_collectives, observe_ddp
    from torchsmith.distributed.runtime import init_from_env, shard_batch
    from torchsmith.distributed.zero1 import optimizer_state_bytes
    from torchsmith.engine.loop import build_step
    from torchsmith.plan import Plan
    from torchsmith.workload import load_workload

    ctx = init_from_env(torch.device("cpu"))
    w = load_workload(spec)
    batches = [b for b, _ in zip(w.iter_batches(), range(STEPS + 1), strict=False)]
    results = {}
    for name, parallel in STRATEGIES.items():
        plan = Plan.from_dict({**Plan().to_dict(), "parallel": parallel})
        step = build_step(w, plan, ctx.device)
        if parallel["kind"] in ("ddp", "zero1") and "comm_hook" not in parallel:
            observe_ddp(step.model)
        step(shard_batch(batches[0], ctx.rank, ctx.world_size))  # warm-up, not counted
        stats, times = CommStats(), []
        with count_collectives(stats):
            for b in batches[1:]:
                t0 = time.perf_counter()
                step(shard_batch(b, ctx.rank, ctx.world_size))
                times.append(time.perf_counter() - t0)
        model = step.model.module if hasattr(step.model, "module") else step.model
        results[name] = {
            "bytes_per_step": {op: n / STEPS for op, n in stats.bytes.items()},
            "calls_per_step": {op: n / STEPS for op, n in stats.calls.items()},
            "opt_state_bytes": optimizer_state_bytes(step.optimizer),
            "step_s": statistics.median(times),
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()) * (
                ctx.world_size if parallel["kind"] == "fsdp2" else 1),  # FSDP2 params are local shards
        }
    Path(out).write_text(json.dumps({"rank": ctx.rank, "results": results})) if ctx.rank == 0 else None
    dist.destroy_process_group()


def main(specs: list[str]) -> None:
    import os
    import subprocess

    from torchsmith.distributed.launch import LaunchConfig, build_command

    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "result.json")
            cmd, _ = build_command(LaunchConfig(nproc_per_node=2), ["--worker", spec, out], entry=[__file__])
            env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{spec}: torchrun failed\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            results = json.loads(Path(out).read_text())["results"]
        p = results["ddp"]["param_bytes"]
        ddp_opt, ddp_time = results["ddp"]["opt_state_bytes"], results["ddp"]["step_s"]
        print(f"\n{spec}: P = {p / 2**20:.2f} MiB of fp32 parameters, 2 ranks, {STEPS} steps counted")
        print(f"{'strategy':<15} {'bytes/step (x P)':<42} {'total':>7} {'opt state/rank':>15} {'step time vs ddp':>17}")
        for name, r in results.items():
            ops = ", ".join(f"{op} {b / p:.2f}" for op, b in sorted(r["bytes_per_step"].items()))
            total = sum(r["bytes_per_step"].values()) / p
            print(f"{name:<15} {ops:<42} {total:>6.2f}P {r['opt_state_bytes'] / ddp_opt:>14.2f}x "
                  f"{r['step_s'] / ddp_time:>16.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1:] or ["mlp", "gpt-mini"])

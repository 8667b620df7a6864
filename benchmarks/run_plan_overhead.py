"""Overhead of the injection: ``torchsmith run --plan <as-written plan> -- python train.py`` vs
``python train.py``, steps/s as the script itself reports it, alternating runs. Target: within 2%.

On a shared machine the run-to-run spread of steps/s can exceed 2%, so it also prints what the
injection adds to each step, timed in-process: under an as-written plan that is only the
optimizer step pre- and post-hooks (no module hooks once the first step is over), as a share of
the script's median step time.

    PYTHONPATH=src .venv/bin/python benchmarks/run_plan_overhead.py [--pairs 4] [--iters 60]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "nanogpt_style" / "train.py"


def steps_per_second(cmd: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return float(re.findall(r"steps/s ([0-9.]+)", out)[-1])


def hook_seconds_per_step(n: int = 200_000) -> float:
    """The two optimizer-step hooks the injection leaves on under an as-written plan, called directly."""
    import time

    import torch

    from torchsmith.inject.plan_injection import InjectSpec, PlanInjection
    from torchsmith.plan import Plan

    inj = PlanInjection(InjectSpec(plan=Plan().to_dict()))  # not installed: its hooks are called by hand
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    inj._pre_step(opt, (), {})
    inj._post_step(opt, (), {})  # the first step: finds no model, drops the (absent) module hooks
    start = time.perf_counter()
    for _ in range(n):
        inj._pre_step(opt, (), {})
        inj._post_step(opt, (), {})
    return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1, help="OMP threads for both (a shared machine: 1 is steadier)")
    args = ap.parse_args()
    from torchsmith.plan import Plan

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    script = [sys.executable, str(SCRIPT), "--max-iters", str(args.iters), "--log-interval", "100000"]
    with tempfile.TemporaryDirectory() as tmp:
        plan = Plan().save(Path(tmp) / "plan.json")
        injected = [sys.executable, "-m", "torchsmith", "run", "--plan", str(plan), "--", *script]
        plain, inj = [], []
        for i in range(args.pairs):
            order = ((script, plain), (injected, inj)) if i % 2 == 0 else ((injected, inj), (script, plain))
            for cmd, out in order:
                out.append(steps_per_second(cmd))
    ratio = statistics.median(inj) / statistics.median(plain)
    hook_s = hook_seconds_per_step()
    print(f"python train.py: {statistics.median(plain):.3f} steps/s  runs {[round(x, 3) for x in plain]}")
    print(f"run --plan as-written: {statistics.median(inj):.3f} steps/s  runs {[round(x, 3) for x in inj]}")
    print(f"ratio {ratio:.3f} (target: within 2%, i.e. >= 0.98)")
    print(f"injection hooks: {hook_s * 1e6:.2f} us per step = {hook_s * statistics.median(plain):.4%} of this "
          "script's step")


if __name__ == "__main__":
    main()

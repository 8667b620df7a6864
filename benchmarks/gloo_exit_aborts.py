"""How often a two-rank gloo DDP script aborts at exit, as written and under torchsmith's exit settle.

The script is ``tests/scripts/ddp_loop.py`` (the PyTorch DDP tutorial's shape: ``barrier()``,
``destroy_process_group()``, exit). Each run is a fresh ``torchrun --standalone --nproc-per-node 2``
job, alternating: as written, then under ``torchsmith run --plan`` with an empty plan, whose
injection sleeps ``inject.gloo_exit.SETTLE_SECONDS`` at each rank's exit. An abort is torchrun
failing with "terminate called without an active exception" in its output (gloo's teardown race,
inject/gloo_exit.py). Prints each arm's count with its 95% Wilson interval.

    PYTHONPATH=src .venv/bin/python benchmarks/gloo_exit_aborts.py [--runs 30]
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "ddp_loop.py"
ABORT = "terminate called without an active exception"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion k/n (sound at k = 0, unlike the normal one)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30, help="runs of each arm")
    args = ap.parse_args()
    from torchsmith.plan import Plan

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        sys.exit("torchrun is not installed beside this interpreter")
    job = [torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPT), "--steps", "3"]
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        Plan().save(plan)
        arms = {"as written": job, "torchsmith run --plan": [sys.executable, "-m", "torchsmith", "run", "--plan",
                                                             str(plan), "--", *job]}
        aborts = dict.fromkeys(arms, 0)
        other = dict.fromkeys(arms, 0)
        for i in range(args.runs):
            for name, cmd in arms.items():
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
                if done.returncode != 0:
                    aborts[name] += ABORT in done.stdout + done.stderr
                    other[name] += ABORT not in done.stdout + done.stderr
            print(f"\r{i + 1}/{args.runs} runs of each arm", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for name in arms:
        low, high = wilson(aborts[name], args.runs)
        print(f"{name:<22} aborted at exit in {aborts[name]:>2} of {args.runs} runs "
              f"(95% interval {low:.1%}-{high:.1%}); other failures: {other[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

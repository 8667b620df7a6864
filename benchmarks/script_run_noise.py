"""How far apart fresh processes of one unmodified script are, as the script tuner measures them.

Runs the script as written N times per window length (``tuner.script.run.run_script``, the same
in-process step timestamps tune uses) and prints each run's median step time and the ratio of
the slowest to the fastest. This spread is why ``tune -- python train.py`` runs a would-be winner
twice and counts the slower look, and why a longer window alone does not remove it.

    PYTHONPATH=src .venv/bin/python benchmarks/script_run_noise.py [--runs 8] [--windows 10,100] \\
        [-- python tests/scripts/accelerate_loop.py --steps 400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchsmith.plan import Plan
from torchsmith.tuner.script.run import ScriptRunConfig, run_script

DEFAULT = [sys.executable, str(Path(__file__).resolve().parent.parent / "tests" / "scripts" / "accelerate_loop.py"),
           "--steps", "400"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--windows", default="10,100")
    ap.add_argument("command", nargs="*", help="the script (after --); default: the Accelerate loop")
    args = ap.parse_args()
    command = args.command or DEFAULT
    for window in (int(w) for w in args.windows.split(",")):
        runs = [run_script(command, Plan(), ScriptRunConfig(window=window)) for _ in range(args.runs)]
        bad = [r.error for r in runs if not r.ok]
        if bad:
            sys.exit(f"a run failed: {bad[0]}")
        ms = [r.step_seconds * 1e3 for r in runs]
        print(f"window {window:>4}: " + " ".join(f"{t:.1f}" for t in ms)
              + f" ms; slowest / fastest {max(ms) / min(ms):.2f}", flush=True)


if __name__ == "__main__":
    main()

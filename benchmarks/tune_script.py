"""Zero-change tuning vs the Workload tuner, on the same nanoGPT-style model.

1. ``tune -- python examples/nanogpt_style/train.py`` (the script, unmodified) -> plan S;
2. ``tune examples/nanogpt_style/workload.py:workload`` (the same model as a Workload) -> plan W;
3. both re-measured side by side: the script as written and under S, in alternating runs (steps/s
   from inside each process); the workload as written and under W, interleaved in one process.

Targets: script speedup >= 0.9x the workload speedup, and >= 0.98 (never worse than as written).

    PYTHONPATH=src .venv/bin/python benchmarks/tune_script.py [--budget 6m] [--pairs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "nanogpt_style" / "train.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="6m")
    ap.add_argument("--pairs", type=int, default=3, help="alternating (as written, tuned) script runs re-measured")
    ap.add_argument("--window", type=int, default=10)
    args = ap.parse_args()

    import torchsmith
    from torchsmith.harness.compare import measure_plans
    from torchsmith.plan import Plan
    from torchsmith.text import parse_duration
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    from torchsmith.tuner.script.run import ScriptRunConfig, run_script

    cmd = [sys.executable, str(SCRIPT), "--max-iters", "100000"]  # each run ends itself after its window
    run_cfg = ScriptRunConfig(window=args.window)
    s = tune_script(cmd, ScriptTuneConfig(budget_seconds=parse_duration(args.budget), run=run_cfg))
    print(f"script tune:   {s.plan.describe():<60} says {s.speedup or 1:.2f}x in {s.elapsed_seconds:.0f} s")
    for c in s.candidates:
        print(f"   {c.status:<9} {c.change:<50} {c.speedup or 0:.2f}x  {c.reason[:80]}")
    for knob, why in s.skipped:
        print(f"   not searched: {knob}: {why}")
    w = torchsmith.load_workload(str(SCRIPT.parent / "workload.py") + ":workload")
    wt = torchsmith.tune(w, budget=args.budget)
    print(f"workload tune: {wt.plan.describe():<60} says {wt.speedup or 1:.2f}x in {wt.elapsed_seconds:.0f} s")

    # Re-measure. The script: alternating runs, so drift on a shared machine hits both alike.
    base, tuned = [], []
    for _ in range(args.pairs):
        for plan, out in ((Plan(), base), (s.plan, tuned)):
            r = run_script(cmd, plan, run_cfg)
            if r.ok:
                out.append(r.steps_per_second)
    script_speedup = statistics.median(tuned) / statistics.median(base) if s.plan != Plan() and base and tuned else 1.0
    if wt.plan != Plan():
        mb, mt = measure_plans(w, [Plan(), wt.plan], steps=12, measure_memory=False)
        workload_speedup = mb.step_seconds / mt.step_seconds
    else:
        workload_speedup = 1.0
    ratio = script_speedup / workload_speedup
    print(
        f"re-measured:   script {script_speedup:.2f}x "
        f"(steps/s as written {statistics.median(base) if base else 0:.2f}), "
        f"workload {workload_speedup:.2f}x"
    )
    print(
        f"script / workload speedup: {ratio:.2f} (target >= 0.90); script vs as written: {script_speedup:.2f} "
        f"(target >= 0.98)"
    )


if __name__ == "__main__":
    main()

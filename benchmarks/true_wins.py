"""True wins: a script with a planted optimizer win must be tuned to it, and the claim must hold.

``benchmarks/scripts/many_params.py`` steps hundreds of small tensors with Adam's for-loop
implementation (PyTorch's default for CPU tensors): ``foreach``/``fused`` cut the optimizer's
per-tensor overhead. The win's size depends on the machine (batch 4096: ~1.2-1.4x on the 2-core AVX2 VM, fused
1.57x and foreach 1.24x on an AVX-512 one), so by default (``--batch auto``) the benchmark first measures it
in this process, for-loop, foreach and fused Adam interleaved step by step at several batch sizes, and
plants the issue's ~1.3x: the batch whose best win lies nearest ``PLANTED``. Each
tune's claimed interval is then checked against an independent re-measurement in fresh processes
(``verify_script``) of at least as many pairs as the claim, the design the claimed interval
describes. Targets: at least 9 of 10 tunes find it; every interval contains its re-measured ratio.

    PYTHONPATH=src .venv/bin/python benchmarks/true_wins.py [--repeats 10] [--budget 8m] [--verify-budget 2m] \
        [--batch auto|4096]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchsmith.measure.intervals import SpeedupInterval

SCRIPT = Path(__file__).resolve().parent / "scripts" / "many_params.py"
PLANTED = 1.3
"""The win issue 22 asks the tuner to find 9 times in 10: the best optimizer implementation's speedup."""
BATCHES = (2048, 3072, 4096, 6144, 8192, 12288, 16384)
"""Where ``--batch auto`` looks: a larger batch adds matmul work beside the same optimizer work, a smaller win.
Steps of 1.5x, not 2x: on the AVX-512 VM fused read 1.41x at 4096 and 1.23x at 8192, and the nearest of
those planted 1.23x, short of the issue's 1.3x."""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10, help="tunes to run")
    ap.add_argument("--budget", default="8m", help="each tune's budget (a 1.3x takes ~29 pairs: "
                                                   "~17 s a pair on the 2-core AVX2 VM, ~9 s on an AVX-512 one)")
    ap.add_argument("--verify-budget", default="2m", help="each independent re-measurement's budget")
    ap.add_argument("--knobs", default=None, help="comma-separated knobs to search (default: all)")
    ap.add_argument("--tensors", type=int, default=300, help="small parameter tensors in the script")
    ap.add_argument("--work", type=int, default=256, help="width of the script's fixed matmul")
    ap.add_argument("--batch", default="auto", help="rows of the script's fixed matmul: more, a smaller win; "
                                                    f"auto: the one of {BATCHES} that plants nearest {PLANTED}x here")
    args = ap.parse_args()
    args.batch = pick_batch(args.tensors, args.work) if args.batch == "auto" else int(args.batch)

    from torchsmith.text import parse_duration
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    from torchsmith.tuner.script.verify import ScriptVerifyConfig, verify_script

    cmd = [sys.executable, str(SCRIPT), "--steps", "100000", "--tensors", str(args.tensors), "--work", str(args.work),
           "--batch", str(args.batch)]
    cfg = ScriptTuneConfig(budget_seconds=parse_duration(args.budget),
                           knobs=tuple(args.knobs.split(",")) if args.knobs else None)
    found = held = 0
    for i in range(args.repeats):
        r = tune_script(cmd, cfg)
        iv = r.speedup_interval
        if r.plan.optimizer.impl not in ("foreach", "fused") or iv is None:
            tried = ", ".join(f"{c.change} {c.status} {c.interval.describe() if c.interval else ''}"
                              for c in r.candidates) or "none"
            tried += "".join(f"; not tried: {knob} ({why})" for knob, why in r.skipped)
            proof = [n for n in r.notes if "final proof" in n]  # a search win the proof did not confirm
            print(f"tune {i + 1:>2}: missed ({r.plan.describe()}, {_cost(r)}); tried: {tried}"
                  + "".join(f"; {n}" for n in proof), flush=True)
            continue
        found += 1
        # As many pairs as the claim: the claim says where a re-measurement of that design lands. A verify that
        # stops at 3-4 pairs is noisier (benchmarks/pair_caps.py --short-verify: 82-90% inside, not 94-97%).
        v = verify_script(r.plan, cmd, ScriptVerifyConfig(budget_seconds=parse_duration(args.verify_budget),
                                                          min_pairs=iv.pairs, max_pairs=max(12, iv.pairs)))
        inside = iv.low <= v.interval.estimate <= iv.high
        held += inside
        print(f"tune {i + 1:>2}: {r.plan.describe()} claimed {iv.describe()} ({_cost(r)}); "
              f"re-measured {v.interval.describe()}: "
              f"{'inside' if inside else 'OUTSIDE'} the claim", flush=True)
    need = math.ceil(0.9 * args.repeats)
    print(f"found the planted win: {found} of {args.repeats} (target >= {need}); "
          f"re-measured inside the claimed interval: {held} of {found} (target: all)")
    return 0 if found >= need and held == found else 1


def planted_win(tensors: int, work: int, batch: int, steps: int = 30) -> dict[str, SpeedupInterval]:
    """foreach's and fused's speedup over the for-loop on the script's step, measured here with its 95%
    interval: the three optimizers step in turn, one step each, so each round of ``steps`` is a pair that
    shared one moment of the machine. One process: the interval holds step-to-step noise, not the
    process-to-process noise a tune's pairs of processes see."""
    from torchsmith.measure.intervals import speedup_interval

    sys.path.insert(0, str(SCRIPT.parent))
    from many_params import training_step  # the script's own step, so the win sized is the win planted

    steppers = {impl: training_step(tensors, work, batch, **({} if impl == "loop" else {impl: True}))
                for impl in ("loop", "foreach", "fused")}
    seconds: dict[str, list[float]] = {impl: [] for impl in steppers}
    for i in range(3 + steps):  # 3 warm-up steps each
        for impl, step in steppers.items():
            began = time.perf_counter()
            step()
            if i >= 3:
                seconds[impl].append(time.perf_counter() - began)
    return {impl: speedup_interval(seconds["loop"], seconds[impl]) for impl in ("foreach", "fused")}


def pick_batch(tensors: int, work: int) -> int:
    """The batch of ``BATCHES`` whose best planted win lies nearest ``PLANTED`` on this machine, said."""
    wins = {batch: planted_win(tensors, work, batch) for batch in BATCHES}
    for batch, win in wins.items():
        print(f"planted win at batch {batch}: foreach {win['foreach'].describe()}, fused {win['fused'].describe()} "
              "(one process, steps interleaved)", flush=True)
    best = {b: max(iv.estimate for iv in win.values()) for b, win in wins.items()}
    batch = min(best, key=lambda b: abs(best[b] - PLANTED))
    print(f"using batch {batch}: best win {best[batch]:.2f}x, nearest the issue's {PLANTED}x", flush=True)
    return batch


def _cost(r) -> str:  # noqa: ANN001 - a ScriptTuneResult
    """'44 runs in 472 s': what the tune spent (one entry of ``written_files`` per run)."""
    return f"{len(r.written_files)} runs in {r.elapsed_seconds:.0f} s"


if __name__ == "__main__":
    sys.exit(main())

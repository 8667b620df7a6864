"""True wins: a script with a planted optimizer win must be tuned to it, and the claim must hold.

``benchmarks/scripts/many_params.py`` steps hundreds of small tensors with Adam's for-loop
implementation (PyTorch's default for CPU tensors): ``foreach``/``fused`` cut the optimizer's
per-tensor overhead. The win's size depends on the machine (batch 4096: ~1.2-1.4x on the 2-core AVX2 VM, fused
1.57x and foreach 1.24x on an AVX-512 one), so by default (``--batch auto``) the benchmark first measures it
on the script, fused against the for-loop in fresh-process pairs as ``verify`` measures, walking down the
batch sizes, and plants the issue's ~1.3x: the batch whose win lies nearest ``PLANTED``. Each
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
from collections.abc import Callable
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
                                                    f"auto: the one of {BATCHES} that plants nearest {PLANTED}x here, "
                                                    "sized on the script in fresh-process pairs")
    args = ap.parse_args()

    from torchsmith.text import parse_duration
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    from torchsmith.tuner.script.verify import ScriptVerifyConfig, verify_script

    def cmd_at(batch: int) -> list[str]:
        return [sys.executable, str(SCRIPT), "--steps", "100000", "--tensors", str(args.tensors),
                "--work", str(args.work), "--batch", str(batch)]
    cmd = cmd_at(pick_batch(cmd_at) if args.batch == "auto" else int(args.batch))
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


def planted_win(cmd: list[str], pairs: int = 6) -> SpeedupInterval:
    """Fused Adam's speedup over the for-loop on the script itself, as the tuner and ``verify`` see it:
    ``pairs`` alternating pairs of fresh processes, each with its injected step timer. (Fused is the best
    implementation here: it read 1.1-1.7x where foreach read less.) Sized in one process instead, with the
    three optimizers' steps interleaved, the win read higher: 1.26x at batch 8192 on the AVX-512 VM, where
    the tunes' claims there re-measured at 1.12-1.23x, so the win planted was smaller than the one asked."""
    from torchsmith.plan import OptimizerImpl, Plan
    from torchsmith.tuner.script.verify import ScriptVerifyConfig, verify_script

    fused = Plan(optimizer=OptimizerImpl(impl="fused"))
    return verify_script(fused, cmd, ScriptVerifyConfig(budget_seconds=600, min_pairs=pairs, max_pairs=pairs)).interval


def pick_batch(cmd_at: Callable[[int], list[str]]) -> int:
    """The batch of ``BATCHES`` whose planted win lies nearest ``PLANTED`` on this machine, said. The win
    shrinks as the batch grows, so the walk goes down from the largest batch and stops at the first that
    reaches ``PLANTED``; of it and the one before, the nearer is planted."""
    wins: dict[int, float] = {}
    for batch in sorted(BATCHES, reverse=True):
        win = planted_win(cmd_at(batch))
        wins[batch] = win.estimate
        print(f"planted win at batch {batch}: fused {win.describe()} (fresh-process pairs, as verify measures)",
              flush=True)
        if win.estimate >= PLANTED:
            break
    batch = min(wins, key=lambda b: abs(wins[b] - PLANTED))
    print(f"using batch {batch}: fused {wins[batch]:.2f}x, nearest the issue's {PLANTED}x", flush=True)
    return batch


def _cost(r) -> str:  # noqa: ANN001 - a ScriptTuneResult
    """'44 runs in 472 s': what the tune spent (one entry of ``written_files`` per run)."""
    return f"{len(r.written_files)} runs in {r.elapsed_seconds:.0f} s"


if __name__ == "__main__":
    sys.exit(main())

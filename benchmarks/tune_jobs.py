"""Where a ``tune --nproc-per-node N`` spends its budget: one line per torchrun job, beside the pace's estimate.

Each line: when the job began, its plans and steps, its wall time split into measuring, the scale
model's inputs and the job's start and end, and what the pace expected that job to cost (none for
the calibration, which runs before the pace exists); below it, the job's plans in the order measured.
At the end, each strategy candidate's measured speedup beside the scale model's predicted one (on CPU,
no overlap), the prediction its place in that order came from. The total is the tune's own time against its budget.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_jobs.py [--workload hf-llama] [--budget 65s] [--nproc 2]
"""

from __future__ import annotations

import argparse
import time

import torchsmith
import torchsmith.tuner.rank_rounds as rank_rounds
from torchsmith.plan import DDP
from torchsmith.tuner.strategy_order import predicted_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="hf-llama")
    ap.add_argument("--budget", default="65s")
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    started = time.perf_counter()
    measure, job = rank_rounds.RankRounds.measure, rank_rounds.rank_round

    def traced(self, plans, *, warmup, steps, **kw):
        expected = "-" if self.pace is None else f"{self.pace.estimate(len(plans), steps):.1f} s"
        began = time.perf_counter()
        out = measure(self, plans, warmup=warmup, steps=steps, **kw)
        r = self.last
        print(f"[{began - started:6.1f} s] {len(plans):2d} plans x ({warmup}+{steps}) steps: "
              f"wall {r.wall_seconds:.1f} s "
              f"= measure {r.measure_seconds:.1f} + inputs {r.inputs_seconds:.1f} + start/end "
              f"{r.wall_seconds - r.measure_seconds - r.inputs_seconds:.1f}; the pace expected {expected}\n"
              f"           {'; '.join(p.describe() for p in plans)}", flush=True)
        return out

    def keep(*a, **kw):
        r = job(*a, **kw)
        rank_rounds.RankRounds.last = r
        if r.scale_inputs is not None:
            rank_rounds.RankRounds.inputs = r.scale_inputs
        return r

    rank_rounds.RankRounds.measure, rank_rounds.rank_round = traced, keep
    result = torchsmith.tune(args.workload, budget=args.budget, knobs=["parallel"], nproc_per_node=args.nproc)
    claim = result.speedup_interval.describe() if result.speedup_interval else "no claim"
    print(f"total {time.perf_counter() - started:.1f} s of a {args.budget} budget; plan {result.plan.describe()}, "
          f"{claim}")
    for knob, why in result.skipped:
        print(f"  {knob}: {why}")
    for note in result.notes:
        print(f"  note: {note}")
    inputs = rank_rounds.RankRounds.inputs
    base = predicted_seconds(DDP(), inputs, nproc=args.nproc, overlap=False) if inputs else None
    print("strategy candidates, in the order measured: measured speedup over DDP's defaults | the scale model's")
    for c in (c for c in result.candidates if c.knob == "parallel"):
        pred = predicted_seconds(c.plan.parallel, inputs, nproc=args.nproc, overlap=False) if base else None
        measured = c.interval.describe() if c.interval else f"{c.speedup:.2f}x" if c.speedup else c.status
        print(f"  {c.plan.describe():45s} {measured:40s} | {f'{base / pred:.2f}x' if pred else 'not priced'}")


if __name__ == "__main__":
    main()

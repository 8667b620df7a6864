"""What an RNG snapshot per training step costs: torch's generators alone vs every RNG.

The Lightning callback keeps torch's RNG state at the start of each step, so a step that turns
non-finite can be replayed op by op (``torchsmith.integrations``); checkpoints and the harness
keep every RNG (``seeding.rng_state``). Prints the median microseconds of each, over rounds.

    PYTHONPATH=src .venv/bin/python benchmarks/rng_snapshot.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

from torchsmith.seeding import rng_state, torch_rng_state


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for name, fn in (("torch_rng_state (per step, Lightning replay)", torch_rng_state),
                     ("rng_state (torch + Python + numpy)", rng_state)):
        us = statistics.median(timeit.repeat(fn, number=args.calls, repeat=args.rounds)) / args.calls * 1e6
        print(f"{name:<46} {us:8.1f} us")


if __name__ == "__main__":
    main()

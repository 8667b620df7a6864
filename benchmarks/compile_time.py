"""torch.compile time for gpt-mini, with empty and with warm Inductor caches.

Prints the first step's excess over a steady step (the compile cost ``tune`` reports apart)
for whole-model and block-by-block compile: first in a fresh Inductor cache directory, as on
a new machine, then again with that cache warm. ``tune`` budgets transforms.compile.COMPILE_SETUP_SECONDS per
compile candidate from the cold figure.

    PYTHONPATH=src .venv/bin/python benchmarks/compile_time.py [--workload gpt-mini]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = """
import torch, torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.plan import Compile, Plan
w = torchsmith.load_workload({workload!r})
for regional in (False, True):
    m = measure_plans(w, [Plan(compile=Compile(enabled=True, regional=regional))], warmup=1, steps=3,
                      measure_memory=False)[0]
    print(f"  {{'regional' if regional else 'whole   '}}: compile {{m.compile_seconds:5.1f}} s, "
          f"step {{m.step_seconds * 1e3:.0f}} ms")
    torch._dynamo.reset()
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt-mini")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for label in ("empty Inductor cache", "warm Inductor cache"):
            print(f"{args.workload}, {label}:", flush=True)
            # A fresh process each time: in-process caches must not help the second run.
            subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD.format(workload=args.workload)], env=env,
                           check=True)


if __name__ == "__main__":
    main()

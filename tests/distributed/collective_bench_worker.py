"""Worker for test_alpha_beta: every rank runs the collective microbenchmark and writes its samples."""

import dataclasses
import json
import sys
from pathlib import Path

import torch

from torchsmith.distributed.collective_bench import BenchConfig, bench_collectives, sizes_up_to
from torchsmith.distributed.runtime import init_from_env, shutdown

ctx = init_from_env(torch.device("cpu"))
samples = bench_collectives(BenchConfig(sizes_bytes=sizes_up_to(4 << 20), warmup=1, repeats=3), ctx.device)
Path(sys.argv[1], f"rank{ctx.rank}.json").write_text(json.dumps({"samples": [dataclasses.asdict(s) for s in samples]}))
shutdown()

"""torchrun worker for the tests: ``engine.run`` on a workload, result JSON per rank and attempt.

    dist_run_worker.py SPEC OUT_DIR --steps N [--plan JSON] [--checkpoint-dir D --checkpoint-every K]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

sys.path.insert(0, str(Path(__file__).parent))


@record
def main() -> None:
    from torchsmith.engine.loop import run
    from torchsmith.plan import Plan
    from torchsmith.workload import load_workload

    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--plan", default=None)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--checkpoint-every", type=int, default=None)
    ap.add_argument("--async-checkpoint", action="store_true")
    a = ap.parse_args()
    plan = Plan.from_dict(json.loads(a.plan)) if a.plan else Plan()
    result = run(load_workload(a.spec), plan, steps=a.steps, checkpoint_dir=a.checkpoint_dir,
                 checkpoint_every=a.checkpoint_every, resume=a.checkpoint_dir is not None, device="cpu",
                 async_checkpoint=a.async_checkpoint)
    import torch.distributed as dist
    rank = dist.get_rank() if dist.is_initialized() else 0
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    out = {
        "rank": rank, "attempt": attempt, "start_step": result.start_step, "losses": result.losses,
        "resumed_from": str(result.resumed_from) if result.resumed_from else None,
        "skipped": [[str(p), why] for p, why in result.skipped_checkpoints],
        "changes": result.changes,
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / f"rank{rank}_attempt{attempt}.json").write_text(json.dumps(out))
    from torchsmith.distributed.runtime import shutdown

    shutdown()


if __name__ == "__main__":
    main()

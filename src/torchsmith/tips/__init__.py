"""``torchsmith bench tips``: every transform alone against the baseline, and folklore, measured here.

Modules:
    bench       run_tips: the baseline, every candidate alone, the folklore checks -> TipsReport
    candidates  one TipCandidate per transform knob value (from the search space), measured side by side
    folklore    the folklore checks ("empty_cache on OOM", "num_workers") measured on this machine

Example::

    from torchsmith.tips import run_tips
    report = run_tips(load_workload("mlp"), steps=4, warmup=1)
    [(r.label, r.speed, r.memory) for r in report.rows]
"""

from torchsmith.tips.bench import TipsReport, run_tips
from torchsmith.tips.candidates import TipCandidate, TipRow, candidates, measure_candidates
from torchsmith.tips.folklore import CHECKS, FolkloreResult, run_folklore

__all__ = ["TipsReport", "run_tips", "TipCandidate", "TipRow", "candidates", "measure_candidates",
           "FolkloreResult", "run_folklore", "CHECKS"]

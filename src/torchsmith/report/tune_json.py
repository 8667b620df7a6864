"""``tune --json``: a tuning result as one JSON object, for CI and scripts.

The same shape for a workload and a script (``ScriptTuneResult`` is a ``TuneResult``)::

    {"workload": "mlp", "plan": {...plan.json...}, "as_written": false,
     "speedup": {"estimate": 1.38, "low": 1.29, "high": 1.47, "confidence": 0.95, "pairs": 8},
     "baseline": {"step_seconds": 0.012, "peak_bytes": 1048576},
     "tuned": {"step_seconds": 0.0087, "peak_bytes": 1048576},
     "candidates": [{"knob": "optimizer", "value": "optimizer.impl=fused", "status": "accepted",
                     "ratio": 1.41, "interval": {...}}, ...],
     "noise": {"pair_range": 0.09, "spread": 0.04, "pairs": 4, "confidence": 0.95, "pairs_for_1.10x": 6},
     "pooled_noise": null,
     "notes": [...]}

``noise`` is the A/A run's: ``pair_range`` how far two runs side by side differ (95%), ``spread`` the
half-width of the A/A ratio's own interval. ``pooled_noise`` (scripts) is the same, pooled over every
experiment of the tune. ``as_written`` is true when the plan hands back the workload or script unchanged; ``speedup`` is
then exactly 1 with no pairs (the plan *is* the baseline). An interval with one pair has
``high: null`` (unbounded; JSON has no infinity).
"""

from __future__ import annotations

import math
from typing import Any

from torchsmith.measure.intervals import SpeedupInterval
from torchsmith.tuner.result import Candidate, TuneResult

IDENTITY = SpeedupInterval(estimate=1.0, low=1.0, high=1.0, pairs=0)
"""The as-written plan's speedup over itself: 1 by construction, nothing measured."""


def tune_json(r: TuneResult) -> dict[str, Any]:
    """The result as a JSON-ready dict (``json.dumps(tune_json(r))`` never writes NaN or Infinity)."""
    claimed = r.speedup_interval if not r.as_written and r.speedup_interval is not None else IDENTITY
    return {
        "workload": r.workload,
        "plan": r.plan.to_dict(),
        "as_written": r.as_written,
        "speedup": claimed.to_json(),
        "decided_by": r.decided_by.to_json() if r.decided_by is not None and not r.as_written else None,
        "baseline": _figures(r.baseline),
        "tuned": _figures(r.best),
        "candidates": [_candidate(c) for c in r.candidates if c.knob not in ("baseline", "best")],
        "ranks": r.ranks,
        "scale": [row.to_json() for row in r.scale],
        "interconnect": r.interconnect,
        "noise": r.noise.to_json() if r.noise is not None else None,
        "pooled_noise": r.pooled_noise.to_json() if r.pooled_noise is not None else None,
        "notes": list(r.notes),
    }


def _figures(c: Candidate) -> dict[str, Any]:
    return {"step_seconds": _finite(c.step_seconds), "peak_bytes": c.peak_memory_bytes}


def _candidate(c: Candidate) -> dict[str, Any]:
    return {"knob": c.knob, "value": c.change, "status": c.status, "ratio": _finite(c.speedup),
            "interval": c.interval.to_json() if c.interval is not None else None, "reason": c.reason}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None

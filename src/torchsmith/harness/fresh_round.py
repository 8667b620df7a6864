"""One round of :func:`~torchsmith.harness.compare.measure_plans` in a fresh Python process.

Noise has two levels (Kalibera and Jones, 2013). The steps of one process share its memory
placement, its core, its thread pool and whatever the search did before them, so the pairs of one
process can agree tightly on a ratio that the next process does not reproduce: on this 2-core VM
``tune mlp`` once proved 1.30x (95% interval 1.27-1.32) in its own process, and a fresh
``verify`` read 1.47x (1.44-1.50). A claim that must survive re-measurement therefore repeats
the *process*: each round of the proof (and of ``verify``) runs here, in a process of its own,
and the rounds' ratios give the interval's between-process width (``tuner.rounds``).

The workload is rebuilt in the child from its spec (``Workload.spec``: a built-in name,
``pkg.mod:fn`` or ``file.py:fn``), so a workload built in Python without one cannot be measured
this way; :func:`fresh_round` returns None then, and when the child fails, and the caller
measures in its own process instead.

Example::

    ms = fresh_round("mlp", [Plan(), plan], warmup=2, steps=12, device="cpu")
    ms[1].step_seconds / ms[0].step_seconds if ms else None
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.plan import Plan
from torchsmith.text import first_line

log = logging.getLogger(__name__)

START_SECONDS = 30.0
"""Allowance for the child's start (importing torch, building the workload) in its time limit."""


def fresh_round(spec: str | None, plans: list[Plan], *, warmup: int, steps: int, device: str,
                compare_steps: int | None = None, measure_memory: bool = False,
                timeout_s: float = 600.0) -> list[PlanMeasurement] | None:
    """``measure_plans(load_workload(spec), plans, ...)`` in a fresh process; None when there is no
    spec or the child did not hand back a measurement (the reason is logged)."""
    if not spec:
        return None
    with tempfile.TemporaryDirectory(prefix="torchsmith-round-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(json.dumps({
            "spec": spec, "plans": [p.to_dict() for p in plans], "warmup": warmup, "steps": steps,
            "device": device, "compare_steps": compare_steps, "measure_memory": measure_memory}))
        try:
            proc = subprocess.run([sys.executable, "-m", "torchsmith.harness.fresh_round", str(request), str(answer)],
                                  capture_output=True, text=True, timeout=timeout_s + START_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("fresh round of %s: no answer within %.0f s", spec, timeout_s + START_SECONDS)
            return None
        if proc.returncode != 0 or not answer.exists():
            log.warning("fresh round of %s exited %d: %s", spec, proc.returncode,
                        first_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output"))
            return None
        return [_measurement(m) for m in json.loads(answer.read_text())]


def _measurement(data: dict[str, Any]) -> PlanMeasurement:
    return PlanMeasurement(**{**data, "plan": Plan.from_dict(data["plan"])})


def _answer(request: dict[str, Any]) -> list[dict[str, Any]]:
    from torchsmith.harness.compare import measure_plans
    from torchsmith.workload import load_workload

    ms = measure_plans(load_workload(request["spec"]), [Plan.from_dict(p) for p in request["plans"]],
                       warmup=request["warmup"], steps=request["steps"], device=request["device"],
                       compare_steps=request["compare_steps"], measure_memory=request["measure_memory"])
    return [{**asdict(m), "plan": m.plan.to_dict()} for m in ms]


def main(argv: list[str]) -> int:
    request_path, answer_path = argv
    answer = _answer(json.loads(Path(request_path).read_text()))
    Path(answer_path).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

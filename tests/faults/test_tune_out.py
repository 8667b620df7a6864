"""Two `tune` processes x the same --out: both finish, and the file is always one complete plan.

The plan (and the report) are written atomically (temp file, fsync, rename: ``atomic.py``), so a
reader sees the previous file or the new one, never a mix. While both processes run, the test
reads the file as fast as it can and every read must parse as a whole plan.
"""

from __future__ import annotations

import json
import threading

import pytest
from fault_procs import finish, start

from torchsmith.plan import Plan

pytestmark = [pytest.mark.slow]


def test_two_tune_processes_x_the_same_out_both_finish_and_the_plan_is_whole(tmp_path):
    out, report = tmp_path / "plan.json", tmp_path / "report.html"
    args = ["tune", "mlp", "--budget", "20s", "--knobs", "threads", "--device", "cpu", "--out", out,
            "--report", report]
    procs = [start(args, tmp_path) for _ in range(2)]
    reads, bad, stop = [0], [], threading.Event()

    def watch():
        while not stop.is_set():
            try:
                text = out.read_text()
            except FileNotFoundError:
                continue
            reads[0] += 1
            try:
                Plan.from_dict(json.loads(text))
            except Exception as err:  # any failure to parse is the finding
                bad.append(f"{type(err).__name__}: {text[:200]!r}")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = [finish(p, timeout=400) for p in procs]
    finally:
        stop.set()
        watcher.join()
    for code, _, err in results:
        assert code == 0, err[-3000:]
    assert not bad, bad[:3]
    assert reads[0] > 0
    text = out.read_text()
    plan = Plan.from_dict(json.loads(text))
    assert text == json.dumps(plan.to_dict(), indent=2) + "\n"  # exactly one writer's bytes, nothing appended
    assert report.read_text().rstrip().endswith("</html>")
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


"""The settle at a torchrun worker's exit (inject/gloo_exit.py): registered under torchrun only,
and ahead of the injection's own exit handler, so it runs after it."""

from __future__ import annotations

import atexit
import json
import time

from torchsmith.inject import gloo_exit, plan_injection
from torchsmith.inject.env import PLAN_ENV_KEY
from torchsmith.plan import Plan


def _registered(monkeypatch) -> list:
    seen: list = []
    monkeypatch.setattr(atexit, "register", lambda fn, *args: seen.append((fn, args)))
    return seen


def test_a_torchrun_worker_settles_at_exit_and_a_plain_process_does_not(monkeypatch):
    seen = _registered(monkeypatch)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    gloo_exit.settle_at_exit()
    assert seen == []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    gloo_exit.settle_at_exit()
    assert seen == [(time.sleep, (gloo_exit.SETTLE_SECONDS,))]


def test_the_plan_injection_registers_the_settle_first(monkeypatch, tmp_path):
    seen = _registered(monkeypatch)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(plan_injection.PlanInjection, "install", lambda self: None)
    spec = {"plan": Plan().to_dict(), "out_dir": str(tmp_path), "warmup": 1, "window": 2, "seed": 0}
    monkeypatch.setenv(PLAN_ENV_KEY, json.dumps(spec))  # an out_dir: a tuning run
    plan_injection.install_from_env()
    assert seen[0] == (time.sleep, (gloo_exit.SETTLE_SECONDS,))  # first registered: run last
    assert len(seen) == 2  # then the tuning run's write_result

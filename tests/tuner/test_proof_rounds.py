"""Where a claim's rounds run: fresh processes when the workload has a spec, this one otherwise (said)."""

import torch

from torchsmith.harness.compare import wall_clock
from torchsmith.plan import OptimizerImpl, Plan
from torchsmith.tuner.pace import Pace
from torchsmith.tuner.proof_rounds import PROOF_PROCESSES, ProofRounds
from torchsmith.workload import load_workload

FOREACH = Plan().replace(optimizer=OptimizerImpl(impl="foreach"))


def _pace():
    return Pace(budget_seconds=60, step_seconds=0.01, warmup=1, steps=3)


def test_a_workload_with_a_spec_reserves_the_fresh_processes_of_the_proof():
    pace = _pace()
    one_round = pace.proof_reserve()
    rounds = ProofRounds.start(load_workload("mlp"), torch.device("cpu"), pace, compare_steps=None, clock=wall_clock)
    assert rounds.fresh and rounds.least == PROOF_PROCESSES and rounds.most > rounds.least
    assert pace.proof_reserve() > PROOF_PROCESSES * one_round  # every round, and each one's process start


def test_a_workload_built_in_python_is_proved_here_and_the_note_says_what_that_leaves_out():
    workload = load_workload("mlp")
    workload.spec = None
    rounds = ProofRounds.start(workload, torch.device("cpu"), _pace(), compare_steps=None, clock=wall_clock)
    assert not rounds.fresh and rounds.least == 1
    ms = rounds.measure([Plan(), FOREACH], steps=3)
    assert [m.plan for m in ms] == [Plan(), FOREACH] and rounds.in_process == 1
    note = rounds.note()
    assert note and "built in Python" in note and "noise between processes" in note


def test_a_stub_clock_measures_here_without_a_note():
    def clock(plan, run_step):
        run_step()
        return 1.0

    rounds = ProofRounds.start(load_workload("mlp"), torch.device("cpu"), _pace(), compare_steps=None, clock=clock)
    assert not rounds.fresh
    rounds.measure([Plan(), FOREACH], steps=3)
    assert rounds.note() is None

"""Which process of a command is the measured one: under torchrun, rank 0 in every run, so the loss
guard compares the same rank's per-step losses; otherwise the first process to step."""

from torchsmith.inject.plan_injection import InjectSpec, PlanInjection
from torchsmith.plan import Plan


def _injection(tmp_path):
    return PlanInjection(InjectSpec(plan=Plan().to_dict(), out_dir=str(tmp_path)))


def test_a_nonzero_rank_never_claims_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert _injection(tmp_path)._claim() is False
    assert not (tmp_path / "claim").exists()  # left for rank 0, whenever it steps


def test_rank_zero_claims_and_records_its_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    inj = _injection(tmp_path)
    assert inj._claim() is True and inj.facts.rank == 0
    assert _injection(tmp_path)._claim() is False  # one measured process per run


def test_without_torchrun_the_first_process_to_step_claims(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    inj = _injection(tmp_path)
    assert inj._claim() is True and inj.facts.rank is None

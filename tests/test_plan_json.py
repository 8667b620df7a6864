import json

import pytest

from torchsmith.plan import FP32, Autocast, Compile, MicroBatching, OptimizerImpl, Plan, PlanError, Threads


def test_default_plan_is_the_as_written_baseline():
    plan = Plan()
    assert plan.describe() == "as written"
    assert isinstance(plan.precision, FP32) and not plan.compile.enabled
    assert plan.threads.intra_op is None and plan.microbatching.count == 1


def test_json_round_trip(tmp_path):
    plan = Plan(threads=Threads(intra_op=2), precision=Autocast(dtype="bfloat16"),
                compile=Compile(enabled=True, regional=True), microbatching=MicroBatching(count=4),
                optimizer=OptimizerImpl(impl="foreach", set_to_none=False))
    path = plan.save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["precision"] == {"kind": "autocast", "dtype": "bfloat16"}
    assert Plan.load(path) == plan
    assert not list(tmp_path.glob("*.tmp"))  # atomic write leaves no temp file


@pytest.mark.parametrize("change, message", [
    ({"threads": {"intra_op": 0}}, "plan.threads.intra_op: 0 is out of range; allowed: 1 to 1024"),
    ({"threads": {"intra": 1}}, "plan.threads: unknown key 'intra'; allowed keys: intra_op, inter_op"),
    ({"bogus": 1}, "plan: unknown key 'bogus'"),
    ({"precision": {"kind": "amp2"}}, "plan.precision.kind: 'amp2' is not one of"),
    ({"precision": {"kind": "autocast", "dtype": "int8"}},
     "plan.precision.dtype: 'int8' is not allowed; expected one of ['bfloat16', 'float16']"),
    ({"compile": {"enabled": "yes"}}, "plan.compile.enabled: 'yes' is not allowed; expected true or false"),
    ({"compile": {"mode": "fastest"}}, "plan.compile.mode: 'fastest' is not allowed"),
    ({"microbatching": {"count": 1.5}}, "plan.microbatching.count: 1.5 is not allowed; expected an integer"),
    ({"microbatching": {"count": True}}, "expected an integer"),
    ({"optimizer": {"impl": "apex"}}, "plan.optimizer.impl: 'apex' is not allowed"),
    ({"threads": 3}, "plan.threads: expected an object, found 3"),
])
def test_every_validation_error_names_the_key_and_allowed_values(change, message):
    with pytest.raises(PlanError) as err:
        Plan.from_dict({"schema_version": 1, **change})
    assert message in str(err.value)


def test_schema_version_is_checked(tmp_path):
    with pytest.raises(PlanError, match="schema_version is 99"):
        Plan.from_dict({"schema_version": 99})
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        Plan.load(path)
    with pytest.raises(PlanError, match="does not exist"):
        Plan.load(tmp_path / "missing.json")


def test_direct_construction_is_validated_too():
    with pytest.raises(PlanError, match="out of range"):
        Threads(intra_op=-1)
    with pytest.raises(PlanError, match="expected one of"):
        Autocast(dtype="float8")

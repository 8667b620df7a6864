"""The pure parts of DDP knobs for torchrun scripts: which commands start several ranks, when the
script space holds DDP's knobs, how a DDP move composes with the DDP fields already won, the
adoption text, and how an unapplied DDP knob is read from the injection's typed outcomes."""

import pytest

from torchsmith.inject import KnobOutcome, strategy_note, unsupported_knobs
from torchsmith.inject.ddp import changed_fields, constructor_outcome
from torchsmith.plan import DDP, FSDP2, Plan, Zero1
from torchsmith.transforms.base import DeviceInfo
from torchsmith.tuner.script.adopt import adoption_lines
from torchsmith.tuner.script.search import unapplied
from torchsmith.tuner.script.space import DDP_KNOBS, script_space, with_move
from torchsmith.tuner.script.torchrun import launcher_ranks, threads_as_written

CPU = DeviceInfo(type="cpu", cores=2, native_bf16=False)
CUDA = DeviceInfo(type="cuda", cores=2, native_bf16=True)


@pytest.mark.parametrize(("command", "ranks"), [
    (["torchrun", "--nproc-per-node", "2", "train.py"], 2),
    (["/venv/bin/torchrun", "--nnodes", "1", "--standalone", "--nproc_per_node=4", "train.py"], 4),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], 2),
    (["torchrun", "train.py", "--nproc-per-node", "2"], 1),  # the script's own argument, not torchrun's
    (["torchrun", "--nproc-per-node", "auto", "train.py"], 1),
    (["torchrun", "train.py"], 1),
    (["python", "train.py"], 1),
])
def test_launcher_ranks_reads_torchruns_own_flag(command, ranks):
    assert launcher_ranks(command) == ranks


def test_threads_as_written_is_one_per_rank_under_a_multi_rank_torchrun():
    assert threads_as_written(["torchrun", "--nproc-per-node", "2", "t.py"], {}) == 1
    assert threads_as_written(["torchrun", "--nproc-per-node", "2", "t.py"], {"OMP_NUM_THREADS": "3"}) == 3
    assert threads_as_written(["python", "t.py"], {}) is None


def _names(dims):
    return [d.name for d in dims]


def test_ddp_knobs_only_for_several_ranks_and_a_script_that_builds_a_ddp():
    assert not set(DDP_KNOBS) & set(_names(script_space(CPU, uses_loader=False)))
    assert not set(DDP_KNOBS) & set(_names(script_space(CPU, uses_loader=False, ranks=1, builds_ddp=True)))
    assert not set(DDP_KNOBS) & set(_names(script_space(CPU, uses_loader=False, ranks=2, builds_ddp=False)))
    dims = {d.name: d for d in script_space(CPU, uses_loader=False, ranks=2, builds_ddp=True)}
    assert [n for n in dims if n.startswith("ddp.")] == list(DDP_KNOBS)
    assert dims["ddp.comm_hook"].candidates == (DDP(comm_hook="fp16"),)  # bf16 needs NCCL
    assert sum(len(dims[n].moves()) for n in DDP_KNOBS) == 5  # each costs real torchrun pairs: few
    cuda = {d.name: d for d in script_space(CUDA, uses_loader=False, ranks=2, builds_ddp=True)}
    assert DDP(comm_hook="bf16") in cuda["ddp.comm_hook"].candidates


def test_threads_candidates_leave_out_the_one_thread_torchrun_already_sets():
    one = {d.name: d for d in script_space(CPU, uses_loader=False, ranks=2, builds_ddp=True, threads_as_written=1)}
    assert [v.intra_op for v in one["threads"].candidates] == [2]  # 1 is as written under torchrun
    two = {d.name: d for d in script_space(CPU, uses_loader=False, threads_as_written=2)}
    assert [v.intra_op for v in two["threads"].candidates] == [1]


def test_a_ddp_move_keeps_the_ddp_fields_already_won():
    best = Plan(parallel=DDP(bucket_cap_mb=100))
    assert with_move(best, {"parallel": DDP(static_graph=True)}).parallel == DDP(bucket_cap_mb=100, static_graph=True)
    assert with_move(Plan(), {"parallel": DDP(static_graph=True)}).parallel == DDP(static_graph=True)
    assert with_move(best, {"parallel": DDP(bucket_cap_mb=5)}).parallel == DDP(bucket_cap_mb=5)


def test_only_the_fields_the_plan_changes_are_set_in_the_scripts_ddp():
    assert changed_fields(DDP()) == {}
    assert changed_fields(DDP(bucket_cap_mb=100, comm_hook="fp16")) == {"bucket_cap_mb": 100, "comm_hook": "fp16"}


def test_adoption_prints_the_ddp_call_as_it_should_be_written():
    plan = Plan(parallel=DDP(bucket_cap_mb=100, gradient_as_bucket_view=True, comm_hook="fp16"))
    applied = {k: KnobOutcome(knob=k, status="applied") for k in
               ("ddp.bucket_cap_mb", "ddp.gradient_as_bucket_view", "ddp.comm_hook")}
    lines = adoption_lines(plan, applied, {})
    assert "model = DistributedDataParallel(model, bucket_cap_mb=100, gradient_as_bucket_view=True)" in lines[0]
    assert lines[1].startswith("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                               "model.register_comm_hook(None, default_hooks.fp16_compress_hook)")
    kept = {**applied, "ddp.comm_hook": KnobOutcome(knob="ddp.comm_hook", status="as_written")}
    assert len(adoption_lines(plan, kept, {})) == 1  # the script's own hook: nothing to edit


def test_an_unapplied_ddp_knob_reads_the_strategys_outcome_when_no_ddp_was_built():
    none = {"parallel": KnobOutcome(knob="parallel", status="not_applied", detail="no DDP")}
    assert unapplied("ddp.static_graph", none) == none["parallel"]
    refused = {"ddp.comm_hook": KnobOutcome(knob="ddp.comm_hook", status="refused", detail="needs NCCL")}
    said = unapplied("ddp.comm_hook", refused)
    assert said is not None and said.status == "refused"
    assert unapplied("ddp.static_graph", {"ddp.static_graph": KnobOutcome(knob="ddp.static_graph",
                                                                          status="applied")}) is None


def test_only_ddp_plans_are_injectable_into_a_script():
    assert unsupported_knobs(Plan(parallel=DDP(static_graph=True))) == []
    assert strategy_note(Plan(parallel=DDP())) == ""
    for strategy in (Zero1(), FSDP2()):
        plan = Plan(parallel=strategy)
        assert unsupported_knobs(plan) == ["parallel"]
        assert f"parallel={strategy.kind} cannot be injected into a script" in strategy_note(plan)


@pytest.mark.parametrize(("call", "status", "says"), [
    ({}, "applied", "DistributedDataParallel(..., bucket_cap_mb=100)"),
    ({"bucket_cap_mb": None}, "applied", "bucket_cap_mb=100"),
    ({"bucket_cap_mb": 50}, "applied", "(the script passed bucket_cap_mb=50)"),  # the plan's value wins, named
    ({"bucket_cap_mb": 100}, "as_written", "the script passes bucket_cap_mb=100 itself"),
    ({"bucket_cap_mb_list": [5, 25]}, "as_written", "bucket_cap_mb_list"),
])
def test_each_ddp_constructor_knob_has_a_typed_outcome(call, status, says):
    got, detail = constructor_outcome("bucket_cap_mb", 100, call)
    outcome = KnobOutcome.from_json({"knob": "ddp.bucket_cap_mb", "status": got, "detail": detail})
    assert outcome.status == status and says in outcome.detail

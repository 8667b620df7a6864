"""Fast, single-process checks of the dist package: launch command, plan knob, checksums, checkpoints."""

from __future__ import annotations

import shutil

import pytest
import torch
from typer.testing import CliRunner

from torchsmith.distributed.checkpoint import MARKER, DistCheckpointer, list_steps, load_model_tensors
from torchsmith.distributed.desync import checksum
from torchsmith.distributed.launch import LaunchConfig, build_command
from torchsmith.engine.loop import build_step
from torchsmith.plan import DDP, FSDP2, Plan, PlanError, Zero1
from torchsmith.transforms.base import TransformError
from torchsmith.workloads.mlp import workload as mlp_workload


def test_launch_command_is_torchrun_on_loopback_by_default():
    cmd, notes = build_command(LaunchConfig(nproc_per_node=2, max_restarts=3), ["run", "mlp", "--steps", "5"])
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and cmd[cmd.index("--max-restarts") + 1] == "3"
    assert cmd[cmd.index("--rdzv-endpoint") + 1].startswith("127.0.0.1:")
    assert cmd[-6:] == ["-m", "torchsmith.cli.worker", "run", "mlp", "--steps", "5"]
    assert not any(n.startswith("warning") for n in notes)


def test_launch_warns_that_a_non_loopback_c10d_store_is_unauthenticated():
    _, notes = build_command(LaunchConfig(nproc_per_node=2, rdzv_endpoint="10.1.2.3:29400"), ["run"])
    assert any(n.startswith("warning") and "unauthenticated" in n for n in notes)
    _, notes = build_command(LaunchConfig(rdzv_endpoint="127.0.0.1:29400"), ["run"])
    assert not any(n.startswith("warning") for n in notes)


@pytest.mark.parametrize("cfg", [LaunchConfig(nnodes="1:4"), LaunchConfig(rdzv_backend="etcd-v2")])
def test_launch_refuses_a_multi_node_or_etcd_job_without_an_endpoint(cfg):
    with pytest.raises(ValueError, match="--rdzv-endpoint"):
        build_command(cfg, ["run"])


def test_launch_cli_prints_the_exact_command():
    from torchsmith.cli import app

    result = CliRunner().invoke(app, ["launch", "--nproc-per-node", "2", "--dry-run", "--",
                                      "run", "mlp", "--steps", "3"])
    assert result.exit_code == 0, result.output
    assert "torch.distributed.run" in result.output and "--nproc-per-node 2" in result.output
    assert "torchsmith.cli.worker run mlp --steps 3" in result.output


def test_parallel_plan_round_trips_and_refuses_unknown_values():
    for parallel in (DDP(comm_hook="fp16", bucket_cap_mb=50), Zero1(), FSDP2(reshard_after_forward=False)):
        plan = Plan(parallel=parallel)
        assert Plan.from_dict(plan.to_dict()) == plan
    with pytest.raises(PlanError, match="comm_hook"):
        Plan.from_dict({**Plan().to_dict(), "parallel": {"kind": "ddp", "comm_hook": "int8"}})


def test_distributed_strategy_without_a_process_group_is_refused_with_the_fix():
    w = mlp_workload(train_rows=256, val_rows=64, batch_size=32, width=16, depth=1)
    with pytest.raises(TransformError, match="torchsmith launch"):
        build_step(w, Plan(parallel=DDP()), torch.device("cpu"))


def test_checksum_sees_a_one_ulp_change_and_a_swap():
    t = torch.randn(1000)
    base = checksum(t)
    bumped = t.clone()
    bumped[500] = torch.nextafter(bumped[500], torch.tensor(float("inf")))
    swapped = t.clone()
    swapped[[1, 2]] = t[[2, 1]]
    assert not torch.equal(checksum(bumped), base)
    assert not torch.equal(checksum(swapped), base)
    assert torch.equal(checksum(t.clone()), base)


def _train(step, w, n):
    for batch, _ in zip(w.iter_batches(), range(n), strict=False):
        step(batch)


@pytest.mark.parametrize("async_save", [False, True])
def test_checkpointer_keeps_last_k_skips_incomplete_and_restores_exactly(tmp_path, one_rank_group, async_save):
    w = mlp_workload(train_rows=256, val_rows=64, batch_size=32, width=16, depth=1)
    step = build_step(w, Plan(), torch.device("cpu"))
    saver = DistCheckpointer(tmp_path / "ckpt", keep_last_k=2, async_save=async_save)
    for s in range(1, 5):
        _train(step, w, 1)
        saver.save(s, step.parts, {"data_position": {"epoch": 0, "index": s}})
    saver.finish()
    steps = list_steps(tmp_path / "ckpt")
    assert [(s, ok) for s, _, ok in steps] == [(3, True), (4, True)]
    # A save that died before its marker: copied data, no COMMITTED.
    broken = tmp_path / "ckpt" / "step_00000005"
    shutil.copytree(steps[-1][1], broken)
    (broken / MARKER).unlink()
    want = {k: v.clone() for k, v in step.model.state_dict().items()}
    want_opt = {id_: {k: v.clone() for k, v in st.items()} for id_, st in step.optimizer.state_dict()["state"].items()}

    fresh = build_step(w, Plan(), torch.device("cpu"))
    loaded = DistCheckpointer(tmp_path / "ckpt").load_latest(fresh.parts)
    assert loaded.path.name == "step_00000004" and loaded.state["step"] == 4
    assert loaded.state["data_position"] == {"epoch": 0, "index": 4}
    assert [(p.name, "incomplete" in why) for p, why in loaded.skipped] == [("step_00000005", True)]
    for k, v in fresh.model.state_dict().items():
        assert torch.equal(v, want[k]), k
    for id_, st in fresh.optimizer.state_dict()["state"].items():
        for k, v in st.items():
            assert torch.equal(v, want_opt[id_][k]), (id_, k)
    assert fresh.optimizer.param_groups[0]["betas"] == step.optimizer.param_groups[0]["betas"]
    assert all(torch.equal(v, want[k]) for k, v in load_model_tensors(loaded.path).items())


def test_the_stop_signal_is_agreed_on_the_host_never_on_the_training_device(one_rank_group):
    """On NCCL a flag on the GPU read back with .item() waits for the whole step: the stop flag stays
    a CPU tensor on a gloo group. A context whose device is "meta" fails any tensor that goes there."""
    import signal
    import types

    from torchsmith.distributed.runtime import host_group
    from torchsmith.engine.preemption import Preemption

    assert host_group() is None  # the default group is gloo here: no second group
    session = types.SimpleNamespace(ctx=types.SimpleNamespace(device=torch.device("meta")), host_group=None)
    preemption = Preemption()
    assert preemption.stop_signal(session) == 0
    preemption._handle(signal.SIGTERM, None)
    assert preemption.stop_signal(session) == signal.SIGTERM


def test_the_host_group_is_made_once_per_default_group(one_rank_group, monkeypatch):
    """Under NCCL every run in a process (a tune's plans) would otherwise add a gloo group."""
    import torch.distributed as dist

    from torchsmith.distributed import runtime

    monkeypatch.setattr(dist, "get_backend", lambda *a, **k: "nccl")  # as a GPU job's default group reads
    monkeypatch.setattr(runtime, "_host", None)
    first = runtime.host_group()
    assert first is not None and first is not dist.group.WORLD
    assert runtime.host_group() is first
    t = torch.tensor([3], dtype=torch.int32)
    dist.all_reduce(t, group=first)  # a working gloo group over the ranks
    assert t.item() == 3

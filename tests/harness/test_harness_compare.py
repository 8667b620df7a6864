"""measure_plans: side-by-side figures, and the right statistic for plans with DataLoader workers."""

import statistics

import pytest
from toy_workloads import loader_workload

from torchsmith.harness.compare import measure_plans
from torchsmith.plan import LoaderConfig, Plan, Threads

WORKERS = Plan(loader=LoaderConfig(num_workers=2, prefetch_factor=3, persistent_workers=True))


def test_plans_without_workers_are_interleaved_and_summarised_by_the_median():
    order = []

    def clock(plan, run_step):
        run_step()
        order.append(plan)
        return [0.01, 0.01, 1.0][len(order) % 3]  # a noise spike every third step

    fewer = Plan(threads=Threads(intra_op=1))
    base, one = measure_plans(loader_workload(), [Plan(), fewer], warmup=1, steps=6, clock=clock)
    assert order[:4] == [Plan(), fewer, fewer, Plan()]  # round-robin, rotating who goes first
    assert len(base.step_times) == 6 and base.step_seconds == statistics.median(base.step_times)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_plans_with_workers_warm_up_past_the_prefetched_batches_and_report_the_mean():
    steps_run = {Plan(): 0, WORKERS: 0}

    def clock(plan, run_step):
        run_step()
        steps_run[plan] += 1
        return 0.01 if steps_run[plan] % 3 else 0.10  # bursty: two batches ready, then a wait

    base, workers = measure_plans(loader_workload(), [Plan(), WORKERS], warmup=1, steps=6, clock=clock)
    # Warm-up: 1 + 2 workers x prefetch 3 = 7 steps, for every plan (the guard compares final parameters).
    assert steps_run == {Plan(): 7 + 6, WORKERS: 7 + 6}
    assert workers.step_seconds == pytest.approx(statistics.fmean(workers.step_times)) == pytest.approx(0.04)
    assert workers.loss_rel_diff == 0.0 and workers.param_rel_diff == 0.0  # same batches, same maths


def test_losses_and_parameters_are_compared_over_the_first_compare_steps_only():
    from torchsmith.plan import Autocast

    w = loader_workload()
    bf16 = Plan(precision=Autocast(dtype="bfloat16"))
    short = measure_plans(w, [Plan(), bf16], warmup=0, steps=4, measure_memory=False)[1]
    long = measure_plans(w, [Plan(), bf16], warmup=0, steps=40, measure_memory=False, compare_steps=4)[1]
    assert len(long.losses) == 40
    # The same 4 steps compared: the 36 later ones do not move the figures.
    assert long.loss_rel_diff == short.loss_rel_diff and long.param_rel_diff == pytest.approx(short.param_rel_diff)
    assert measure_plans(w, [Plan(), bf16], warmup=0, steps=40, measure_memory=False)[1].param_rel_diff \
        != pytest.approx(short.param_rel_diff)


def _random_workload(batches):
    """Dropout, plus draws from Python's and numpy's global RNGs in the loss: every RNG a step may use."""
    import random

    import numpy as np
    import torch

    from torchsmith.workload import Workload

    def loss(model, batch):
        noise = random.random() + float(np.random.rand())
        return model(batch).pow(2).mean() * (1 + 1e-3 * noise)

    return Workload(model=lambda: torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.5),
                                                      torch.nn.Linear(32, 1)),
                    batches=batches, loss=loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), seed=3)


def test_interleaved_plans_each_keep_their_own_rng_streams_as_a_run_alone_would():
    # Each plan owns the torch (CPU and CUDA), Python and numpy RNG states between its steps, so
    # interleaving A B A B draws the same dropout masks and noise for each as running it alone.
    import torch

    batches = [torch.randn(16, 8, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    alone = measure_plans(_random_workload(batches), [Plan()], warmup=1, steps=5, measure_memory=False)[0]
    a, b = measure_plans(_random_workload(batches), [Plan(), Plan()], warmup=1, steps=5, measure_memory=False)
    assert a.losses == b.losses == alone.losses
    assert len(set(alone.losses)) > 1


def test_an_empty_batch_source_raises_instead_of_looping_forever():
    from torchsmith.workload import WorkloadError

    ms = measure_plans(_random_workload([]), [Plan()], warmup=1, steps=2, measure_memory=False)
    assert ms[0].error and "yielded no batches" in ms[0].error
    with pytest.raises(WorkloadError, match="epoch 0 yielded no batches"):
        next(_random_workload([]).cycle())

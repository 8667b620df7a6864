"""Side-by-side measurement of plans, one layer above the engine.

``measure_plans`` builds one engine step per plan and runs them interleaved from the same
seed on the same batches; ``measure_run_metrics`` turns a finished run into throughput and
MFU. ``tune``, ``doctor`` and ``bench tips`` all measure through here.

Modules:
    compare       measure_plans: plans side by side, interleaved, same seed and batches; param_distance
    fresh_round   fresh_round: one round of measure_plans in a fresh process (the unit a claim repeats)
    rank_round    rank_round: one round of measure_plans on N torchrun ranks (slowest rank, global loss)
    loss_guard    compare_losses: two loss sequences compared, the non-finite rule decided once
    scale_inputs  scale_inputs: what the scale model needs, measured on the ranks of a job
    run_metrics   measure_run_metrics: FLOPs per step, the machine's peak and MFU of a finished run
"""

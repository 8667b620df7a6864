"""Side-by-side measurement of plans, one layer above the engine.

``measure_plans`` builds one engine step per plan and runs them interleaved from the same
seed on the same batches; ``measure_run_metrics`` turns a finished run into throughput and
MFU. ``tune``, ``doctor`` and ``bench tips`` all measure through here.
"""

"""The training step (``prepare``) and loop (``run``).

Modules:
    auto_microbatch  Plan.auto_microbatch: on out-of-memory, halve the micro-batch and retry the step
    checkpoint       atomic, exact, safe checkpoints for run
    compose          apply_plan: a plan's transforms in one fixed, readable order
    dir_lock         one live writer per checkpoint directory: a lock file naming the holder's pid
    dist_session     what run does differently inside a torchrun worker
    evaluate         validation loss under inference_mode, the model's mode and RNG restored
    identity         which run a checkpoint belongs to, and whether a resume continues it
    loop             run / build_step: train a workload under a plan, with progress, metrics, checkpoints
    manifest         the manifest beside each checkpoint: who wrote it, the SHA-256 it must still have
    nonfinite        Plan.nonfinite: what a step with a non-finite loss or gradient does
    outcome          whether a finished run is a success (a non-finite end is a failure)
    preemption       SIGTERM/SIGUSR1 recorded, so the loop saves the step under way and exits 143/138
    registry         every knob the engine applies, listed once
    run_checkpoints  run's checkpoint steps: prepare the directory, resume, save, prune
    space            the search space, read from the transforms' registered metadata
    step             Step / prepare: the training step built from a plan
"""

"""Measurements the rest stands on: step phases, peak memory, saved bytes, FLOPs, the machine's peak.

Modules:
    fingerprint       machine_fingerprint: the machine a measurement was taken on
    flops             count_flops: FLOPs of a callable, forward and backward, via FlopCounterMode
    intervals         SpeedupInterval / NoiseCalibration / AdaptivePairs: a 95% interval on every ratio, the win rule
    load              load_per_core: the 1-minute load average, where other processes show up
    locate_nonfinite  the first module and op that produced a non-finite value, by an op-by-op re-run
    memory            track_peak_memory: peak memory of a region on CPU and CUDA; live-state byte counts
    oom               explain: what held memory at an out-of-memory error, fixes ranked by what they free
    peak              machine_peak_flops / checked_mfu: the measured matmul peak, cached, and MFU
    quiet             silence the profiler's native start/stop chatter, and nothing else
    saved             count_saved_tensors: bytes saved for backward, counted with saved_tensors_hooks
    student_t         Student's t quantile for small-sample intervals, without scipy
    timing            PhaseTimer: per-step phases (data wait, forward, backward, optimizer)
"""

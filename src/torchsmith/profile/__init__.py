"""Why is training slow: capture a window of steps, break it down, diagnose, verify.

Modules:
    _inject         sitecustomize.py, which starts the script side at interpreter start-up (a folder)
    _inject_knobs   the knobs inject_plan puts into an unmodified script
    analysis        analyse_trace: step-time breakdown, top operators, sync sites, memory, from the trace
    capture         StepCapture / CaptureConfig: optimizer-step hooks and a scheduled profiler
    doctor          doctor_workload / doctor_script / verify: the two ways in, and --verify
    facts           what the capture's hooks saw on live objects, as plain data
    inject          the script side of doctor: hook this process at start-up
    inject_plan     the script side of tune and run --plan: a plan's knobs in an unmodified script
    phases          which phase each instant of a recorded step belongs to, judged by what ran
    rules           the @rule registry and diagnose(); each finding has evidence, a fix, the expected gain
    thread_probe    a short side-by-side of two CPU thread counts on the script's own steps
"""

"""Why is training slow: capture a window of steps, break it down, diagnose, verify.

Modules:
    analysis        analyse_trace: step-time breakdown, top operators, sync sites, memory, from the trace
    capture         StepCapture / CaptureConfig: optimizer-step hooks and a scheduled profiler
    capture_hook    the script side of doctor, started at interpreter start-up by inject/_site/sitecustomize.py
    doctor          doctor_workload / doctor_script / verify: the two ways in, and --verify
    facts           what the capture's hooks saw on live objects, as plain data
    phases          which phase each instant of a recorded step belongs to, judged by what ran
    rules           the @rule registry and diagnose(); each finding has evidence, a fix, the expected gain
    thread_probe    a short side-by-side of two CPU thread counts on the script's own steps
"""

"""Why is training slow: capture a window of steps, break it down, diagnose, verify.

- ``capture``:  StepCapture / CaptureConfig: global optimizer-step hooks and a scheduled profiler
- ``analysis``: analyse_trace: step-time breakdown, top operators, sync sites, memory, from the exported trace
- ``rules``:    the @rule registry and diagnose(); each finding carries evidence, a fix and the expected gain
- ``doctor``:   doctor_workload / doctor_script / verify: the two ways in, and --verify
- ``capture_hook``: the script side, installed at interpreter start-up by ``torchsmith/inject/_site/sitecustomize.py``
"""

"""``tune -- python train.py``: the measured search on an unmodified script.

Modules:
    search    :func:`tune_script`: the A/A calibration, the greedy walk over the knobs, the proof
    pairs     :func:`compare_in_pairs`, two plans in alternating fresh-process pairs (B A, A B, ...)
    verify    :func:`verify_script`, an independent A/B of a plan against the script as written
    run       :func:`run_script`, one measured run of the script in a fresh process, and its window
    guard     the loss guard over the per-step losses a run recorded, and the baseline's spread
    space     the knobs a script can take from outside, as candidate moves for this device (DDP's under torchrun)
    order     which knobs go first, by the measured share of the step they act on (Amdahl's bound)
    torchrun  what a command says about its processes (``--nproc-per-node N``, threads per rank)
    adopt     the edit that adopts a tuned plan in the script itself, and the files each run wrote
"""

from torchsmith.tuner.script.search import ScriptTuneConfig, ScriptTuneResult, tune_script
from torchsmith.tuner.script.verify import ScriptVerifyConfig, ScriptVerifyError, ScriptVerifyResult, verify_script

__all__ = ["ScriptTuneConfig", "ScriptTuneResult", "ScriptVerifyConfig", "ScriptVerifyError", "ScriptVerifyResult",
           "tune_script", "verify_script"]

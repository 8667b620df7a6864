"""``tune -- python train.py``: the measured search on an unmodified script.

Module map:

- ``search``: :func:`tune_script`, the greedy walk over the knobs, and its result;
- ``run``: :func:`run_script`, one measured run of the script in a fresh process;
- ``guard``: the loss guard over the per-step losses a run recorded, and the baseline's spread;
- ``space``: the knobs a script can take from outside, as candidate moves for this device;
- ``adopt``: the edit that adopts a tuned plan in the script itself, and the files each run wrote.
"""

from torchsmith.tuner.script.search import ScriptTuneConfig, ScriptTuneResult, tune_script

__all__ = ["ScriptTuneConfig", "ScriptTuneResult", "tune_script"]

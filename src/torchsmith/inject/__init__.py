"""``inject``: zero-change injection into an unmodified script, shared by ``tune -- cmd``,
``doctor -- cmd``, ``run --plan P -- cmd`` and ``verify P -- cmd``.

The parent builds the script's environment (:mod:`~torchsmith.inject.env`); in the script's own
process, ``_site/sitecustomize.py`` runs first and installs what the environment asks for: the
plan (:mod:`~torchsmith.inject.plan_injection`, applying :mod:`~torchsmith.inject.knobs`) or the
doctor's capture (``torchsmith.profile.capture_hook``, found by name at start-up: the doctor's
capture lives above this layer).

Modules:
    _site           sitecustomize.py, run first in the script's own process (a folder)
    env             the environment keys, the start-up directory, script_env and python_command
    plan_injection  :class:`PlanInjection`, applying a plan (and, when tuning, measuring a window)
    gloo_exit       a torchrun worker's exit kept from gloo's teardown race (a 0.1 s settle)
    ddp             the plan's DDP knobs in the script's own DistributedDataParallel (and refusing other strategies)
    knobs           each knob applied from outside (optimizer, DataLoader, autocast, compile, checkpointing)
    outcome         :class:`KnobOutcome`, what the child did with each knob, as typed JSON
    supported       the plan fields a script can take from outside, and those it cannot
"""

from torchsmith.inject.env import DOCTOR_ENV_KEY, PLAN_ENV_KEY, python_command, script_env
from torchsmith.inject.outcome import KnobOutcome, OutcomeStatus
from torchsmith.inject.supported import UNSUPPORTED_FIELDS, strategy_note, unsupported_knobs

__all__ = ["DOCTOR_ENV_KEY", "PLAN_ENV_KEY", "KnobOutcome", "OutcomeStatus", "UNSUPPORTED_FIELDS", "python_command",
           "script_env", "strategy_note", "unsupported_knobs"]

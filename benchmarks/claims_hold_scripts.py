"""The script half of ``claims_hold``: tune an unmodified script, then re-measure the returned
plan independently (``verify_script``, fresh processes), and repeat. A claim holds when the
re-measured ratio falls inside the claimed interval; a returned plan must never be measurably
slower than the script as written. Targets: inside in at least 90% of repeats; never slower.

Scripts: the nanoGPT-style example (``examples/nanogpt_style/train.py``) and the Hugging Face
Trainer script of the tests' corpus.

    PYTHONPATH=src .venv/bin/python benchmarks/claims_hold_scripts.py [--repeats 5] [--budget 5m] [--verify-budget 2m]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def script_commands() -> dict[str, list[str]]:
    """name -> command of each script measured; the HF script is wherever the tests' corpus keeps it."""
    hf = next((p for p in (ROOT / "tests" / "scripts" / "hf_trainer.py", ROOT / "tests" / "tuner" / "scripts" /
                           "hf_trainer.py") if p.exists()), None)
    cmds = {"nanogpt-style": [sys.executable, str(ROOT / "examples" / "nanogpt_style" / "train.py"),
                              "--max-iters", "100000"]}
    if hf is not None:
        cmds["hf-trainer"] = [sys.executable, str(hf), "--steps", "100000"]
    return cmds


@dataclass(frozen=True)
class ScriptClaim:
    script: str
    plan: str
    claimed: str
    """The tune's proof interval, described; "as written" when it returned the script unchanged."""
    remeasured: str
    inside: bool
    """The re-measured estimate lies inside the claimed interval (as written: the re-measure is not slower)."""
    slower: bool
    """The re-measured interval lies wholly below 1.0."""


def script_claims(repeats: int, budget_seconds: float, verify_budget_seconds: float,
                  names: list[str] | None = None) -> list[ScriptClaim]:
    """Each script, ``repeats`` times: tune, then verify in fresh processes."""
    from torchsmith.plan import Plan
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    from torchsmith.tuner.script.verify import ScriptVerifyConfig, verify_script

    out = []
    for name, cmd in script_commands().items():
        if names and name not in names:
            continue
        for _ in range(repeats):
            r = tune_script(cmd, ScriptTuneConfig(budget_seconds=budget_seconds))
            if r.plan == Plan() or r.speedup_interval is None:
                out.append(ScriptClaim(name, "as written", "as written", "-", True, False))
                print(f"{name}: as written", flush=True)
                continue
            v = verify_script(r.plan, cmd, ScriptVerifyConfig(budget_seconds=verify_budget_seconds))
            iv = r.speedup_interval
            claim = ScriptClaim(name, r.plan.describe(), iv.describe(), v.interval.describe(),
                                iv.low <= v.interval.estimate <= iv.high, v.slower)
            out.append(claim)
            print(f"{name}: {claim.plan} claimed {claim.claimed}, re-measured {claim.remeasured}: "
                  f"{'inside' if claim.inside else 'OUTSIDE'}{'; SLOWER' if claim.slower else ''}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", default="5m", help="each tune's budget")
    ap.add_argument("--verify-budget", default="2m", help="each re-measurement's budget")
    ap.add_argument("--scripts", default=None, help="comma-separated: nanogpt-style,hf-trainer (default: both)")
    args = ap.parse_args()
    from torchsmith.tuner.parse_budget import parse_duration

    claims = script_claims(args.repeats, parse_duration(args.budget), parse_duration(args.verify_budget),
                           args.scripts.split(",") if args.scripts else None)
    inside = sum(c.inside for c in claims)
    slower = sum(c.slower for c in claims)
    print(f"scripts: re-measured inside the claim {inside} of {len(claims)} (target >= 90%); "
          f"measurably slower {slower} (target 0)")
    return 0 if claims and inside >= 0.9 * len(claims) and slower == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

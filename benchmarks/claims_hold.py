"""Do tune's claims hold when re-measured? Tune, then verify in a fresh process, N times.

For each target (a workload; with ``--scripts``, unmodified scripts too) it runs
``torchsmith tune TARGET --json`` in a fresh process, then ``torchsmith verify plan.json TARGET
--json`` in another, and prints each repeat's claimed interval beside the verified estimate.
Acceptance (issue 22): the verified estimate falls inside the claimed interval in at least 90%
of the repeats that claimed a gain, and a returned plan is never measurably slower (verify's
exit 1). A repeat that returns the as-written plan claims nothing: it is counted apart.

    PYTHONPATH=src .venv/bin/python benchmarks/claims_hold.py [--repeats 10] [--budget 3m] \\
        [--verify-budget 1m] [--workloads gpt-mini,mlp] [--scripts] [--only many-params]

Figures depend on the machine and its load: run it on a quiet machine, and say which.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    """How the table names it."""
    args: list[str]
    """What follows the command: a workload name, or ``--`` and a command line."""


@dataclass(frozen=True, kw_only=True)
class Repeat:
    claim: dict | None
    """tune's ``speedup`` object; None when it returned the as-written plan (no claim)."""
    tried: str
    """What tune measured: each candidate's value, status and interval, and its A/A noise."""
    verified: dict
    """verify's JSON object."""
    slower: bool


ROOT = Path(__file__).resolve().parent.parent


def script_targets() -> list[Target]:
    """Unmodified scripts: the nanoGPT-style example and the HF Trainer script of the tests' corpus
    (wherever the corpus keeps it). Each run ends itself after its window, so the step counts are large."""
    nanogpt = ROOT / "examples" / "nanogpt_style" / "train.py"
    targets = [Target(name="nanogpt-style", args=["--", sys.executable, str(nanogpt), "--max-iters", "100000"])]
    hf = next((p for p in (ROOT / "tests" / "scripts" / "hf_trainer.py",
                           ROOT / "tests" / "tuner" / "scripts" / "hf_trainer.py") if p.exists()), None)
    if hf is not None:
        targets.append(Target(name="hf-trainer", args=["--", sys.executable, str(hf), "--steps", "100000"]))
    # A script with a gain to claim: true_wins.py's planted optimizer win (~1.3x on an AVX2 VM, 2.4-3.0x on AVX-512).
    many_params = ROOT / "benchmarks" / "scripts" / "many_params.py"
    targets.append(Target(name="many-params", args=["--", sys.executable, str(many_params), "--steps", "100000"]))
    return targets


def torchsmith(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torchsmith", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def one_repeat(target: Target, budget: str, verify_budget: str, work: Path) -> Repeat:
    tuned = torchsmith("tune", *_before_dash(target.args), "--budget", budget, "--json", "--out", "plan.json",
                       "--report", "", *_after_dash(target.args), cwd=work, timeout=3600)
    if tuned.returncode != 0:
        sys.exit(f"tune {target.name} failed ({tuned.returncode}): {tuned.stderr[-2000:]}")
    claim = json.loads(tuned.stdout)
    # A script's claim is re-measured with as many pairs as it was made of: the design its interval describes.
    # A verify that stops at 3-4 pairs on a clear win is noisier (benchmarks/pair_caps.py --short-verify).
    pairs = ["--min-pairs", str(claim["speedup"]["pairs"])] if "--" in target.args and not claim["as_written"] else []
    checked = torchsmith("verify", "plan.json", *_before_dash(target.args), "--budget", verify_budget, "--json",
                         *pairs, *_after_dash(target.args), cwd=work, timeout=3600)  # options before --
    if checked.returncode not in (0, 1):
        sys.exit(f"verify {target.name} failed ({checked.returncode}): {checked.stderr[-2000:]}")
    return Repeat(claim=None if claim["as_written"] else claim["speedup"], tried=_tried(claim),
                  verified=json.loads(checked.stdout), slower=checked.returncode == 1)


def _tried(tuned: dict) -> str:
    """One line of what tune measured, so a miss or an as-written result can be read afterwards."""
    parts = [f"{c['value']} {c['status']}" + (f" {describe(c['interval'])}" if c.get("interval") else "")
             for c in tuned["candidates"]]
    return ("; ".join(parts) or "no candidate") + _noise(tuned.get("noise"), "A/A") + _noise(
        tuned.get("pooled_noise"), "pooled (pairs: of an A/A run as sure)")


def _noise(noise: dict | None, label: str) -> str:
    """'; A/A: a pair +-12% (A/A interval +-9%, 3 pairs)': how far two runs differ, and the old figure."""
    if not noise or noise.get("pair_range") is None:
        return ""
    return (f"; {label}: a pair +-{noise['pair_range']:.0%} (interval +-{noise['spread']:.0%}, "
            f"{noise['pairs']} pairs)")


def _before_dash(args: list[str]) -> list[str]:
    return args[:args.index("--")] if "--" in args else args


def _after_dash(args: list[str]) -> list[str]:
    return args[args.index("--"):] if "--" in args else []


def describe(iv: dict) -> str:
    high = "inf" if iv["high"] is None else f"{iv['high']:.2f}"
    return f"{iv['estimate']:.2f}x [{iv['low']:.2f}-{high}, {iv['pairs']} pairs]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget", default="3m", help="tune's budget per repeat")
    ap.add_argument("--verify-budget", default="1m")
    ap.add_argument("--workloads", default="gpt-mini,mlp")
    ap.add_argument("--scripts", action="store_true", help="also the unmodified scripts of script_targets()")
    ap.add_argument("--only", default=None, help="comma-separated target names to run (e.g. many-params)")
    args = ap.parse_args()
    targets = [Target(name=w, args=[w]) for w in args.workloads.split(",") if w]
    if args.scripts:
        scripts = script_targets()
        if not scripts:
            sys.exit("--scripts: no script targets yet (the script tuner's half of this benchmark).")
        targets += scripts
    if args.only:
        targets = [t for t in targets if t.name in args.only.split(",")]
        if not targets:
            sys.exit(f"--only {args.only}: no such target (workloads come from --workloads, scripts need --scripts)")
    for target in targets:
        inside = claimed = slower = 0
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory() as work:
                r = one_repeat(target, args.budget, args.verify_budget, Path(work))
            got = r.verified["speedup"]
            holds = r.claim is not None and r.claim["low"] <= got["estimate"] <= (r.claim["high"] or float("inf"))
            claimed += r.claim is not None
            inside += holds
            slower += r.slower
            print(f"{target.name} #{i + 1}: claimed {describe(r.claim) if r.claim else 'as written (no claim)'}; "
                  f"verified {describe(got)} {r.verified['verdict']}"
                  + ("" if r.claim is None else ("; inside" if holds else "; OUTSIDE"))
                  + f"\n    tried: {r.tried}", flush=True)
        share = f"{inside}/{claimed} ({inside / claimed:.0%})" if claimed else "no claims"
        print(f"{target.name}: verified estimate inside the claimed interval {share} (target >= 90%); "
              f"as written {args.repeats - claimed}/{args.repeats}; measurably slower {slower} (target 0)", flush=True)


if __name__ == "__main__":
    main()

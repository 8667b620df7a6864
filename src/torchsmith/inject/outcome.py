"""What the script's process did with each knob, sent to the parent as typed JSON.

The child records one :class:`KnobOutcome` per knob it reached; the parent reads the status, never
the wording of ``detail`` (which is for people).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

OutcomeStatus = Literal["applied", "as_written", "not_applied", "refused"]
"""applied: the knob is on. as_written: the script set this itself, and its choice is kept.
not_applied: nothing in the script for the knob to act on (or the model was not found).
refused: PyTorch refused this value here (e.g. fused on a dtype it does not support): another value may work."""


@dataclass(frozen=True, kw_only=True)
class KnobOutcome:
    knob: str
    """The knob's name: a plan field, or "matmul_precision"/"cudnn_benchmark" for the backend, "model"."""
    status: OutcomeStatus
    detail: str = ""
    """What was done or why not, for the report: "AdamW(..., fused=True)"."""

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    def describe(self) -> str:
        """``"applied: AdamW(..., fused=True)"``, ``"as written: the script chose ..."``."""
        return f"{self.status.replace('_', ' ')}: {self.detail}" if self.detail else self.status.replace("_", " ")

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KnobOutcome:
        status = data.get("status")
        if status not in get_args(OutcomeStatus):
            raise ValueError(f"knob outcome status must be one of {get_args(OutcomeStatus)}, got {status!r}")
        return cls(knob=str(data["knob"]), status=cast(OutcomeStatus, status), detail=str(data.get("detail", "")))


def record(outcomes: dict[str, dict[str, str]], knob: str, status: OutcomeStatus, detail: str = "", *,
           keep: bool = False) -> None:
    """Set ``outcomes[knob]`` (JSON-ready); ``keep``: only when nothing is recorded for it yet."""
    if keep and knob in outcomes:
        return
    outcomes[knob] = KnobOutcome(knob=knob, status=status, detail=detail).to_json()

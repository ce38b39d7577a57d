"""What the supervisor sends back besides plain replies: rollback reports,
the retained status, events and actuator states (docs/API.md, "Rollback
reports", "Status", "Events").

Each type is a frozen dataclass built from the decoded JSON with
``from_json``; unknown fields are ignored, as the API asks of clients.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = [
    "BUCKETS",
    "COMPENSATED",
    "FALLBACK_SAFE",
    "COMPENSATION_FAILED",
    "ORPHANED",
    "UNRESOLVED",
    "StepReport",
    "RollbackReport",
    "Status",
    "Event",
    "ActuatorState",
    "Update",
]

COMPENSATED = "compensated"
"""Driven back to its prior."""
FALLBACK_SAFE = "fallback_safe"
"""The compensation failed; the actuator went to its safe value."""
COMPENSATION_FAILED = "compensation_failed"
"""The compensation failed, and no safe value was reached."""
ORPHANED = "orphaned"
"""An irreversible actuator (a pulse): nothing to undo."""
UNRESOLVED = "unresolved"
"""Not attempted because of a halt."""

BUCKETS: Tuple[str, ...] = (COMPENSATED, FALLBACK_SAFE, COMPENSATION_FAILED, ORPHANED, UNRESOLVED)
"""Every bucket a step of an unwind can land in, in docs/API.md's order."""


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else ""


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _float(d: Mapping[str, Any], key: str) -> Optional[float]:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


@dataclass(frozen=True)
class StepReport:
    """One step of an unwind, as the report lists it.

    Attributes:
        step: the step's number in its saga, from 1.
        actuator: the actuator it commanded.
        prior: the value it was driven back to (``None`` if not finite,
            which the gate never allows).
        target: the value the step had commanded.
        outcome: ``applied``, ``failed`` or ``in_doubt``.
        bucket: one of :data:`BUCKETS`.
        attempts: compensation attempts.
        error: the last compensation error, or ``""``.
    """

    step: int
    actuator: str
    prior: Optional[float]
    target: Optional[float]
    outcome: str
    bucket: str
    attempts: int = 0
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StepReport:
        """Build from one decoded element of a report's ``steps``."""
        return cls(
            step=_int(d, "step"),
            actuator=_str(d, "actuator"),
            prior=_float(d, "prior"),
            target=_float(d, "target"),
            outcome=_str(d, "outcome"),
            bucket=_str(d, "bucket"),
            attempts=_int(d, "attempts"),
            error=_str(d, "error"),
        )


@dataclass(frozen=True)
class RollbackReport:
    """How one saga was unwound: in an abort's reply, in a ``STEP_FAILED`` or
    ``STEP_IN_DOUBT`` refusal, and in every ``rollback`` event.

    Each step lands in exactly one bucket (:data:`BUCKETS`); the
    properties :attr:`compensated`, :attr:`fallback_safe`,
    :attr:`compensation_failed`, :attr:`orphaned` and :attr:`unresolved`
    list the steps in each, and :meth:`count` counts them (every step, the
    ones a summarised report does not list included).

    :attr:`clean` is derived from the buckets every time it is read and is
    never taken from the wire: a report is clean only if every step of the
    unwind was compensated. Treat anything else as "look at the robot".

    Attributes:
        saga, agent, reason: which saga, whose, why it was unwound.
        order: ``retrace`` or ``direct``.
        recovered: crash recovery finished it.
        steps: in unwind order (a summarised report lists some of them).
        truncated: a summarised report (the unwind did not fit a packet).
        steps_total: the steps of the whole unwind (summaries only).
        steps_omitted: how many steps are not listed (summaries only).
        buckets: every step counted per bucket (summaries only).
    """

    saga: int
    agent: str
    reason: str
    order: str
    steps: Tuple[StepReport, ...]
    recovered: bool = False
    truncated: bool = False
    steps_total: int = 0
    steps_omitted: int = 0
    buckets: Optional[Mapping[str, int]] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RollbackReport:
        """Build from a decoded ``report`` object."""
        raw_steps = d.get("steps")
        steps = tuple(StepReport.from_json(s) for s in raw_steps if isinstance(s, dict)) if isinstance(raw_steps, list) else ()
        raw_buckets = d.get("buckets")
        buckets: Optional[Dict[str, int]] = None
        if isinstance(raw_buckets, dict):
            buckets = {str(k): v for k, v in raw_buckets.items() if isinstance(v, int) and not isinstance(v, bool)}
        return cls(
            saga=_int(d, "saga"),
            agent=_str(d, "agent"),
            reason=_str(d, "reason"),
            order=_str(d, "order"),
            steps=steps,
            recovered=d.get("recovered") is True,
            truncated=d.get("truncated") is True,
            steps_total=_int(d, "steps_total"),
            steps_omitted=_int(d, "steps_omitted"),
            buckets=buckets,
        )

    @property
    def clean(self) -> bool:
        """Whether every step of the unwind was compensated.

        For a summary, its counts must also account for every one of its
        steps as compensated; counts that do not add up read as not clean
        (the same rule the supervisor applies when it encodes a verdict)."""
        if any(s.bucket != COMPENSATED for s in self.steps):
            return False
        if not self.truncated and self.steps_total == 0 and self.steps_omitted == 0 and self.buckets is None:
            return True
        buckets = self.buckets or {}
        for bucket, n in buckets.items():
            if n < 0 or (bucket != COMPENSATED and n != 0):
                return False
        return (
            self.steps_omitted >= 0
            and self.steps_total == len(self.steps) + self.steps_omitted
            and buckets.get(COMPENSATED, 0) == self.steps_total
        )

    @property
    def verdict(self) -> str:
        """``"clean"`` or ``"partial"``, from :attr:`clean`."""
        return "clean" if self.clean else "partial"

    def _in(self, bucket: str) -> Tuple[StepReport, ...]:
        return tuple(s for s in self.steps if s.bucket == bucket)

    @property
    def compensated(self) -> Tuple[StepReport, ...]:
        """The listed steps driven back to their prior."""
        return self._in(COMPENSATED)

    @property
    def fallback_safe(self) -> Tuple[StepReport, ...]:
        """The listed steps whose compensation failed and whose actuator went
        to its safe value."""
        return self._in(FALLBACK_SAFE)

    @property
    def compensation_failed(self) -> Tuple[StepReport, ...]:
        """The listed steps whose compensation failed with no safe value
        reached."""
        return self._in(COMPENSATION_FAILED)

    @property
    def orphaned(self) -> Tuple[StepReport, ...]:
        """The listed steps of irreversible actuators: nothing to undo."""
        return self._in(ORPHANED)

    @property
    def unresolved(self) -> Tuple[StepReport, ...]:
        """The listed steps not attempted because of a halt."""
        return self._in(UNRESOLVED)

    def count(self, bucket: str) -> int:
        """How many steps of the whole unwind landed in ``bucket``: from the
        summary's counts when the report is summarised, else from its steps."""
        if self.truncated and self.buckets is not None:
            return self.buckets.get(bucket, 0)
        return len(self._in(bucket))

    @property
    def not_back(self) -> Tuple[StepReport, ...]:
        """The listed steps that are not back where they were: every step
        outside ``compensated``."""
        return tuple(s for s in self.steps if s.bucket != COMPENSATED)


@dataclass(frozen=True)
class Status:
    """The retained payload of the status topic: whether the supervisor is
    there and can take commands.

    Attributes:
        state: ``online`` or ``offline`` (also the supervisor's last will).
        ready: commands can be admitted; ``reasons`` says why not.
        halted: the e-stop is latched; ``halt_reason`` says why.
        seq: grows with every status published: of two, the larger is newer.
    """

    state: str
    ready: bool
    halted: bool
    reasons: Tuple[str, ...] = ()
    halt_reason: str = ""
    seq: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Status:
        """Build from a decoded status payload."""
        reasons = d.get("reasons")
        return cls(
            state=_str(d, "state"),
            ready=d.get("ready") is True,
            halted=d.get("halted") is True,
            reasons=tuple(r for r in reasons if isinstance(r, str)) if isinstance(reasons, list) else (),
            halt_reason=_str(d, "halt_reason"),
            seq=_int(d, "seq"),
        )


@dataclass(frozen=True)
class Event:
    """One message of the events topic. Ignore kinds you do not know.

    Attributes:
        kind: ``rollback`` (``report`` is set), ``reply`` (``reply``: a
            reply that had no agent to go to), ``drift`` (``actuator`` and
            ``value``: a device moved it on its own), or a newer kind.
    """

    kind: str
    report: Optional[RollbackReport] = None
    reply: Optional[Mapping[str, Any]] = None
    actuator: str = ""
    value: Optional[float] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Event:
        """Build from a decoded event payload."""
        report = d.get("report")
        reply = d.get("reply")
        return cls(
            kind=_str(d, "kind"),
            report=RollbackReport.from_json(report) if isinstance(report, dict) else None,
            reply=reply if isinstance(reply, dict) else None,
            actuator=_str(d, "actuator"),
            value=_float(d, "value"),
        )


@dataclass(frozen=True)
class ActuatorState:
    """The retained commanded value of one actuator (``state/<actuator>``):
    what the supervisor believes it holds. ``commanded`` is ``None`` when the
    position is unknown."""

    actuator: str
    commanded: Optional[float]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ActuatorState:
        """Build from a decoded state payload."""
        v = _float(d, "commanded")
        return cls(actuator=_str(d, "actuator"), commanded=v if v is None or math.isfinite(v) else None)


@dataclass(frozen=True)
class Update:
    """One message a watch delivers. At most one of ``status``, ``event`` and
    ``state`` is set (none when the payload does not decode); ``payload`` is
    always the message as received.

    Attributes:
        topic: the MQTT topic.
        payload: the raw payload.
        retained: a retained message (published before the subscription).
        kind: ``status``, ``event`` or ``state``: which topic it came on.
    """

    topic: str
    payload: bytes
    retained: bool
    kind: str
    status: Optional[Status] = None
    event: Optional[Event] = None
    state: Optional[ActuatorState] = None

    def json(self) -> Any:
        """The payload decoded as JSON (``None`` if it is not JSON)."""
        try:
            return json.loads(self.payload)
        except ValueError:
            return None

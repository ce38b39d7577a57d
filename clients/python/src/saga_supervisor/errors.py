"""Exceptions: one class per family of the supervisor's wire codes.

Every exception this package raises is a :class:`SagaSupervisorError`. A
refusal or failure the supervisor sent back carries its wire ``code`` (one
of the codes of docs/API.md, "Codes"), its ``message``, the ``op`` and
``request_id`` of the request it answers and, for ``STEP_FAILED`` and
``STEP_IN_DOUBT``, the ``report`` of the unwind the failure caused. The
client's own conditions (a login the broker refused, no reply in time, a
lease it can no longer vouch for) have ``code`` ``None``.

The families follow api/codes.go, and the Go client's sentinel errors
(client/errors.go) where it has them::

    SagaSupervisorError
    ├── RequestError          BAD_REQUEST, PAYLOAD_TOO_LARGE, NOT_FINITE, UNKNOWN_ZONE
    ├── BackOffError          RATE_LIMITED, BUSY, TOO_MANY_AGENTS, TOO_MANY_ATTEMPTS
    ├── SupervisorStateError  NOT_DRAINING, NOT_QUARANTINED, QUARANTINE_FULL (operator's HTTP only)
    │   ├── NotReadyError     NOT_READY, DRAINING
    │   ├── HaltedError       HALTED
    │   └── JournalFailedError JOURNAL_FAILED
    ├── PermissionDeniedError
    │   ├── UnauthorizedError UNAUTHORIZED
    │   └── ForbiddenError    FORBIDDEN, NO_OPERATOR_TOKEN, HOST_NOT_ALLOWED, ORIGIN_NOT_ALLOWED, QUARANTINED
    ├── LeaseError            TOO_MANY_LEASES, SHUTTING_DOWN
    │   └── LeaseLostError    LEASE_UNKNOWN, LEASE_EXPIRED, LEASE_NOT_HOLDER, and the client's own
    ├── SagaError             SAGA_NOT_OWNER, SAGA_BUSY, SAGA_FULL, TOO_MANY_SAGAS, DUPLICATE_ID
    │   └── SagaEndedError    SAGA_UNKNOWN, and a saga the client knows is over
    │       └── StepFailedError STEP_FAILED, STEP_IN_DOUBT (with the report)
    ├── StepRefusedError      DEADLINE_PASSED, ACTUATOR_UNKNOWN, ACTUATOR_BUSY, ZONE_HALTED
    │   ├── LimitError        LIMIT_MIN, LIMIT_MAX, LIMIT_STEP, LIMIT_SLEW
    │   └── SupplyError       SUPPLY_LOW, SUPPLY_HIGH, SUPPLY_UNKNOWN, SUPPLY_STALE, SUPPLY_TRIPPED
    ├── ApprovalError         APPROVAL_REQUIRED, _INVALID, _MISMATCH, _EXPIRED, _REPLAYED,
    │                         APPROVALS_TOO_FEW, APPROVAL_DUPLICATE_KEY, APPROVAL_DUPLICATE
    │   └── ApprovalsFullError APPROVALS_FULL (a BackOffError too)
    ├── InternalError         INTERNAL, and a code this client does not know
    └── ClientError           the client's own conditions, no code
        ├── LoginRefusedError     the broker refused the login
        ├── ConnectionLostError   not connected to the broker (nothing was sent)
        ├── ReplyTimeoutError     no reply in time: the outcome is unknown
        ├── ClientClosedError     the client was closed
        └── WatchOverflowError    a watch fell too far behind

``refusal`` says whether the code guarantees that nothing moved (the saga,
if its lease lives, is still open and may go on). It is false for
``STEP_FAILED`` and ``STEP_IN_DOUBT`` (something moved and was unwound),
``INTERNAL``, unknown codes, and the client's own conditions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Tuple, Type

if TYPE_CHECKING:
    from .report import RollbackReport

__all__ = [
    "SagaSupervisorError",
    "RequestError",
    "BackOffError",
    "SupervisorStateError",
    "NotReadyError",
    "HaltedError",
    "JournalFailedError",
    "PermissionDeniedError",
    "UnauthorizedError",
    "ForbiddenError",
    "LeaseError",
    "LeaseLostError",
    "SagaError",
    "SagaEndedError",
    "StepFailedError",
    "StepRefusedError",
    "LimitError",
    "SupplyError",
    "ApprovalError",
    "ApprovalsFullError",
    "InternalError",
    "ClientError",
    "LoginRefusedError",
    "ConnectionLostError",
    "ReplyTimeoutError",
    "ClientClosedError",
    "WatchOverflowError",
    "CODES",
    "error_for_code",
    "is_refusal",
]


class SagaSupervisorError(Exception):
    """Base of every exception of this package.

    Attributes:
        code: the wire code (``"LIMIT_MAX"``), or ``None`` for the client's
            own conditions.
        message: the supervisor's human message, or the client's.
        op: the op of the request this answers (``"step"``), if any.
        request_id: the id of that request; ``None`` when nothing was sent.
        report: the unwind a failed step caused (``STEP_FAILED``,
            ``STEP_IN_DOUBT``); ``None`` otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        op: Optional[str] = None,
        request_id: Optional[str] = None,
        report: Optional[RollbackReport] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.op = op
        self.request_id = request_id
        self.report = report

    @property
    def refusal(self) -> bool:
        """True when the code guarantees that nothing moved."""
        return self.code is not None and is_refusal(self.code)

    def __str__(self) -> str:
        s = self.message
        if self.code is not None:
            s = f"{self.code}: {s}"
        if self.op is not None:
            s = f"{self.op}: {s}"
        if self.report is not None:
            s += f" (saga {self.report.saga} unwound: {self.report.verdict})"
        return s

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, op={self.op!r}, request_id={self.request_id!r})"


class RequestError(SagaSupervisorError):
    """The request itself is not valid (``BAD_REQUEST``, ``PAYLOAD_TOO_LARGE``,
    ``NOT_FINITE``). Raised by the client too, before sending, with
    ``request_id`` ``None``. Do not resend it: fix it. Nothing moved."""


class BackOffError(SagaSupervisorError):
    """The request was not served: this agent is over its rate (``RATE_LIMITED``)
    or queue (``BUSY``), or the supervisor serves as many agents as it may
    (``TOO_MANY_AGENTS``). Nothing moved; pause, then send it again (the
    client gives it a new id)."""


class SupervisorStateError(SagaSupervisorError):
    """The supervisor cannot take commands now."""


class NotReadyError(SupervisorStateError):
    """``NOT_READY``: starting, recovering, or a supply or actuator failed its
    check. Wait until the status says ready."""


class HaltedError(SupervisorStateError):
    """``HALTED``: the e-stop is latched; every command is refused until an
    operator resets."""


class JournalFailedError(SupervisorStateError):
    """``JOURNAL_FAILED``: nothing may move until the supervisor is restarted
    on a working journal."""


class PermissionDeniedError(SagaSupervisorError):
    """The agent may not do this. Do not retry."""


class UnauthorizedError(PermissionDeniedError):
    """``UNAUTHORIZED``: a reset with a wrong operator token."""


class ForbiddenError(PermissionDeniedError):
    """``FORBIDDEN`` (agents.allow does not give this op or actuator, or reset
    over MQTT is off), ``NO_OPERATOR_TOKEN``, or the HTTP listener's
    ``HOST_NOT_ALLOWED`` and ``ORIGIN_NOT_ALLOWED``."""


class LeaseError(SagaSupervisorError):
    """A lease was not granted (``TOO_MANY_LEASES``, ``SHUTTING_DOWN``)."""


class LeaseLostError(LeaseError):
    """The lease has ended, or the client can no longer vouch for it, and the
    sagas begun under it are (being) unwound by the supervisor.

    Codes ``LEASE_UNKNOWN``, ``LEASE_EXPIRED``, ``LEASE_NOT_HOLDER``; or
    ``None`` when the client found it out itself (no heartbeat acknowledged
    for a whole TTL). The client never takes a new lease on its own: call
    :meth:`Client.hello` (and replan) to go on."""


class SagaError(SagaSupervisorError):
    """A saga-level refusal: ``SAGA_NOT_OWNER``, ``SAGA_BUSY``, ``SAGA_FULL``,
    ``TOO_MANY_SAGAS``, ``DUPLICATE_ID``. Nothing moved."""


class SagaEndedError(SagaError):
    """The saga is no longer open: committed, aborted, unwound after a failed
    step, or unknown to the supervisor (``SAGA_UNKNOWN``)."""


class StepFailedError(SagaEndedError):
    """``STEP_FAILED`` or ``STEP_IN_DOUBT``: the step was applied, or may have
    been, and the saga was unwound before the reply. ``report`` says how
    cleanly. Begin a new saga to go on."""


class StepRefusedError(SagaSupervisorError):
    """The step's gate refused it (``DEADLINE_PASSED``, ``ACTUATOR_UNKNOWN``,
    ``ACTUATOR_BUSY``). Nothing moved; the saga goes on."""


class LimitError(StepRefusedError):
    """``LIMIT_MIN``, ``LIMIT_MAX``, ``LIMIT_STEP``, ``LIMIT_SLEW``: the value is
    outside the actuator's limits. Nothing moved; the saga goes on."""


class SupplyError(StepRefusedError):
    """``SUPPLY_LOW``, ``SUPPLY_HIGH``, ``SUPPLY_UNKNOWN``, ``SUPPLY_STALE``,
    ``SUPPLY_TRIPPED``: the actuator's supply is not good. Nothing moved."""


class ApprovalError(SagaSupervisorError):
    """An operator's approval was required, or the one sent cannot be used
    (``APPROVAL_REQUIRED``, ``APPROVAL_INVALID``, ``APPROVAL_MISMATCH``,
    ``APPROVAL_EXPIRED``, ``APPROVAL_REPLAYED``; with several approvals,
    ``APPROVALS_TOO_FEW``, ``APPROVAL_DUPLICATE_KEY``, ``APPROVAL_DUPLICATE``).
    Nothing moved."""


class ApprovalsFullError(ApprovalError, BackOffError):
    """``APPROVALS_FULL``: the supervisor remembers as many used approvals as it
    can hold. Retry after a while."""


class InternalError(SagaSupervisorError):
    """``INTERNAL`` (a supervisor bug), or a code this client does not know.
    Whether the command took effect is unknown: abort the saga."""


class ClientError(SagaSupervisorError):
    """A condition of the client itself; ``code`` is ``None``."""


class LoginRefusedError(ClientError):
    """The broker refused the login: no or a wrong password, an unknown user,
    or (the embedded broker) a client id other than ``agent`` or
    ``agent/<tag>``."""


class ConnectionLostError(ClientError, ConnectionError):
    """Not connected to the broker, and not reconnected in time. The request
    was not sent: nothing moved on its account."""


class ReplyTimeoutError(ClientError, TimeoutError):
    """The request was sent (and resent with its id) but no reply came in
    time. Its outcome is unknown: for a step, abort the saga, which puts back
    whatever moved."""


class ClientClosedError(ClientError):
    """The client was closed."""


class WatchOverflowError(ClientError):
    """A watch fell more updates behind than its buffer holds; it stopped
    rather than skip any."""


# Every code of docs/API.md's table, its class and whether it is a refusal
# (nothing moved). A test keeps it equal to the documented table. A code
# this table lacks is an InternalError and no refusal: the client cannot
# promise that nothing moved.
CODES: Dict[str, Tuple[Type[SagaSupervisorError], bool]] = {
    "BAD_REQUEST": (RequestError, True),
    "PAYLOAD_TOO_LARGE": (RequestError, True),
    "NOT_FINITE": (RequestError, True),
    "RATE_LIMITED": (BackOffError, True),
    "BUSY": (BackOffError, True),
    "TOO_MANY_AGENTS": (BackOffError, True),
    "NOT_READY": (NotReadyError, True),
    "HALTED": (HaltedError, True),
    "JOURNAL_FAILED": (JournalFailedError, True),
    "UNAUTHORIZED": (UnauthorizedError, True),
    "LOGIN_REQUIRED": (UnauthorizedError, True),
    "FORBIDDEN": (ForbiddenError, True),
    "NO_OPERATOR_TOKEN": (ForbiddenError, True),
    "HOST_NOT_ALLOWED": (ForbiddenError, True),
    "ORIGIN_NOT_ALLOWED": (ForbiddenError, True),
    "TOO_MANY_ATTEMPTS": (BackOffError, True),
    "LEASE_UNKNOWN": (LeaseLostError, True),
    "LEASE_EXPIRED": (LeaseLostError, True),
    "LEASE_NOT_HOLDER": (LeaseLostError, True),
    "TOO_MANY_LEASES": (LeaseError, True),
    "SHUTTING_DOWN": (LeaseError, True),
    "SAGA_UNKNOWN": (SagaEndedError, True),
    "SAGA_NOT_OWNER": (SagaError, True),
    "SAGA_BUSY": (SagaError, True),
    "SAGA_FULL": (SagaError, True),
    "TOO_MANY_SAGAS": (SagaError, True),
    "DUPLICATE_ID": (SagaError, True),
    "DEADLINE_PASSED": (StepRefusedError, True),
    "ACTUATOR_UNKNOWN": (StepRefusedError, True),
    "ACTUATOR_BUSY": (StepRefusedError, True),
    "LIMIT_MIN": (LimitError, True),
    "LIMIT_MAX": (LimitError, True),
    "LIMIT_STEP": (LimitError, True),
    "LIMIT_SLEW": (LimitError, True),
    "SUPPLY_LOW": (SupplyError, True),
    "SUPPLY_HIGH": (SupplyError, True),
    "SUPPLY_UNKNOWN": (SupplyError, True),
    "SUPPLY_STALE": (SupplyError, True),
    "SUPPLY_TRIPPED": (SupplyError, True),
    "APPROVAL_REQUIRED": (ApprovalError, True),
    "APPROVAL_INVALID": (ApprovalError, True),
    "APPROVAL_MISMATCH": (ApprovalError, True),
    "APPROVAL_EXPIRED": (ApprovalError, True),
    "APPROVAL_REPLAYED": (ApprovalError, True),
    "APPROVALS_FULL": (ApprovalsFullError, True),
    "APPROVALS_TOO_FEW": (ApprovalError, True),
    "APPROVAL_DUPLICATE_KEY": (ApprovalError, True),
    "APPROVAL_DUPLICATE": (ApprovalError, True),
    "UNKNOWN_ZONE": (RequestError, False),  # a halt naming one halted everything
    "ZONE_HALTED": (StepRefusedError, True),
    "STEP_FAILED": (StepFailedError, False),
    "STEP_IN_DOUBT": (StepFailedError, False),
    "INTERNAL": (InternalError, False),
    "DRAINING": (NotReadyError, True),
    "NOT_DRAINING": (SupervisorStateError, True),
    "QUARANTINED": (ForbiddenError, True),
    "NOT_QUARANTINED": (SupervisorStateError, True),
    "QUARANTINE_FULL": (SupervisorStateError, True),
}


def is_refusal(code: str) -> bool:
    """Whether ``code`` guarantees that nothing moved."""
    entry = CODES.get(code)
    return entry is not None and entry[1]


def error_for_code(
    code: str,
    message: str,
    *,
    op: Optional[str] = None,
    request_id: Optional[str] = None,
    report: Optional[RollbackReport] = None,
) -> SagaSupervisorError:
    """The exception of the family ``code`` belongs to (``InternalError`` for
    a code this client does not know)."""
    cls = CODES.get(code, (InternalError, False))[0]
    return cls(message, code=code, op=op, request_id=request_id, report=report)

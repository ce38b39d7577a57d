"""A Python client of saga-supervisor's MQTT API v1, for robot controllers.

::

    from saga_supervisor import Client, LimitError

    with Client("tcp://127.0.0.1:1883", device="arm1", agent="planner",
                credentials_dir="saga-data/mqtt/credentials") as client:
        with client.saga() as saga:          # begin; commit at the end, abort on an exception
            saga.step("shoulder", 60)
            try:
                saga.step("elbow", 300)      # over the elbow's limit: refused, nothing moved
            except LimitError as e:
                print("refused:", e.code)
            saga.step("elbow", 90, deadline=0.2)

The client takes a lease (``hello``) with the connection's last will set
on the agent's will topic, heartbeats from a background thread, and ends
the lease with ``bye`` when closed. Every refusal is an exception of the
code's family (:mod:`saga_supervisor.errors`) carrying the wire code and
message. docs/API.md in the repository is the protocol.

It runs on paho-mqtt 1.6 and 2.x.
"""

from ._paho import PAHO_VERSION
from ._wire import DEFAULT_PREFIX, Topics
from .client import (
    DEFAULT_BROKER,
    DEFAULT_CREDENTIALS_DIR,
    DEFAULT_RETRY_INTERVAL,
    DEFAULT_TIMEOUT,
    Client,
    Lease,
    Saga,
    StepResult,
    Watch,
)
from .errors import (
    CODES,
    ApprovalError,
    ApprovalsFullError,
    BackOffError,
    ClientClosedError,
    ClientError,
    ConnectionLostError,
    ForbiddenError,
    HaltedError,
    InternalError,
    JournalFailedError,
    LeaseError,
    LeaseLostError,
    LimitError,
    LoginRefusedError,
    NotReadyError,
    PermissionDeniedError,
    ReplyTimeoutError,
    RequestError,
    SagaEndedError,
    SagaError,
    SagaSupervisorError,
    StepFailedError,
    StepRefusedError,
    SupervisorStateError,
    SupplyError,
    UnauthorizedError,
    WatchOverflowError,
    error_for_code,
    is_refusal,
)
from .report import (
    BUCKETS,
    COMPENSATED,
    COMPENSATION_FAILED,
    FALLBACK_SAFE,
    ORPHANED,
    UNRESOLVED,
    ActuatorState,
    Event,
    RollbackReport,
    Status,
    StepReport,
    Update,
)

__version__ = "0.1.0"

__all__ = [
    "PAHO_VERSION",
    "DEFAULT_PREFIX",
    "Topics",
    "DEFAULT_BROKER",
    "DEFAULT_CREDENTIALS_DIR",
    "DEFAULT_RETRY_INTERVAL",
    "DEFAULT_TIMEOUT",
    "Client",
    "Lease",
    "Saga",
    "StepResult",
    "Watch",
    "CODES",
    "ApprovalError",
    "ApprovalsFullError",
    "BackOffError",
    "ClientClosedError",
    "ClientError",
    "ConnectionLostError",
    "ForbiddenError",
    "HaltedError",
    "InternalError",
    "JournalFailedError",
    "LeaseError",
    "LeaseLostError",
    "LimitError",
    "LoginRefusedError",
    "NotReadyError",
    "PermissionDeniedError",
    "ReplyTimeoutError",
    "RequestError",
    "SagaEndedError",
    "SagaError",
    "SagaSupervisorError",
    "StepFailedError",
    "StepRefusedError",
    "SupervisorStateError",
    "SupplyError",
    "UnauthorizedError",
    "WatchOverflowError",
    "error_for_code",
    "is_refusal",
    "BUCKETS",
    "COMPENSATED",
    "COMPENSATION_FAILED",
    "FALLBACK_SAFE",
    "ORPHANED",
    "UNRESOLVED",
    "ActuatorState",
    "Event",
    "RollbackReport",
    "Status",
    "StepReport",
    "Update",
    "__version__",
]

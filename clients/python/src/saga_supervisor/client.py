"""The client: a connection to the broker, a lease, sagas, halts, status and
watches (docs/API.md is the protocol; the Go client in client/ is the
reference for behaviour)."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import queue
import secrets
import ssl
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Type, Union

from . import _paho
from ._wire import (
    DEFAULT_PREFIX,
    LEASED_OPS,
    MAX_DEADLINE_MS,
    MAX_REASON_BYTES,
    Topics,
    encode_request,
    name_problem,
    parse_broker_url,
    read_secret_file,
)
from .errors import (
    ClientClosedError,
    ConnectionLostError,
    InternalError,
    LeaseError,
    LeaseLostError,
    LoginRefusedError,
    ReplyTimeoutError,
    RequestError,
    SagaEndedError,
    SagaSupervisorError,
    StepFailedError,
    WatchOverflowError,
    error_for_code,
)
from .report import ActuatorState, Event, RollbackReport, Status, Update

__all__ = [
    "DEFAULT_BROKER",
    "DEFAULT_CREDENTIALS_DIR",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRY_INTERVAL",
    "Client",
    "Lease",
    "Saga",
    "StepResult",
    "Watch",
]

log = logging.getLogger("saga_supervisor")

DEFAULT_BROKER = "tcp://127.0.0.1:1883"
"""The embedded broker of the supervisor's default configuration."""

DEFAULT_CREDENTIALS_DIR = os.path.join("saga-data", "mqtt", "credentials")
"""Where ``saga-supervisor run`` on its default configuration writes each
agent's password (``<dir>/<agent>``), relative to its working directory."""

DEFAULT_TIMEOUT = 5.0
"""Seconds a call waits for its reply (and connecting for the broker)."""

DEFAULT_RETRY_INTERVAL = 1.0
"""Seconds without a reply after which a request is sent again, with its id."""

_WATCH_BUFFER = 4096

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Lease:
    """The lease a client holds, as granted.

    Attributes:
        id: the lease id (opaque).
        epoch: the lease's fencing token.
        ttl: the granted TTL, seconds.
        heartbeat: how often the client heartbeats, seconds: the
            ``heartbeat_ms`` the supervisor granted, and never less often
            than TTL/3.
    """

    id: str
    epoch: int
    ttl: float
    heartbeat: float


@dataclass(frozen=True)
class StepResult:
    """What a step did.

    Attributes:
        step: the step's number in its saga, from 1.
        value: the value commanded.
        prior: the value the actuator had, which an unwind restores (NaN if
            the reply had none).
        requested: what was asked for: ``value`` unless ``clamped``.
        clamped: the actuator's clamp policy moved the value inside its limits.
    """

    step: int
    value: float
    prior: float
    requested: float
    clamped: bool = False


class _Signal:
    """A one-shot event: set once (by whoever took the request out of the
    pending table), waited for by one thread. A pre-acquired lock is all it
    takes, and costs less per request than a threading.Event."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        self._set = True
        self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=max(timeout, 0.0)):
            self._lock.release()
        return self._set


class _Pending:
    """A request waiting for its reply."""

    __slots__ = ("op", "topic", "payload", "lease", "event", "reply", "error", "callback", "sent_at")

    def __init__(self, op: str, topic: str, payload: bytes, lease: Optional[Lease], callback: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        self.op = op
        self.topic = topic
        self.payload = payload
        self.lease = lease
        self.event = _Signal()
        self.reply: Optional[Dict[str, Any]] = None
        self.error: Optional[SagaSupervisorError] = None
        self.callback = callback
        self.sent_at = time.monotonic()


def _clip_reason(text: str) -> str:
    """A printable reason of at most MAX_REASON_BYTES bytes."""
    text = "".join(c if c.isprintable() else " " for c in text)
    b = text.encode("utf-8", "replace")
    if len(b) <= MAX_REASON_BYTES:
        return b.decode("utf-8")
    return b[: MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "…"


def _number(v: Any, default: float) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return default


class Client:
    """One controller's connection to a supervisor, holding one lease.

    ::

        with Client("tcp://127.0.0.1:1883", device="arm1", agent="planner",
                    credentials_dir="saga-data/mqtt/credentials", ttl=2.0) as client:
            with client.saga() as saga:
                saga.step("elbow", 30)

    :meth:`connect` (or entering the ``with``) connects with a clean session
    and a last will on the agent's will topic, subscribes to the agent's
    replies, says ``hello`` naming the will's token and heartbeats from a
    background thread. :meth:`close` (or leaving the ``with``) says ``bye``
    and disconnects cleanly, which suppresses the will. Every method is safe
    to call from any thread.

    The lease is never renewed behind your back. When the client learns
    that its lease has ended (a heartbeat or any request refused
    ``LEASE_EXPIRED``, ``LEASE_UNKNOWN`` or ``LEASE_NOT_HOLDER``), or can no
    longer vouch for it (no heartbeat acknowledged for a whole TTL: then it
    also sends a best-effort ``bye``), every call that needs the lease
    raises :class:`LeaseLostError`, and ``on_lease_lost`` is called once,
    on a thread of its own. Call :meth:`hello` to take a new lease.

    The connection is re-established when it drops (the broker restarted):
    requests wait for it, up to their timeout, and are sent again with
    their ids once it is back (the supervisor answers a repeated request
    with its first reply, and never runs a step twice). Whether the lease
    survived is the supervisor's to say: a broker that was stopped sent the
    will, and the next heartbeat learns ``LEASE_EXPIRED``; one that crashed
    and came back within the TTL leaves it alive.

    Args:
        broker: ``tcp://host:port``, ``mqtt://``, ``ssl://`` or ``mqtts://``.
        device: the robot's name (its topics are ``<prefix>/<device>/...``).
        agent: who this controller is, also its MQTT username; replies come
            on ``reply/<agent>``.
        prefix: the topic prefix, ``saga/v1`` by default.
        tag: makes the client id ``<agent>/<tag>`` (a second connection of
            one agent); the client id is ``<agent>`` without it.
        credentials_dir: a directory of password files, one per agent, as
            the supervisor writes them (``saga-data/mqtt/credentials``): the
            password is read from ``<credentials_dir>/<agent>``.
        password_file: a file holding only the password (mode 0600 or 0400).
        password: the password itself (prefer a file).
        username: the MQTT username; the agent by default when there is a
            password.
        ca_file: a CA bundle (PEM) that verifies the broker's certificate;
            ``ssl://`` without it uses the system's CAs.
        cert_file, key_file: a client certificate and its key (PEM).
        ttl: the lease TTL asked for, seconds; ``None``: the supervisor's
            default (1 s). What was granted is :attr:`lease`.
        timeout: seconds connecting, and each call, may take by default.
        retry_interval: seconds without a reply after which a request is
            sent again with the same id.
        no_lease: connect without a lease (halt, status, reset and watch
            work; sagas need :meth:`hello` first).
        on_lease_lost: called with the :class:`LeaseLostError` when the
            lease is lost.
        keepalive: the MQTT keepalive, seconds.
        reconnect_max_delay: the longest wait between reconnection attempts.
    """

    def __init__(
        self,
        broker: str = DEFAULT_BROKER,
        *,
        device: str,
        agent: str,
        prefix: str = DEFAULT_PREFIX,
        tag: Optional[str] = None,
        credentials_dir: Optional[PathLike] = None,
        password_file: Optional[PathLike] = None,
        password: Optional[str] = None,
        username: Optional[str] = None,
        ca_file: Optional[PathLike] = None,
        cert_file: Optional[PathLike] = None,
        key_file: Optional[PathLike] = None,
        ttl: Optional[float] = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        no_lease: bool = False,
        on_lease_lost: Optional[Callable[[LeaseLostError], None]] = None,
        keepalive: int = 10,
        reconnect_max_delay: float = 2.0,
    ) -> None:
        self._url = parse_broker_url(broker)
        self._broker = broker
        p = name_problem(agent)
        if p is not None:
            raise ValueError(f"agent {agent!r}: {p}")
        self._topics = Topics(prefix=prefix, device=device)
        self._topics.validate()
        self._agent = agent
        self._reply_topic = self._topics.reply(agent)
        self._cmd_topic = self._topics.cmd(agent)
        if tag is not None:
            p = name_problem(tag)
            if p is not None:
                raise ValueError(f"tag {tag!r}: {p}")
        self._client_id = agent if tag is None else f"{agent}/{tag}"
        given = [x for x in (credentials_dir, password_file, password) if x is not None]
        if len(given) > 1:
            raise ValueError("give one of credentials_dir, password_file and password")
        self._credentials_dir = credentials_dir
        self._password_file = password_file
        self._password = password
        self._username = username
        if (cert_file is None) != (key_file is None):
            raise ValueError("cert_file and key_file go together")
        if not self._url.tls and (ca_file is not None or cert_file is not None):
            raise ValueError(f"ca_file and cert_file need an ssl:// or mqtts:// broker, not {broker!r}")
        self._ca_file = ca_file
        self._cert_file = cert_file
        self._key_file = key_file
        if ttl is not None and not (ttl > 0 and math.isfinite(ttl)):
            raise ValueError(f"ttl {ttl!r} must be a positive number of seconds")
        if not timeout > 0:
            raise ValueError(f"timeout {timeout!r} must be positive")
        if not retry_interval > 0:
            raise ValueError(f"retry_interval {retry_interval!r} must be positive")
        self._ttl = ttl
        self._timeout = float(timeout)
        self._retry_interval = float(retry_interval)
        self._no_lease = no_lease
        self.on_lease_lost = on_lease_lost
        """Called with the :class:`LeaseLostError` when the lease is lost, on a
        thread of its own; settable at any time."""
        self._keepalive = keepalive
        self._reconnect_max_delay = reconnect_max_delay

        # Ids are "<agent>-<session>-<n>": the session keeps a late reply to
        # an earlier client of the same agent from matching ours.
        self._id_prefix = f"{agent}-{secrets.token_hex(4)}-"
        self._counter = itertools.count(1)
        # The last will's payload, named in every hello of this client: only
        # a will carrying it ends our lease, so a late will of an earlier
        # process of this agent cannot (docs/API.md, "The will").
        self._will = "w" + secrets.token_hex(12)

        self._lock = threading.Lock()
        self._pending: Dict[str, _Pending] = {}
        self._lease: Optional[Lease] = None
        self._lease_error: Optional[LeaseLostError] = None
        self._ack_at = 0.0  # monotonic: when the last acknowledged heartbeat (or the hello) was sent
        self._mc: Any = None
        self._ready = threading.Event()  # connected and subscribed to the replies
        self._disconnected = threading.Event()
        self._connect_error: Optional[SagaSupervisorError] = None
        self._connect_failed = threading.Event()
        self._reply_mid: Optional[int] = None
        self._watch_subscribed = threading.Event()
        self._watching = False
        self._watchers: Set[Watch] = set()
        self._last_status: Optional[Update] = None
        self._last_states: Dict[str, Update] = {}
        self._closed = False
        self._connected_once = False
        self._nodelay = False

        self._hb_thread: Optional[threading.Thread] = None
        self._hb_stop = threading.Event()
        self._hb_wake = threading.Event()
        # Cleared, the heartbeat thread stalls before its next heartbeat, as a
        # hung thread would (the tests use it; nothing else should).
        self._hb_gate = threading.Event()
        self._hb_gate.set()

    # ------------------------------------------------------------------
    # Properties

    @property
    def agent(self) -> str:
        """The agent name."""
        return self._agent

    @property
    def device(self) -> str:
        """The device name."""
        return self._topics.device

    @property
    def client_id(self) -> str:
        """The MQTT client id: ``<agent>`` or ``<agent>/<tag>``."""
        return self._client_id

    @property
    def topics(self) -> Topics:
        """The supervisor's topic layout this client uses."""
        return self._topics

    @property
    def will(self) -> str:
        """The payload of this client's last will, named in its hellos."""
        return self._will

    @property
    def connected(self) -> bool:
        """Whether the connection is up and subscribed to the replies."""
        return self._ready.is_set()

    @property
    def tcp_nodelay(self) -> bool:
        """Whether Nagle's algorithm was turned off on the last connection's
        socket."""
        return self._nodelay

    @property
    def lease(self) -> Optional[Lease]:
        """The lease held, or ``None`` (no lease taken yet)."""
        with self._lock:
            return self._lease

    @property
    def lease_error(self) -> Optional[LeaseLostError]:
        """``None`` while the lease is usable (or none was taken); then why it
        is not."""
        with self._lock:
            return self._lease_error

    # ------------------------------------------------------------------
    # Connecting and closing

    def _login(self) -> Optional[str]:
        if self._password is not None:
            return self._password
        path: Optional[PathLike] = self._password_file
        if path is None and self._credentials_dir is not None:
            path = os.path.join(os.fspath(self._credentials_dir), self._agent)
        if path is None:
            return None
        try:
            return read_secret_file(os.fspath(path))
        except (OSError, ValueError) as e:
            raise LoginRefusedError(f"the password of {self._agent}: {e}") from e

    def connect(self) -> Client:
        """Connect, subscribe to the replies and (unless ``no_lease``) take a
        lease. Returns the client.

        Raises:
            LoginRefusedError: the broker refused the login, or the password
                file cannot be read.
            ConnectionLostError: no connection within the timeout.
            LeaseError: the hello was refused (``TOO_MANY_LEASES``,
                ``SHUTTING_DOWN``; ``BAD_REQUEST`` is a RequestError).
        """
        if self._closed:
            raise ClientClosedError("the client was closed; make a new one")
        if self._mc is not None:
            raise RuntimeError("connect() was called already")
        password = self._login()
        username = self._username
        if username is None and password is not None:
            username = self._agent
        mc = _paho.new_client(self._client_id, _PahoHandler(self))
        # The will: this agent's will topic, QoS 1, not retained, carrying
        # the token our hello names (docs/API.md, "The will").
        mc.will_set(self._topics.will(self._agent), self._will, qos=1, retain=False)
        if username is not None:
            mc.username_pw_set(username, password)
        if self._url.tls:
            # The certificate and the host name are verified, against ca_file
            # or the system's CAs (paho's own tls_set asks 1.6's ssl for a
            # deprecated protocol constant).
            ctx = ssl.create_default_context(cafile=os.fspath(self._ca_file) if self._ca_file is not None else None)
            if self._cert_file is not None and self._key_file is not None:
                ctx.load_cert_chain(os.fspath(self._cert_file), os.fspath(self._key_file))
            mc.tls_set_context(ctx)
        mc.reconnect_delay_set(min_delay=0.1, max_delay=self._reconnect_max_delay)
        self._mc = mc
        mc.connect_async(self._url.host, self._url.port, keepalive=self._keepalive)
        mc.loop_start()
        deadline = time.monotonic() + self._timeout
        while not self._ready.is_set():
            remaining = deadline - time.monotonic()
            if self._connect_failed.wait(min(0.05, max(remaining, 0))):
                break
            if remaining <= 0:
                break
        if not self._ready.is_set():
            hint = "is the broker running?" + (" Does ca_file verify its certificate and name?" if self._url.tls else "")
            err = self._connect_error or ConnectionLostError(f"could not connect to {self._broker} as {self._client_id!r} within {self._timeout:g}s ({hint})")
            self._shutdown_network()
            self._closed = True
            raise err
        if not self._no_lease:
            try:
                self.hello()
            except BaseException:
                self._closed = True
                self._stop_heartbeats()
                self._shutdown_network()
                raise
        return self

    def __enter__(self) -> Client:
        if self._mc is None:
            self.connect()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except SagaSupervisorError as e:
            log.debug("close while leaving on %r: %s", exc, e)

    def close(self, timeout: Optional[float] = None) -> None:
        """End the lease with ``bye`` (sagas still open are unwound: commit or
        abort them first), then disconnect cleanly, which suppresses the will.
        A second call does nothing.

        Raises:
            LeaseLostError: the bye found that the lease had already ended
                (``LEASE_EXPIRED``) without the client knowing: its open
                sagas were unwound then. The client is closed either way.
        """
        if self._closed:
            return
        self._stop_heartbeats()
        err: Optional[SagaSupervisorError] = None
        with self._lock:
            bye = self._lease is not None and self._lease_error is None
        if bye and self._ready.is_set():
            try:
                self._call({"op": "bye"}, leased=True, timeout=timeout)
            except LeaseLostError as e:
                err = e
            except SagaSupervisorError as e:
                log.debug("bye: %s", e)
        self._closed = True
        self._mark_lost(LeaseLostError("the client was closed"), bye=False, notify=False)
        self._fail_pending(lambda p: ClientClosedError(f"{p.op}: the client was closed"))
        self._shutdown_network()
        with self._lock:
            watchers = list(self._watchers)
        for w in watchers:
            w._end()
        if err is not None:
            raise err

    def _shutdown_network(self) -> None:
        mc = self._mc
        if mc is None:
            return
        self._disconnected.clear()
        was_connected = self._ready.is_set()
        self._ready.clear()
        try:
            mc.disconnect()
            if was_connected:
                # Let the network thread write the DISCONNECT (which
                # suppresses the will) before it is stopped.
                self._disconnected.wait(1.0)
        finally:
            mc.loop_stop()

    # ------------------------------------------------------------------
    # paho's callbacks, on its network thread (through _PahoHandler)

    def _on_connected(self, rc: int) -> None:
        """paho: a CONNACK arrived."""
        if rc != 0:
            if rc in _paho.LOGIN_REFUSED_CODES:
                self._connect_error = LoginRefusedError(
                    f"the broker {self._broker} refused the login of {self._username or self._agent!r} "
                    f"with client id {self._client_id!r} (CONNACK {rc}): a wrong or missing password, "
                    "a user it does not know, or a client id other than <agent> or <agent>/<tag>"
                )
            else:
                self._connect_error = ConnectionLostError(f"the broker {self._broker} refused the connection (CONNACK {rc})")
            if not self._connected_once:
                self._connect_failed.set()
            log.warning("%s", self._connect_error)
            return
        self._nodelay = _paho.set_nodelay(self._mc)
        _, self._reply_mid = self._mc.subscribe(self._reply_topic, 1)
        if self._watching:
            self._subscribe_watch()

    def _on_disconnected(self, rc: int) -> None:
        """paho: the connection ended."""
        self._ready.clear()
        self._disconnected.set()
        if not self._closed and rc != 0:
            log.info("disconnected from %s (rc %d); reconnecting", self._broker, rc)

    def _on_subscribed(self, mid: int, granted: List[int]) -> None:
        """paho: a SUBACK arrived."""
        if mid == self._reply_mid:
            if any(g >= 0x80 or g < 0 for g in granted):
                self._connect_error = LoginRefusedError(
                    f"the broker refused the subscription to {self._topics.reply(self._agent)} (check its ACL for {self._agent!r})"
                )
                if not self._connected_once:
                    self._connect_failed.set()
                return
            resend = self._connected_once
            self._connected_once = True
            self._ready.set()
            if resend:
                self._resend_pending()
        else:
            # The only other subscription is the watch's (its mid may be
            # recorded after paho already handled the SUBACK, when watch()
            # subscribes from a user's thread).
            self._watch_subscribed.set()

    def _on_message(self, topic: str, payload: bytes, retained: bool) -> None:
        """paho: a message arrived."""
        if topic == self._reply_topic:
            self._on_reply(payload)
        else:
            self._on_watched(topic, payload, retained)

    def _on_reply(self, payload: bytes) -> None:
        try:
            r = json.loads(payload)
        except ValueError:
            return
        if not isinstance(r, dict):
            return
        rid = r.get("id")
        if not isinstance(rid, str) or rid == "":
            return  # not a reply to anything of ours
        with self._lock:
            p = self._pending.pop(rid, None)  # the first reply for an id is the truth
        if p is None:
            return
        if p.callback is not None:
            p.callback(r)
            return
        p.reply = r
        p.event.set()

    def _resend_pending(self) -> None:
        """After a reconnect: send every request still waiting again, with
        its id (QoS 1 to a broker that restarted may have lost it)."""
        with self._lock:
            waiting = [p for p in self._pending.values() if p.callback is None]
        for p in waiting:
            log.debug("resending %s after a reconnect", p.op)
            self._mc.publish(p.topic, p.payload, qos=1, retain=False)

    # ------------------------------------------------------------------
    # Requests

    def _next_id(self) -> str:
        return self._id_prefix + str(next(self._counter))

    def _fail_pending(self, make: Callable[[_Pending], SagaSupervisorError], only_lease: Optional[Lease] = None) -> None:
        with self._lock:
            victims = [
                (rid, p)
                for rid, p in self._pending.items()
                if p.callback is None and (only_lease is None or p.lease is only_lease)
            ]
            for rid, _ in victims:
                del self._pending[rid]
        for _, p in victims:
            p.error = make(p)
            p.event.set()

    def _call(
        self,
        req: Dict[str, Any],
        *,
        leased: bool,
        timeout: Optional[float] = None,
        lease: Optional[Lease] = None,
    ) -> Dict[str, Any]:
        """Send a request and wait for its reply, sending it again with the
        same id every retry interval and after a reconnect. Returns the reply
        of an ``"ok":true``; raises the code's exception otherwise."""
        if self._closed:
            raise ClientClosedError(f"{req['op']}: the client was closed")
        if self._mc is None:
            raise ConnectionLostError(f"{req['op']}: not connected: call connect() first")
        op: str = req["op"]
        t = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        use: Optional[Lease] = None
        if leased:
            use = self._usable_lease(op, lease)
            req["lease"], req["epoch"] = use.id, use.epoch
        rid = req.get("id") or self._next_id()
        req["id"] = rid
        req["agent"] = self._agent
        payload = encode_request(req)
        topic = self._topics.estop(self._agent) if op == "halt" else self._cmd_topic
        p = _Pending(op, topic, payload, use)
        with self._lock:
            if rid in self._pending:
                raise RequestError(f"not sent: id {rid!r} is already waiting for its reply", code="BAD_REQUEST", op=op)
            self._pending[rid] = p
        sent = 0
        try:
            while True:
                while not self._ready.is_set() and not p.event.is_set() and time.monotonic() < deadline:
                    self._ready.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                if not self._ready.is_set() and not p.event.is_set():
                    if self._closed:
                        raise ClientClosedError(f"{op} {rid}: the client was closed")
                    if sent == 0:
                        raise ConnectionLostError(
                            f"{op} {rid}: not connected to {self._broker} within {t:g}s: not sent, nothing moved on its account"
                        )
                    raise ReplyTimeoutError(
                        f"{op} {rid}: no reply within {t:g}s, and the connection to {self._broker} is down: the outcome is unknown",
                        op=op,
                        request_id=rid,
                    )
                if not p.event.is_set():
                    self._mc.publish(topic, payload, qos=1, retain=False)
                    sent += 1
                remaining = deadline - time.monotonic()
                if p.event.wait(max(0.0, min(self._retry_interval, remaining))):
                    break
                if time.monotonic() >= deadline:
                    raise ReplyTimeoutError(
                        f"{op} {rid}: no reply within {t:g}s (sent {sent} times): the outcome is unknown",
                        op=op,
                        request_id=rid,
                    )
                log.debug("no reply to %s %s after %gs: sending it again", op, rid, self._retry_interval)
        finally:
            with self._lock:
                if self._pending.get(rid) is p:
                    del self._pending[rid]
        if p.error is not None:
            raise p.error
        r = p.reply
        assert r is not None
        if r.get("ok") is True:
            return r
        code = r.get("code")
        if not isinstance(code, str) or code == "":
            code = "INTERNAL"  # a refusal without a code is a supervisor bug
        message = r.get("message")
        report = r.get("report")
        err = error_for_code(
            code,
            message if isinstance(message, str) else "",
            op=op,
            request_id=rid,
            report=RollbackReport.from_json(report) if isinstance(report, dict) else None,
        )
        if isinstance(err, LeaseLostError) and use is not None:
            self._mark_lost(err, bye=False, lease=use)
        raise err

    def _usable_lease(self, op: str, lease: Optional[Lease]) -> Lease:
        """The lease a leased request is sent under; raises when there is
        none, or it is lost (and marks it lost when no heartbeat has been
        acknowledged for a whole TTL)."""
        with self._lock:
            current, lost, ack_at = self._lease, self._lease_error, self._ack_at
        if current is None:
            raise LeaseError(f"{op}: no lease: the client was made with no_lease=True; call hello() first")
        if lost is not None and (lease is None or lease is current):
            raise lost
        if lease is not None and lease is not current:
            raise LeaseLostError(f"{op}: the saga was begun under an earlier lease ({lease.id}), which has ended", op=op)
        since = time.monotonic() - ack_at
        if since > current.ttl:
            err = LeaseLostError(f"no heartbeat acknowledged for {since:.3f}s (TTL {current.ttl:g}s)", op=op)
            self._mark_lost(err, bye=True, lease=current)
            raise self._lease_error or err
        return current

    def request(self, op: str, *, request_id: Optional[str] = None, timeout: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        """Send one request of any op but ``hello`` and ``bye`` and return its
        reply, decoded; a refusal raises its code's exception.

        The client fills in ``id``, ``agent`` and, for the ops that act under
        a lease, ``lease`` and ``epoch``. ``request_id`` chooses the id:
        sending the same request with the same id again is a safe retry (the
        supervisor answers it with its first reply and never runs a step
        twice); reusing an id for a different request is refused
        ``DUPLICATE_ID``. The client itself already resends with the same id
        while it waits.
        """
        if op in ("hello", "bye"):
            raise ValueError(f"use {'hello()' if op == 'hello' else 'close()'} for {op}: the client keeps the lease's books")
        req: Dict[str, Any] = {"op": op}
        req.update(fields)
        if request_id is not None:
            req["id"] = request_id
        return self._call(req, leased=op in LEASED_OPS, timeout=timeout)

    # ------------------------------------------------------------------
    # The lease

    def hello(self, ttl: Optional[float] = None, timeout: Optional[float] = None) -> Lease:
        """Take a lease (a new one: the supervisor ends this agent's previous
        lease and unwinds its sagas) and keep it alive with heartbeats.

        Args:
            ttl: the TTL asked for, seconds; default the client's ``ttl``.
        """
        ttl = self._ttl if ttl is None else ttl
        req: Dict[str, Any] = {"op": "hello", "will": self._will}
        if ttl is not None:
            if not (ttl > 0 and math.isfinite(ttl)):
                raise ValueError(f"ttl {ttl!r} must be a positive number of seconds")
            req["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        sent = time.monotonic()
        r = self._call(req, leased=False, timeout=timeout)
        lid, epoch, ttl_ms, hb_ms = r.get("lease"), r.get("epoch"), r.get("ttl_ms"), r.get("heartbeat_ms")
        if not isinstance(lid, str) or lid == "" or not isinstance(epoch, int) or epoch <= 0 or not isinstance(ttl_ms, int) or ttl_ms <= 0:
            raise InternalError(
                f"hello granted no usable lease (lease {lid!r}, epoch {epoch!r}, ttl_ms {ttl_ms!r})",
                code="INTERNAL",
                op="hello",
                request_id=r.get("id"),
            )
        lease_ttl = ttl_ms / 1000.0
        heartbeat = lease_ttl / 3
        if isinstance(hb_ms, int) and 0 < hb_ms / 1000.0 < heartbeat:
            heartbeat = hb_ms / 1000.0
        lease = Lease(id=lid, epoch=epoch, ttl=lease_ttl, heartbeat=max(heartbeat, 0.001))
        with self._lock:
            self._lease = lease
            self._lease_error = None
            self._ack_at = sent
        self._start_heartbeats()
        self._hb_wake.set()
        return lease

    def _start_heartbeats(self) -> None:
        if self._hb_thread is not None and self._hb_thread.is_alive():
            return
        self._hb_stop.clear()
        t = threading.Thread(target=self._heartbeat_loop, name=f"saga-heartbeat-{self._agent}", daemon=True)
        self._hb_thread = t
        t.start()

    def _stop_heartbeats(self) -> None:
        self._hb_stop.set()
        self._hb_wake.set()
        self._hb_gate.set()
        t = self._hb_thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def _heartbeat_loop(self) -> None:
        """Heartbeat every Lease.heartbeat, without waiting for one reply
        before sending the next; mark the lease lost when a heartbeat is
        refused or none has been acknowledged for a whole TTL."""
        while not self._hb_stop.is_set():
            with self._lock:
                lease, lost = self._lease, self._lease_error
            if lease is None or lost is not None:
                self._hb_wake.wait(0.5)
                self._hb_wake.clear()
                continue
            if self._hb_stop.wait(lease.heartbeat):
                return
            self._hb_gate.wait()
            if self._hb_stop.is_set():
                return
            with self._lock:
                current, lost, ack_at = self._lease, self._lease_error, self._ack_at
                # Replies that never came must not stay pending for ever.
                now = time.monotonic()
                for rid in [rid for rid, p in self._pending.items() if p.callback is not None and now - p.sent_at > lease.ttl]:
                    del self._pending[rid]
            if current is not lease or lost is not None:
                continue
            since = time.monotonic() - ack_at
            if since > lease.ttl:
                self._mark_lost(
                    LeaseLostError(f"no heartbeat acknowledged for {since:.3f}s (TTL {lease.ttl:g}s)", op="heartbeat"), bye=True, lease=lease
                )
                continue
            if not self._ready.is_set():
                continue  # sent after the reconnect, if the lease lives that long
            self._send_heartbeat(lease)

    def _send_heartbeat(self, lease: Lease) -> None:
        sent = time.monotonic()
        rid = self._next_id()
        payload = encode_request({"id": rid, "agent": self._agent, "op": "heartbeat", "lease": lease.id, "epoch": lease.epoch})

        def answered(r: Dict[str, Any]) -> None:
            if r.get("ok") is True:
                with self._lock:
                    if self._lease is lease and sent > self._ack_at:
                        self._ack_at = sent
                return
            code = r.get("code") if isinstance(r.get("code"), str) else "INTERNAL"
            msg = r.get("message") if isinstance(r.get("message"), str) else ""
            err = error_for_code(str(code), f"heartbeat refused: {msg}", op="heartbeat", request_id=rid)
            lost = err if isinstance(err, LeaseLostError) else LeaseLostError(str(err), code=err.code, op="heartbeat", request_id=rid)
            self._mark_lost(lost, bye=False, lease=lease)

        topic = self._cmd_topic
        with self._lock:
            self._pending[rid] = _Pending("heartbeat", topic, payload, lease, callback=answered)
        self._mc.publish(topic, payload, qos=1, retain=False)

    def _mark_lost(self, err: LeaseLostError, *, bye: bool, lease: Optional[Lease] = None, notify: bool = True) -> None:
        """Record, once per lease, why it is unusable; wake the calls waiting
        under it; tell on_lease_lost. bye: the supervisor may still hold the
        lease (the client gave up on it): ask it to end it now."""
        with self._lock:
            current = self._lease
            if self._lease_error is not None or (lease is not None and lease is not current):
                return
            self._lease_error = err
            cb = self.on_lease_lost
        if current is not None:
            self._fail_pending(lambda p: err, only_lease=current)
        if bye and current is not None and self._mc is not None:
            try:
                payload = encode_request({"id": self._next_id(), "agent": self._agent, "op": "bye", "lease": current.id, "epoch": current.epoch})
                self._mc.publish(self._cmd_topic, payload, qos=1, retain=False)
            except Exception as e:  # best effort
                log.debug("bye after losing the lease: %s", e)
        if notify and cb is not None and current is not None:
            threading.Thread(target=cb, args=(err,), name="saga-lease-lost", daemon=True).start()

    # ------------------------------------------------------------------
    # Sagas

    def begin(self, timeout: Optional[float] = None) -> Saga:
        """Open a saga under the lease.

        Raises:
            LeaseLostError: the lease is lost.
            SagaError: ``TOO_MANY_SAGAS`` and the like.
        """
        with self._lock:
            lease = self._lease
        r = self._call({"op": "begin"}, leased=True, timeout=timeout, lease=lease)
        sid = r.get("saga")
        if not isinstance(sid, int) or sid <= 0:
            raise InternalError("begin granted no saga id", code="INTERNAL", op="begin", request_id=r.get("id"))
        assert lease is not None
        return Saga(self, sid, lease)

    def saga(self, timeout: Optional[float] = None) -> Saga:
        """:meth:`begin`, named for the ``with`` statement: the saga commits
        when the block ends and aborts when it raises (see :class:`Saga`)."""
        return self.begin(timeout=timeout)

    # ------------------------------------------------------------------
    # No lease needed

    def halt(self, reason: str = "", timeout: Optional[float] = None, zone: str = "") -> None:
        """Latch the supervisor's e-stop: every actuator to its safe policy,
        every command refused ``HALTED`` until an operator resets. Needs no
        lease. Sent on the agent's e-stop topic (``estop/<agent>``), which
        the supervisor reads on a connection of its own, so it never waits
        behind commands. With ``zone``, only that zone halts (its steps
        refused ``ZONE_HALTED``); a zone the supervisor lacks halts
        everything and raises ``UNKNOWN_ZONE``."""
        req: Dict[str, Any] = {"op": "halt", "reason": _clip_reason(reason)}
        if zone:
            req["zone"] = zone
        self._call(req, leased=False, timeout=timeout)

    def reset(self, token: str, timeout: Optional[float] = None, zone: str = "") -> None:
        """Clear a halt with the operator token (over MQTT only where the
        supervisor allows it: ``mqtt.allow_reset``; otherwise ``FORBIDDEN``).
        With ``zone``, clear only that zone's halt."""
        req: Dict[str, Any] = {"op": "reset", "token": token}
        if zone:
            req["zone"] = zone
        self._call(req, leased=False, timeout=timeout)

    def status(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The supervisor's full status object (what its HTTP status endpoint
        serves; it always has ``ready`` and ``halted``)."""
        r = self._call({"op": "status"}, leased=False, timeout=timeout)
        s = r.get("status")
        return s if isinstance(s, dict) else {}

    def watch(self, timeout: Optional[float] = None, buffer: int = _WATCH_BUFFER) -> Watch:
        """Watch the supervisor's status, events and actuator states.

        The current status and every actuator's retained state come first.
        Iterate the returned :class:`Watch` (or call :meth:`Watch.get` with
        a timeout); close it, or use it as a context manager, when done.
        Needs no lease."""
        if self._closed:
            raise ClientClosedError("watch: the client was closed")
        if self._mc is None:
            raise ConnectionLostError("watch: not connected: call connect() first")
        w = Watch(self, buffer)
        with self._lock:
            self._watchers.add(w)
            replay = ([self._last_status] if self._last_status is not None else []) + [self._last_states[k] for k in sorted(self._last_states)]
        for u in replay:
            w._put(u)
        if not self._watching:
            self._watching = True
            if self._ready.is_set():
                self._subscribe_watch()
            if not self._watch_subscribed.wait(self._timeout if timeout is None else timeout):
                w.close()
                raise ConnectionLostError(f"watch: the broker did not acknowledge the subscription to {self._topics.base}/status, events, state/+")
        return w

    def _subscribe_watch(self) -> None:
        self._mc.subscribe([(self._topics.status, 1), (self._topics.events, 1), (self._topics.state("+"), 1)])

    def _on_watched(self, topic: str, payload: bytes, retained: bool) -> None:
        t = self._topics
        state_prefix = t.state("")
        decoded: Any = None
        if payload:
            try:
                decoded = json.loads(payload)
            except ValueError:
                decoded = None
        if not isinstance(decoded, dict):
            decoded = None
        if topic == t.status:
            u = Update(topic, payload, retained, "status", status=Status.from_json(decoded) if decoded is not None else None)
        elif topic == t.events:
            u = Update(topic, payload, retained, "event", event=Event.from_json(decoded) if decoded is not None else None)
        elif topic.startswith(state_prefix):
            u = Update(topic, payload, retained, "state", state=ActuatorState.from_json(decoded) if decoded is not None else None)
        else:
            return
        with self._lock:
            if u.kind == "status":
                self._last_status = u
            elif u.kind == "state":
                self._last_states[topic] = u
            watchers = list(self._watchers)
        for w in watchers:
            w._put(u)

    def _forget_watch(self, w: Watch) -> None:
        with self._lock:
            self._watchers.discard(w)


class _PahoHandler:
    """Hands paho's callbacks to a client's private methods (so that they
    are no part of the client's public interface)."""

    __slots__ = ("_c",)

    def __init__(self, c: Client) -> None:
        self._c = c

    def on_connected(self, rc: int) -> None:
        self._c._on_connected(rc)

    def on_disconnected(self, rc: int) -> None:
        self._c._on_disconnected(rc)

    def on_subscribed(self, mid: int, granted: List[int]) -> None:
        self._c._on_subscribed(mid, granted)

    def on_message(self, topic: str, payload: bytes, retained: bool) -> None:
        self._c._on_message(topic, payload, retained)


class Saga:
    """One open saga under the client's lease. Its methods wait for each
    other: the supervisor takes one step of a saga at a time.

    Used as a context manager, the saga commits when the block ends and
    aborts when it raises: the exception goes on, and :attr:`report` holds
    the unwind's report (also added to the exception's notes on Python
    3.11+)::

        with client.saga() as saga:
            saga.step("elbow", 30)
            saga.step("gripper", 20)
        # committed here

    Attributes:
        id: the supervisor's id of the saga.
        lease: the lease it was begun under.
        report: the report of its unwind, once there was one (an abort, or a
            step that failed); ``None`` otherwise.
    """

    def __init__(self, client: Client, saga_id: int, lease: Lease) -> None:
        self._client = client
        self.id = saga_id
        self.lease = lease
        self.report: Optional[RollbackReport] = None
        self._lock = threading.Lock()
        self._ended: Optional[SagaEndedError] = None
        self.committed = False
        """Whether the saga was committed."""

    def __repr__(self) -> str:
        return f"<Saga {self.id} {'open' if self.is_open else 'ended'}>"

    @property
    def is_open(self) -> bool:
        """False once the client knows the saga ended (committed, aborted,
        unwound)."""
        return self._ended is None

    def _end(self, err: SagaEndedError) -> None:
        if self._ended is None:
            self._ended = err

    def _call(self, req: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
        if self._ended is not None:
            raise self._ended
        try:
            return self._client._call(req, leased=True, timeout=timeout, lease=self.lease)
        except StepFailedError as e:
            self.report = e.report
            self._end(SagaEndedError(f"saga {self.id} was unwound after a failed step: {e}", code=e.code, op=e.op, request_id=e.request_id, report=e.report))
            raise
        except SagaEndedError as e:
            self._end(e)
            raise
        except LeaseLostError as e:
            # The supervisor unwinds every saga of an ended lease.
            self._end(SagaEndedError(f"saga {self.id} ended with its lease: {e}", code=e.code, op=e.op, request_id=e.request_id))
            raise

    def step(
        self,
        actuator: str,
        value: float,
        *,
        deadline: Optional[float] = None,
        approval: Optional[str] = None,
        approvals: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
    ) -> StepResult:
        """Command one actuator.

        Args:
            actuator: the actuator's name.
            value: the value, in the actuator's unit.
            deadline: seconds: the step is void unless the supervisor admits
                it within this long of receiving it (``DEADLINE_PASSED``);
                rounded up to a millisecond, 0.001..60.
            approval: an operator's signed approval token for this exact step
                (``saga-supervisor ctl approve``).
            approvals: several operators' tokens, each signed by its own key,
                for an actuator marked ``requires_approval: M`` (1..8 tokens;
                with ``approval``, it is sent first).
            timeout: seconds to wait for the reply.

        Raises:
            LimitError, SupplyError, StepRefusedError, ApprovalError: refused;
                nothing moved and the saga goes on.
            StepFailedError: the driver failed; the saga was unwound
                (``report``), and is over.
            ReplyTimeoutError: the outcome is unknown: abort the saga.
        """
        req: Dict[str, Any] = {"op": "step", "saga": self.id, "actuator": actuator, "value": value}
        if deadline is not None:
            ms = math.ceil(deadline * 1000) if math.isfinite(deadline) else 0
            if not (deadline > 0 and ms <= MAX_DEADLINE_MS):
                raise RequestError(f"not sent: deadline {deadline!r}s is outside 0.001..{MAX_DEADLINE_MS / 1000:g}s", code="BAD_REQUEST", op="step")
            req["deadline_ms"] = ms
        tokens = ([approval] if approval is not None else []) + list(approvals or [])
        if len(tokens) == 1:
            req["approval"] = tokens[0]
        elif tokens:
            req["approvals"] = tokens
        with self._lock:
            r = self._call(req, timeout)
        v = _number(value, math.nan)
        return StepResult(
            step=int(r["step"]) if isinstance(r.get("step"), int) else 0,
            value=_number(r.get("value"), v),
            prior=_number(r.get("prior"), math.nan),
            requested=_number(r.get("requested"), v),
            clamped=r.get("clamped") is True,
        )

    def commit(self, timeout: Optional[float] = None) -> None:
        """Close the saga, keeping what it did; durable in the supervisor's
        journal when this returns."""
        with self._lock:
            self._call({"op": "commit", "saga": self.id}, timeout)
            self.committed = True
            self._end(SagaEndedError(f"saga {self.id} was committed", op="commit"))

    def abort(self, reason: str = "", timeout: Optional[float] = None) -> RollbackReport:
        """Unwind the saga and return the report of the unwind. Whether it put
        everything back is the report's :attr:`RollbackReport.clean`, not an
        exception: this returns when the unwind ran."""
        with self._lock:
            r = self._call({"op": "abort", "saga": self.id, "reason": _clip_reason(reason)}, timeout)
            raw = r.get("report")
            if not isinstance(raw, dict):
                raise InternalError(f"the abort of saga {self.id} was answered without a report", code="INTERNAL", op="abort", request_id=r.get("id"))
            self.report = RollbackReport.from_json(raw)
            self._end(SagaEndedError(f"saga {self.id} was aborted", op="abort"))
            return self.report

    def __enter__(self) -> Saga:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if exc is None:
            if self.is_open:
                self.commit()
            return
        if not self.is_open:
            if self.report is not None:
                _note(exc, f"saga {self.id} was unwound: {self.report.verdict}")
            return
        try:
            report = self.abort(f"{type(exc).__name__}: {exc}")
        except SagaSupervisorError as abort_err:
            _note(exc, f"saga {self.id}: the abort failed: {abort_err}")
            log.warning("saga %d: the abort after %r failed: %s", self.id, exc, abort_err)
        else:
            _note(exc, f"saga {self.id} aborted: {report.verdict}")


def _note(exc: BaseException, text: str) -> None:
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(text)


class Watch:
    """A stream of :class:`Update` from the supervisor's status, events and
    state topics. Iterate it (blocking) or call :meth:`get`; it ends when
    closed, or when its client is closed. A watch that falls more than its
    buffer behind raises :class:`WatchOverflowError` once it has delivered
    what it holds, rather than skip any."""

    def __init__(self, client: Client, buffer: int) -> None:
        self._client = client
        self._q: queue.Queue[Optional[Update]] = queue.Queue(maxsize=buffer)
        self._overflow = False
        self._done = False

    def _put(self, u: Update) -> None:
        if self._done:
            return
        try:
            self._q.put_nowait(u)
        except queue.Full:
            self._overflow = True

    def _end(self) -> None:
        if not self._done:
            self._done = True
            try:
                self._q.put_nowait(None)
            except queue.Full:
                pass

    def get(self, timeout: Optional[float] = None) -> Optional[Update]:
        """The next update, waiting up to ``timeout`` seconds (for ever with
        ``None``); ``None`` when none came in time.

        Raises:
            StopIteration: the watch is closed.
            WatchOverflowError: it fell too far behind.
        """
        if self._overflow and self._q.empty():
            raise WatchOverflowError(f"the watch fell {self._q.maxsize} updates behind: stopped rather than skip any")
        try:
            u = self._q.get(timeout=timeout) if timeout is None or timeout > 0 else self._q.get_nowait()
        except queue.Empty:
            return None
        if u is None:
            self._q.put_nowait(None)  # stays ended
            raise StopIteration
        return u

    def __iter__(self) -> Iterator[Update]:
        return self

    def __next__(self) -> Update:
        while True:
            u = self.get()
            if u is not None:
                return u

    def close(self) -> None:
        """Stop delivering updates."""
        self._client._forget_watch(self)
        self._end()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

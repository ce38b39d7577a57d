"""The wire format of MQTT API v1, as far as a client writes it: topics,
names, requests, broker URLs and secret files (docs/API.md)."""

from __future__ import annotations

import json.encoder
import math
import os
import stat
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import urlsplit

from .errors import RequestError

# json.dumps(s, ensure_ascii=False) for one string, in C where CPython has
# it (typeshed leaves it out: it is undocumented).
encode_basestring: Callable[[str], str] = getattr(json.encoder, "encode_basestring")

DEFAULT_PREFIX = "saga/v1"
MAX_NAME_BYTES = 64
MAX_ID_BYTES = 128
MAX_LEASE_BYTES = 128
MAX_REASON_BYTES = 256
MAX_TOKEN_BYTES = 256
MAX_APPROVAL_BYTES = 512
MAX_APPROVALS = 8  # tokens in one step's approvals
MAX_DEADLINE_MS = 60000
MAX_REQUEST_BYTES = 8192
MAX_SECRET_BYTES = 4096

# The order Go's api.EncodeRequest writes keys in, so that a request this
# client sends reads the same as one from the Go client.
_KEY_ORDER = (
    "id",
    "agent",
    "op",
    "ttl_ms",
    "lease",
    "epoch",
    "saga",
    "actuator",
    "value",
    "deadline_ms",
    "reason",
    "token",
    "will",
    "approval",
    "approvals",
    "zone",
)

# The fields each op may carry besides id, agent and op (docs/API.md,
# "Requests"). Anything else is refused before sending: the supervisor
# would refuse it BAD_REQUEST.
OP_FIELDS: Dict[str, Tuple[str, ...]] = {
    "hello": ("ttl_ms", "will"),
    "heartbeat": ("lease", "epoch"),
    "begin": ("lease", "epoch"),
    "step": ("lease", "epoch", "saga", "actuator", "value", "deadline_ms", "approval", "approvals"),
    "commit": ("lease", "epoch", "saga"),
    "abort": ("lease", "epoch", "saga", "reason"),
    "bye": ("lease", "epoch"),
    "halt": ("reason", "zone"),
    "reset": ("token", "zone"),
    "status": (),
}

LEASED_OPS = frozenset(op for op, fields in OP_FIELDS.items() if "lease" in fields)
"""The ops that act under a lease (the client fills in lease and epoch)."""


def name_problem(s: str) -> Optional[str]:
    """Why ``s`` cannot be one topic level (an agent, device or actuator
    name), or ``None`` when it can: 1..64 bytes of printable UTF-8 with no
    ``/``, ``+`` or ``#``."""
    if not isinstance(s, str):
        return f"name {s!r} is not a string"
    if s == "":
        return "empty name"
    n = len(s.encode("utf-8", "surrogatepass"))
    if n > MAX_NAME_BYTES:
        return f"name is {n} bytes, over the limit of {MAX_NAME_BYTES}"
    if s.isprintable() and "/" not in s and "+" not in s and "#" not in s:
        return None  # the common case, without a loop in Python
    for c in s:
        if c in "/+#":
            return f"name {s!r} holds {c!r}, which MQTT topics reserve"
        if not c.isprintable() or "\ud800" <= c <= "\udfff":
            return f"name {s!r} holds the unprintable character U+{ord(c):04X}"
    return None


def text_problem(s: str, what: str, lo: int, hi: int) -> Optional[str]:
    """Why ``s`` is not a valid string field of ``lo``..``hi`` bytes of
    printable UTF-8, or ``None``."""
    if not isinstance(s, str):
        return f"{what} {s!r} is not a string"
    try:
        n = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} is not valid UTF-8 (a lone surrogate)"
    if not lo <= n <= hi:
        return f"{what} is {n} bytes, outside {lo}..{hi}"
    if s.isprintable():
        return None
    for c in s:
        if not c.isprintable():
            return f"{what} holds the unprintable character U+{ord(c):04X}"
    return None


@dataclass(frozen=True)
class Topics:
    """The supervisor's topic layout for one device (docs/API.md, "Topics")."""

    prefix: str
    device: str

    @property
    def base(self) -> str:
        """``<prefix>/<device>``."""
        return f"{self.prefix}/{self.device}"

    def cmd(self, agent: str) -> str:
        """The agent's own request topic."""
        return f"{self.base}/cmd/{agent}"

    def reply(self, agent: str) -> str:
        """The agent's reply topic."""
        return f"{self.base}/reply/{agent}"

    def estop(self, agent: str) -> str:
        """The agent's e-stop topic (halts there are answered on its replies)."""
        return f"{self.base}/estop/{agent}"

    def will(self, agent: str) -> str:
        """The agent's last-will topic."""
        return f"{self.base}/will/{agent}"

    @property
    def status(self) -> str:
        """The retained status topic."""
        return f"{self.base}/status"

    @property
    def events(self) -> str:
        """The events topic."""
        return f"{self.base}/events"

    def state(self, actuator: str) -> str:
        """An actuator's retained state topic (``+``: all of them)."""
        return f"{self.base}/state/{actuator}"

    def validate(self) -> None:
        """Raise ValueError unless the prefix and device make valid topics."""
        if self.prefix.startswith("$"):
            raise ValueError(f"topic prefix {self.prefix!r} starts with '$', which brokers reserve")
        for level in self.prefix.split("/"):
            p = name_problem(level)
            if p is not None:
                raise ValueError(f"topic prefix {self.prefix!r}: {p}")
        p = name_problem(self.device)
        if p is not None:
            raise ValueError(f"device: {p}")


def _bad(op: str, message: str, code: str = "BAD_REQUEST") -> RequestError:
    return RequestError("not sent: " + message, code=code, op=op)


def encode_request(req: Dict[str, Any]) -> bytes:
    """Encode a request as the Go client does (fixed key order, compact),
    refusing what the supervisor would refuse: an unknown op or field, a
    bad name or string, a non-finite value, a payload over 8192 bytes.
    Raises :class:`RequestError` (``BAD_REQUEST``, ``NOT_FINITE`` or
    ``PAYLOAD_TOO_LARGE``) with ``request_id`` ``None``: nothing was sent."""
    op = req.get("op")
    if not isinstance(op, str) or op not in OP_FIELDS:
        raise _bad(str(op), f"unknown op {op!r}")
    allowed = OP_FIELDS[op]
    for k in req:
        if k not in ("id", "agent", "op") and k not in allowed:
            raise _bad(op, f"field {k!r} is not one op {op} uses")
    p = text_problem(req.get("id", ""), "id", 1, MAX_ID_BYTES)
    if p is not None:
        raise _bad(op, p)
    p = name_problem(req.get("agent", ""))
    if p is not None:
        raise _bad(op, "agent: " + p)
    out: Dict[str, Any] = {}
    for k in _KEY_ORDER:
        if k not in req:
            continue
        v = req[k]
        if k in ("ttl_ms", "epoch", "saga", "deadline_ms"):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v >= 1 << 64:
                raise _bad(op, f"field {k!r} must be a positive integer, got {v!r}")
            if k == "deadline_ms" and v > MAX_DEADLINE_MS:
                raise _bad(op, f"deadline_ms {v} is over {MAX_DEADLINE_MS}")
        elif k == "value":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _bad(op, f"value {v!r} is not a number")
            try:
                v = float(v)
            except OverflowError:
                raise _bad(op, f"value {req[k]!r} is too large for a 64-bit float", "NOT_FINITE") from None
            if not math.isfinite(v):
                raise _bad(op, f'field "value" is not finite ({v!r})', "NOT_FINITE")
        elif k == "actuator":
            p = name_problem(v)
            if p is not None:
                raise _bad(op, "actuator: " + p)
        elif k == "will":
            p = name_problem(v)
            if p is not None:
                raise _bad(op, "will: " + p)
        elif k == "zone":
            p = name_problem(v)
            if p is not None:
                raise _bad(op, "zone: " + p)
        elif k == "lease":
            p = text_problem(v, "lease", 1, MAX_LEASE_BYTES)
            if p is not None:
                raise _bad(op, p)
        elif k == "reason":
            p = text_problem(v, "reason", 0, MAX_REASON_BYTES)
            if p is not None:
                raise _bad(op, p)
            if v == "":
                continue  # the Go encoder leaves an empty reason out
        elif k == "token":
            p = text_problem(v, "token", 1, MAX_TOKEN_BYTES)
            if p is not None:
                raise _bad(op, p)
        elif k == "approval":
            p = text_problem(v, "approval", 1, MAX_APPROVAL_BYTES)
            if p is None and " " in v:
                p = "approval holds a space: it is one token; send several in approvals"
            if p is not None:
                raise _bad(op, p)
        elif k == "approvals":
            if "approval" in req:
                raise _bad(op, "send approval or approvals, not both")
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or not 1 <= len(v) <= MAX_APPROVALS:
                raise _bad(op, f"approvals must be a list of 1..{MAX_APPROVALS} tokens, got {v!r:.80}")
            for i, tok in enumerate(v):
                p = text_problem(tok, f"approvals item {i + 1}", 1, MAX_APPROVAL_BYTES)
                if p is None and " " in tok:
                    p = f"approvals item {i + 1} holds a space: a token never does"
                if p is not None:
                    raise _bad(op, p)
            if len(v) == 1:
                out["approval"] = v[0]  # one token goes as approval, as the Go client sends it
                continue
            v = list(v)
        out[k] = v
    for k in allowed:
        if k in ("lease", "epoch", "saga", "actuator", "value", "token") and k not in out:
            raise _bad(op, f"op {op} needs field {k!r}")
    parts = []
    for k, v in out.items():
        if k == "value":
            text = go_float(v)
        elif isinstance(v, int):
            text = str(v)
        elif isinstance(v, list):
            text = "[" + ",".join(encode_basestring(t) for t in v) + "]"
        else:
            text = encode_basestring(v)  # json.dumps(v, ensure_ascii=False), in C
        parts.append(f'"{k}":{text}')
    b = ("{" + ",".join(parts) + "}").encode("utf-8")
    if len(b) > MAX_REQUEST_BYTES:
        raise _bad(op, f"the request is {len(b)} bytes, over {MAX_REQUEST_BYTES}", "PAYLOAD_TOO_LARGE")
    return b


def go_float(v: float) -> str:
    """A finite float as Go's encoding/json writes it: the shortest digits
    that read back the same, in plain notation unless its magnitude is
    under 1e-6 or at least 1e21 (``30`` for 30.0, ``1e-7``, ``1e+21``).
    Requests from this client then read byte for byte as the Go client's."""
    r = repr(v)
    if "e" not in r:
        # Python's repr is plain from 1e-4 to 1e16, where Go's is too, and
        # both are the shortest digits that read back the same.
        return r[:-2] if r.endswith(".0") else r
    if v != 0 and (abs(v) < 1e-6 or abs(v) >= 1e21):
        mantissa, _, exp = repr(v).partition("e")
        if not exp:  # repr chose plain notation: write it as an exponent
            mantissa, _, exp = f"{Decimal(repr(v)).normalize():e}".partition("e")
        sign = "-" if exp.startswith("-") else "+"
        digits = exp.lstrip("+-").lstrip("0") or "0"
        if sign == "+" and len(digits) < 2:
            digits = digits.rjust(2, "0")
        return f"{mantissa}e{sign}{digits}"
    return format(Decimal(repr(v)).normalize(), "f")


@dataclass(frozen=True)
class BrokerURL:
    """A parsed broker URL."""

    host: str
    port: int
    tls: bool


_SCHEMES = {"tcp": False, "mqtt": False, "ssl": True, "mqtts": True, "tls": True}


def parse_broker_url(url: str) -> BrokerURL:
    """Parse ``tcp://host:port`` (also ``mqtt://``; port 1883 by default) or
    ``ssl://host:port`` (also ``mqtts://``, ``tls://``; 8883). Raises
    ValueError for anything else, and for a URL carrying credentials (give
    a password file instead)."""
    u = urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in _SCHEMES:
        raise ValueError(f"broker {url!r}: the scheme must be one of tcp, mqtt, ssl, mqtts, tls")
    if u.username is not None or u.password is not None:
        raise ValueError(f"broker {url!r}: no credentials in the URL; give a password file or credentials_dir")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"broker {url!r}: a broker URL is scheme://host:port, nothing after it")
    if not u.hostname:
        raise ValueError(f"broker {url!r}: no host")
    try:
        port = u.port
    except ValueError as e:
        raise ValueError(f"broker {url!r}: {e}") from None
    tls = _SCHEMES[scheme]
    return BrokerURL(host=u.hostname, port=port if port is not None else (8883 if tls else 1883), tls=tls)


def read_secret_file(path: str) -> str:
    """Read a password or token file as the supervisor does: a regular file
    that group and others cannot access (mode 0600 or 0400), at most 4096
    bytes, one line (a trailing newline is dropped). Raises OSError for a
    missing file and ValueError for one that breaks these rules."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        perm = stat.S_IMODE(st.st_mode)
        if perm & 0o077:
            raise ValueError(f"{path} has mode {perm:04o}: a secret must not be accessible to group or others (chmod 600 {path})")
        data = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SECRET_BYTES} bytes: not a password or token")
    text = data.decode("utf-8").rstrip("\r\n")
    if text == "":
        raise ValueError(f"{path} is empty")
    if any(c in text for c in "\r\n\x00"):
        raise ValueError(f"{path} holds more than one line")
    return text

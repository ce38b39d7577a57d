"""paho-mqtt 1.6 and 2.x behind one small interface.

The two differ where this package touches them: 2.x's ``Client`` takes a
``CallbackAPIVersion`` first, and with ``VERSION2`` its ``on_connect``,
``on_disconnect`` and ``on_subscribe`` take reason codes and properties
where 1.6 takes integers (and ``on_disconnect`` gains a flags argument).
:func:`new_client` picks by ``paho.mqtt.__version__`` and hands every
callback to a :class:`Handler` with plain integers, so the rest of the
package never looks at the version.

paho is typed from 2.0 on and untyped in 1.6; it is used here as ``Any``
so that ``mypy --strict`` reads this package the same against either.
"""

from __future__ import annotations

import re
import socket
from typing import Any, List, Protocol, Tuple

import paho.mqtt as _paho_pkg
import paho.mqtt.client as _paho_client

paho: Any = _paho_client


def _version(text: str) -> Tuple[int, ...]:
    parts = []
    for p in text.split(".")[:3]:
        m = re.match(r"\d+", p)
        parts.append(int(m.group()) if m else 0)
    return tuple(parts)


PAHO_VERSION: Tuple[int, ...] = _version(str(getattr(_paho_pkg, "__version__", "1.6.0")))
"""The installed paho-mqtt's version, as integers."""

PAHO2 = PAHO_VERSION[0] >= 2
"""True on paho-mqtt 2.x (callback API version 2 is used)."""

# CONNACK codes of a refused login: MQTT 3.1.1's 4 (bad user name or
# password) and 5 (not authorised), which paho 2.x reports as the MQTT 5
# reason codes 134 and 135.
LOGIN_REFUSED_CODES = frozenset({4, 5, 134, 135})


class Handler(Protocol):
    """What a client wants to hear from paho's network thread."""

    def on_connected(self, rc: int) -> None:
        """A CONNACK arrived; ``rc`` 0 is success."""

    def on_disconnected(self, rc: int) -> None:
        """The connection ended; ``rc`` 0 means we asked for it."""

    def on_subscribed(self, mid: int, granted: List[int]) -> None:
        """A SUBACK arrived: a granted QoS per filter, 128 or more a refusal."""

    def on_message(self, topic: str, payload: bytes, retained: bool) -> None:
        """A message arrived on a subscribed topic."""


def _rc(rc: Any) -> int:
    """An integer from paho 1.6's int or 2.x's ReasonCode."""
    v = getattr(rc, "value", rc)
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def new_client(client_id: str, handler: Handler) -> Any:
    """A paho client for MQTT 3.1.1 with a clean session, its callbacks
    wired to ``handler``, unlimited in-flight messages (a halt must not wait
    behind a window of unacknowledged steps)."""
    if PAHO2:
        mc = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True, protocol=paho.MQTTv311)

        def on_connect_v2(_c: Any, _u: Any, _flags: Any, rc: Any, _props: Any = None) -> None:
            handler.on_connected(_rc(rc))

        def on_disconnect_v2(_c: Any, _u: Any, _flags: Any, rc: Any = 0, _props: Any = None) -> None:
            handler.on_disconnected(_rc(rc))

        def on_subscribe_v2(_c: Any, _u: Any, mid: int, rcs: Any, _props: Any = None) -> None:
            handler.on_subscribed(mid, [_rc(r) for r in rcs])

        mc.on_connect, mc.on_disconnect, mc.on_subscribe = on_connect_v2, on_disconnect_v2, on_subscribe_v2
    else:
        mc = paho.Client(client_id=client_id, clean_session=True, protocol=paho.MQTTv311)

        def on_connect_v1(_c: Any, _u: Any, _flags: Any, rc: Any) -> None:
            handler.on_connected(_rc(rc))

        def on_disconnect_v1(_c: Any, _u: Any, rc: Any) -> None:
            handler.on_disconnected(_rc(rc))

        def on_subscribe_v1(_c: Any, _u: Any, mid: int, granted: Any) -> None:
            handler.on_subscribed(mid, [_rc(r) for r in granted])

        mc.on_connect, mc.on_disconnect, mc.on_subscribe = on_connect_v1, on_disconnect_v1, on_subscribe_v1

    def on_message(_c: Any, _u: Any, m: Any) -> None:
        handler.on_message(str(m.topic), bytes(m.payload), bool(m.retain))

    mc.on_message = on_message
    mc.max_inflight_messages_set(0)
    return mc


def set_nodelay(mc: Any) -> bool:
    """Turn off Nagle's algorithm on the client's socket (docs/API.md,
    "Latency"): a request and its reply are small packets that wait for
    each other. Returns whether the option is now set."""
    sock = mc.socket()
    if sock is None:
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    except (OSError, AttributeError):
        return False

"""The tests' rig: the real saga-supervisor binary on a broker of each kind
(its embedded broker, or Debian's mosquitto set up by the binary's own
``mosquitto-config``), on free loopback ports, in a temporary directory.

Tools: ``$SAGA_BIN`` (else the binary is built with Go into a temporary
directory), ``mosquitto``. Under ``CI=true`` a missing tool fails the test;
elsewhere it skips it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import saga_supervisor
from saga_supervisor import Client

REPO = Path(__file__).resolve().parents[3]
"""The repository's root."""

PKG_SRC = Path(saga_supervisor.__file__).resolve().parents[1]
"""The directory saga_supervisor was imported from (for child processes)."""

DEVICE = "arm1"

# The agents of the tests' agents.allow: planner and ctl as shipped (ctl
# with every op but reset), and loader, an agent that keeps the
# supervisor busy.
AGENTS_ALLOW = """  allow:
    planner: {}
    ctl: {}
    loader: {}
"""

SHIPPED_ALLOW = """  allow:
    planner: {}      # the demo's controller: everything but reset
    ctl:             # saga-supervisor ctl
      ops: [hello, heartbeat, bye, begin, step, commit, abort, status]
"""


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``): a missing tool then fails."""
    return os.environ.get("CI", "") == "true"


def missing(what: str) -> None:
    """Fail (under CI) or skip the test: ``what`` is not installed."""
    if in_ci():
        pytest.fail(f"{what} (CI=true: a missing tool fails the tests)", pytrace=False)
    pytest.skip(what)


def need_tool(name: str, *fallbacks: str) -> str:
    """The path of a tool on PATH (or one of ``fallbacks``)."""
    path = shutil.which(name)
    if path is None:
        path = next((f for f in fallbacks if os.access(f, os.X_OK)), None)
    if path is None:
        missing(f"{name} is not installed")
        raise AssertionError("unreachable")
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 10.0, every: float = 0.01) -> None:
    """Poll ``cond`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def build_binary(out_dir: Path) -> str:
    """``$SAGA_BIN``, or the binary built from this checkout with Go."""
    env = os.environ.get("SAGA_BIN", "")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"SAGA_BIN={env} is not an executable", pytrace=False)
        return env
    go = need_tool("go", "/usr/local/go/bin/go")
    out = out_dir / "saga-supervisor"
    subprocess.run([go, "build", "-o", str(out), "./cmd/saga-supervisor"], cwd=REPO, check=True, timeout=600)
    return str(out)


class Proc:
    """A child process whose output goes to a log file."""

    def __init__(self, args: List[str], log: Path, cwd: Optional[Path] = None) -> None:
        self.args = args
        self.log = log
        self.cwd = cwd
        self.popen: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> None:
        """Start it (appending to its log)."""
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, cwd=self.cwd, stdin=subprocess.DEVNULL)

    def send(self, sig: int) -> None:
        """Send a signal, if it runs."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> Optional[int]:
        """Signal it and wait for it to end (SIGKILL after ``timeout``)."""
        p = self.popen
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.popen = None
        return p.returncode

    def tail(self, n: int = 4000) -> str:
        """The end of its log."""
        try:
            return self.log.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise AssertionError(f"configs/default.yaml no longer has {old!r}: adapt clients/python/tests/harness.py")
    return text.replace(old, new)


class Rig:
    """A supervisor (the real binary, ``run --config``) and its broker.

    ``kind`` is ``embedded`` (the supervisor's own broker) or ``mosquitto``
    (Debian's, configured by ``saga-supervisor mosquitto-config``). The
    configuration is the embedded default with the tests' agents, servos
    that move at once, and everything on free ports under ``root``.
    """

    def __init__(
        self,
        binary: str,
        kind: str,
        root: Path,
        *,
        approval_pub: Optional[Path] = None,
        tls: Optional[Tuple[Path, Path]] = None,
        shipped_paths: bool = False,
    ) -> None:
        self.binary = binary
        self.kind = kind
        self.root = root
        self.http = f"127.0.0.1:{free_port()}"
        self.broker_addr = f"127.0.0.1:{free_port()}"
        self.broker = f"tcp://{self.broker_addr}"
        self.mosquitto: Optional[Proc] = None
        token = root / "token"
        token.write_text("operator-secret-0123456789abcdef-python\n")
        token.chmod(0o600)
        self.token = token.read_text().strip()
        text = (REPO / "configs" / "default.yaml").read_text()
        changes = [("  listen: 127.0.0.1:8080", f"  listen: {self.http}")]
        if not shipped_paths:
            # shipped_paths keeps the default's ./saga-data/..., in the
            # daemon's working directory (root), as `saga-supervisor run`.
            changes += [
                ("  dir: ./saga-data/journal", f"  dir: {root / 'journal'}"),
                ("  segment_size: 16MiB", "  segment_size: 1MiB"),  # preallocated: 16 MiB a test adds up
                ("  world: ./saga-data/world", f"  world: {root / 'world'}"),
                ("  reset_token_file: ./saga-data/operator-token", f"  reset_token_file: {token}"),
                ("sim: {slew: 720}", "sim: {slew: 0}"),
                (SHIPPED_ALLOW, AGENTS_ALLOW),
                ("    password_file: ./saga-data/mqtt/passwd", f"    password_file: {root / 'mqtt' / 'passwd'}"),
                ("    credentials_dir: ./saga-data/mqtt/credentials", f"    credentials_dir: {root / 'mqtt' / 'credentials'}"),
            ]
        for old, new in changes:
            text = _replace(text, old, new)
        if kind == "embedded":
            text = _replace(text, "  listen: 127.0.0.1:1883", f"  listen: {self.broker_addr}")
            self.credentials = root / ("saga-data/mqtt/credentials" if shipped_paths else "mqtt/credentials")
        elif kind == "mosquitto":
            mq = root / "mq"
            sup = f"saga-supervisor-{DEVICE}"
            text = _replace(text, "  broker: embedded", f"  broker: {self.broker}")
            text = _replace(text, "  listen: 127.0.0.1:1883", '  listen: ""')
            text = _replace(text, '  username: ""', f"  username: {sup}")
            text = _replace(text, '  password_file: ""', f"  password_file: {mq / 'credentials' / sup}")
            self.credentials = mq / "credentials"
        else:
            raise ValueError(kind)
        if tls is not None:
            assert kind == "embedded"
            text = _replace(text, "  prefix: saga/v1\n", f"  prefix: saga/v1\n  tls:\n    cert_file: {tls[0]}\n    key_file: {tls[1]}\n")
        if approval_pub is not None:
            text = _replace(text, "  gripper:\n    kind: servo\n", "  gripper:\n    kind: servo\n    requires_approval: true\n")
            text += f"\napprovals:\n  public_keys:\n    - {approval_pub}\n  max_ttl: 5m\n"
        self.config = root / "arm.yaml"
        self.config.write_text(text)
        self.config.chmod(0o600)
        if kind == "mosquitto":
            self._setup_mosquitto()
        self.daemon = Proc([binary, "run", "--config", str(self.config)], root / "daemon.log", cwd=root)
        self.start()

    def _setup_mosquitto(self) -> None:
        mosq = need_tool("mosquitto", "/usr/sbin/mosquitto")
        mq = self.root / "mq"
        out = subprocess.run(
            [self.binary, "mosquitto-config", "--config", str(self.config), "--out", str(mq), "--listen", self.broker_addr,
             "--credentials", str(mq / "credentials")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise AssertionError(f"mosquitto-config: exit {out.returncode}\n{out.stdout}{out.stderr}")
        conf = mq / "mosquitto.conf"
        extra = "log_dest stderr\n"
        if os.getuid() == 0:
            extra += "user root\n"  # as root mosquitto would drop to a user who cannot read these files
        conf.write_text(conf.read_text() + extra)
        self.mosquitto = Proc([mosq, "-c", str(conf)], self.root / "mosquitto.log")
        self.start_broker()

    def start_broker(self) -> None:
        """Start mosquitto and wait until it listens."""
        assert self.mosquitto is not None
        self.mosquitto.start()

        host, port = self.broker_addr.rsplit(":", 1)

        def listening() -> bool:
            try:
                with socket.create_connection((host, int(port)), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_for("mosquitto to listen", listening, timeout=10)

    def start(self) -> None:
        """Start the supervisor and wait until it is ready."""
        self.daemon.start()
        wait_for("the supervisor to be ready", self.ready, timeout=20, every=0.05)

    def ready(self) -> bool:
        """GET /readyz answers 200."""
        try:
            with urllib.request.urlopen(f"http://{self.http}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def status(self) -> Dict[str, Any]:
        """GET /api/v1/status."""
        with urllib.request.urlopen(f"http://{self.http}/api/v1/status", timeout=5) as r:
            s: Dict[str, Any] = json.loads(r.read())
            return s

    def commanded(self, actuator: str) -> float:
        """What the supervisor last commanded the actuator to."""
        for a in self.status()["actuators"]:
            if a["name"] == actuator:
                return float(a["commanded"])
        raise KeyError(actuator)

    def http_reset(self) -> None:
        """Clear a halt as the operator (POST /api/v1/reset)."""
        req = urllib.request.Request(
            f"http://{self.http}/api/v1/reset",
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200

    def client(self, agent: str = "planner", **kw: Any) -> Client:
        """A client of this rig's supervisor (not yet connected)."""
        kw.setdefault("timeout", 10.0)
        return Client(self.broker, device=DEVICE, agent=agent, credentials_dir=self.credentials, **kw)

    def close(self, failed: bool) -> None:
        """Stop everything; print the logs if the test failed, else remove
        the journal (pytest keeps the temporary directories of the last
        runs)."""
        self.daemon.stop()
        if self.mosquitto is not None:
            self.mosquitto.stop()
        if not failed:
            shutil.rmtree(self.root / "journal", ignore_errors=True)
            shutil.rmtree(self.root / "saga-data" / "journal", ignore_errors=True)
        if failed:
            sys.stderr.write(f"--- supervisor log (end):\n{self.daemon.tail()}\n")
            if self.mosquitto is not None:
                sys.stderr.write(f"--- mosquitto log (end):\n{self.mosquitto.tail()}\n")


def child_env() -> Dict[str, str]:
    """The environment of a child Python that imports this saga_supervisor."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PKG_SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env

"""The client against the real supervisor, on its embedded broker and on
mosquitto set up by ``saga-supervisor mosquitto-config`` (the ``rig``
fixture runs each test on both)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from harness import DEVICE, Rig, child_env, need_tool, wait_for

import saga_supervisor as ss


def next_rollback(w: ss.Watch, saga: int, timeout: float = 10.0) -> ss.RollbackReport:
    """The report of saga's unwind, from the events topic."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        u = w.get(timeout=max(0.0, deadline - time.monotonic()))
        if u is not None and u.event is not None and u.event.kind == "rollback" and u.event.report is not None and u.event.report.saga == saga:
            return u.event.report
    raise AssertionError(f"no rollback event for saga {saga} within {timeout:g}s")


def test_saga_commits(rig: Rig) -> None:
    with rig.client("planner", ttl=2.0) as c:
        lease = c.lease
        assert lease is not None and lease.id and lease.epoch > 0
        assert lease.ttl == 2.0 and 0 < lease.heartbeat <= lease.ttl / 3, lease
        assert c.connected and c.tcp_nodelay, "TCP_NODELAY is set on the socket"
        with c.saga() as s:
            r = s.step("elbow", 30)
            assert r == ss.StepResult(step=1, value=30.0, prior=20.0, requested=30.0, clamped=False)
            r = s.step("shoulder", 60.5, deadline=0.5)
            assert (r.step, r.prior) == (2, 10.0)
        assert s.committed and not s.is_open and s.report is None
        assert rig.commanded("elbow") == 30 and rig.commanded("shoulder") == 60.5
        with pytest.raises(ss.SagaEndedError):
            s.step("elbow", 31)
        assert not rig.status()["open_sagas"]
        # Heartbeats keep a lease of 2 s alive well past it.
        time.sleep(2.5)
        with c.saga() as s2:
            s2.step("base", 5)
        assert any(lease_["agent"] == "planner" for lease_ in rig.status()["leases"])
    # bye ended the lease; the clean disconnect sent no will.
    wait_for("planner's lease to end", lambda: not rig.status()["leases"])
    assert rig.commanded("base") == 5


def test_refused_step_and_unwind(rig: Rig) -> None:
    with rig.client("planner") as c, c.watch() as w:
        first = w.get(timeout=5)
        assert first is not None and first.status is not None and first.status.state == "online" and first.retained
        # A step over the limit is refused: nothing moved, the saga goes on.
        with pytest.raises(RuntimeError, match="the plan failed") as raised:
            with c.saga() as s:
                s.step("base", 45)
                s.step("elbow", 90)
                with pytest.raises(ss.LimitError) as refused:
                    s.step("elbow", 500)
                e = refused.value
                assert (e.code, e.op, e.refusal, e.report) == ("LIMIT_MAX", "step", True, None) and "elbow" in e.message
                assert e.request_id is not None and e.request_id.startswith("planner-")
                assert rig.commanded("elbow") == 90, "a refused step moved nothing"
                with pytest.raises(ss.StepRefusedError) as unknown:
                    s.step("tail", 1)
                assert unknown.value.code == "ACTUATOR_UNKNOWN"
                s.step("gripper", 30)
                raise RuntimeError("the plan failed")
        # The exception went on; the saga was aborted and unwound on its way.
        report = s.report
        assert report is not None and not s.is_open and not s.committed
        assert report.clean and report.verdict == "clean" and report.reason.startswith("RuntimeError: the plan failed")
        assert [(x.step, x.actuator, x.prior, x.target) for x in report.steps] == [(3, "gripper", 0.0, 30.0), (2, "elbow", 20.0, 90.0), (1, "base", 0.0, 45.0)]
        assert [x.step for x in report.compensated] == [3, 2, 1] and not report.not_back
        assert report.count(ss.COMPENSATED) == 3 and report.count(ss.UNRESOLVED) == 0
        if sys.version_info >= (3, 11):
            assert f"saga {s.id} aborted: clean" in getattr(raised.value, "__notes__", [])
        assert (rig.commanded("base"), rig.commanded("elbow"), rig.commanded("gripper")) == (0, 20, 0)
        # The same report is published on events.
        assert next_rollback(w, s.id) == report
        # abort() returns the report; an empty saga's is clean too.
        s2 = c.begin()
        assert s2.abort("nothing done").clean
        with pytest.raises(ss.SagaEndedError):
            s2.commit()


def test_controller_killed_its_will_unwinds(rig: Rig, tmp_path: Path) -> None:
    """A controller process killed with SIGKILL mid-saga: the broker publishes
    its will, and the supervisor unwinds its saga at once, long before the
    lease's TTL (30 s) would have."""
    script = tmp_path / "controller.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            import saga_supervisor as ss
            broker, creds = sys.argv[1], sys.argv[2]
            client = ss.Client(broker, device="arm1", agent="planner", credentials_dir=creds, ttl=30.0).connect()
            saga = client.begin()
            saga.step("elbow", 100)
            saga.step("base", -30)
            print("holding", saga.id, flush=True)
            time.sleep(120)
            """
        )
    )
    with rig.client("ctl", no_lease=True) as watcher, watcher.watch() as w:
        child = subprocess.Popen(
            [sys.executable, str(script), rig.broker, str(rig.credentials)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env(), text=True
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("holding "), line + child.stdout.read()
            saga = int(line.split()[1])
            assert rig.commanded("elbow") == 100 and rig.commanded("base") == -30
            killed = time.monotonic()
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            report = next_rollback(w, saga, timeout=10)
            took = time.monotonic() - killed
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert report.agent == "planner" and report.clean, report
        assert [x.actuator for x in report.compensated] == ["base", "elbow"]
        assert took < 10, f"the unwind came {took:.1f}s after the kill: the TTL, not the will"
        assert rig.commanded("elbow") == 20 and rig.commanded("base") == 0
        wait_for("planner's lease to end", lambda: not rig.status()["leases"])


def test_stalled_heartbeat_loses_the_lease(rig: Rig) -> None:
    """The heartbeat thread stalls: the supervisor expires the lease and
    unwinds the saga; the loss surfaces through on_lease_lost and as an
    exception on the next call, and a new hello carries on."""
    lost: List[ss.LeaseLostError] = []
    called = threading.Event()

    def on_lost(e: ss.LeaseLostError) -> None:
        lost.append(e)
        called.set()

    with rig.client("planner", ttl=0.3, on_lease_lost=on_lost) as c, c.watch() as w:
        s = c.begin()
        s.step("elbow", 70)
        time.sleep(1.0)  # three TTLs on heartbeats: the lease lives
        s.step("elbow", 71)
        c._hb_gate.clear()  # the heartbeat thread stalls before its next heartbeat
        report = next_rollback(w, s.id, timeout=10)
        assert report.clean and "expired" in report.reason, report
        assert rig.commanded("elbow") == 20
        with pytest.raises(ss.LeaseLostError) as e:
            s.step("elbow", 72)
        assert not s.is_open
        assert called.wait(5) and len(lost) == 1 and lost[0] is c.lease_error
        assert e.value.code in (None, "LEASE_EXPIRED")
        with pytest.raises(ss.LeaseLostError):
            c.begin()
        c._hb_gate.set()
        time.sleep(0.3)  # the thread runs again; it does not revive the lease
        assert c.lease_error is not None and len(lost) == 1
        # A new lease, taken explicitly.
        old = c.lease
        lease = c.hello()
        assert old is not None and lease.epoch > old.epoch and c.lease_error is None
        with pytest.raises(ss.SagaEndedError, match="ended with its lease"):
            s.commit()
        with c.saga() as s2:
            s2.step("elbow", 73)
            time.sleep(1.0)
        assert rig.commanded("elbow") == 73 and len(lost) == 1


def test_replayed_request_id(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    with rig.client("planner", retry_interval=0.3) as c:
        s = c.begin()
        # Sent twice with one id: the second gets the first reply; the step ran once.
        first = c.request("step", request_id="py-replay-1", saga=s.id, actuator="elbow", value=60)
        again = c.request("step", request_id="py-replay-1", saga=s.id, actuator="elbow", value=60)
        assert first == again and (first["step"], first["prior"]) == (1, 20)
        # The id reused for another request: DUPLICATE_ID, nothing moved.
        with pytest.raises(ss.SagaError) as dup:
            c.request("step", request_id="py-replay-1", saga=s.id, actuator="elbow", value=61)
        assert dup.value.code == "DUPLICATE_ID" and dup.value.refusal
        assert rig.commanded("elbow") == 60
        # A lost reply: the client sends the step again with its id and
        # takes the first reply; the step ran once.
        dropped: List[bytes] = []
        published: Dict[str, int] = {}
        on_reply = c._on_reply
        publish = c._mc.publish

        def lossy(payload: bytes) -> None:
            if b'"step":2' in payload and not dropped:
                dropped.append(payload)
                return
            on_reply(payload)

        def counting(topic: str, payload: bytes, *a: Any, **kw: Any) -> Any:
            if b'"op":"step"' in payload:
                published[payload.decode()] = published.get(payload.decode(), 0) + 1
            return publish(topic, payload, *a, **kw)

        monkeypatch.setattr(c, "_on_reply", lossy)
        monkeypatch.setattr(c._mc, "publish", counting)
        r = s.step("elbow", 65)
        assert dropped, "the first reply was not dropped"
        assert (r.step, r.prior) == (2, 60), r
        assert list(published.values()) == [2], published
        assert s.step("elbow", 66).step == 3, "the replayed step ran once"
        s.commit()
        assert rig.commanded("elbow") == 66


def test_halt_under_another_agents_load(rig: Rig) -> None:
    """loader keeps the supervisor busy with three sagas stepping as fast as
    they can; planner's halt is answered at once all the same, and every
    command after it is refused HALTED."""
    with rig.client("loader", ttl=5.0) as loader, rig.client("planner", no_lease=True) as planner:
        steps = [0]
        ended: List[BaseException] = []
        stop = threading.Event()

        def load(actuator: str) -> None:
            try:
                s = loader.begin()
                v = 0.0
                while not stop.is_set():
                    v = 10.0 if v == 20.0 else 20.0
                    s.step(actuator, v)
                    steps[0] += 1
            except ss.SagaSupervisorError as e:
                ended.append(e)

        threads = [threading.Thread(target=load, args=(a,)) for a in ("base", "shoulder", "gripper")]
        for t in threads:
            t.start()
        try:
            wait_for("the load to run", lambda: steps[0] >= 100 or bool(ended), timeout=20)
            assert not ended and all(t.is_alive() for t in threads), f"the load is not running: {ended}"
            t0 = time.monotonic()
            planner.halt("python test: halt under load")
            took = time.monotonic() - t0
            for t in threads:
                t.join(10)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert took < 2.0, f"the halt took {took:.3f}s under load"
        st = planner.status()
        assert st["halted"] is True and st["ready"] is False
        assert len(ended) == 3 and all(isinstance(e, (ss.HaltedError, ss.SagaEndedError)) for e in ended), ended
        assert any(isinstance(e, ss.HaltedError) for e in ended), ended
        with pytest.raises(ss.HaltedError):
            loader.begin()
        with pytest.raises(ss.ForbiddenError):
            planner.reset(rig.token)  # reset over MQTT is off by default
        rig.http_reset()
        wait_for("the supervisor to be ready again", rig.ready)


def test_reconnect_after_a_broker_restart(rig: Rig) -> None:
    """The broker goes away and comes back. On mosquitto it crashes
    (SIGKILL: no wills) and restarts within the lease's TTL: the client
    reconnects on its own, a step sent while it was down goes out after
    the reconnect, and the lease and its saga carry on. The embedded broker
    restarts with its supervisor, which ends every lease: the client
    reconnects, the next call says LeaseLostError, and a new hello works."""
    lost = threading.Event()
    with rig.client("planner", ttl=10.0, on_lease_lost=lambda e: lost.set()) as c:
        s = c.begin()
        s.step("elbow", 40)
        if rig.kind == "mosquitto":
            assert rig.mosquitto is not None
            rig.mosquitto.stop(signal.SIGKILL)
            wait_for("the client to see the connection drop", lambda: not c.connected)
            result: List[Any] = []
            t = threading.Thread(target=lambda: result.append(s.step("elbow", 50, timeout=15)))
            t.start()
            time.sleep(0.5)  # the step waits for the connection
            assert not result
            rig.start_broker()
            t.join(20)
            assert result and result[0].step == 2 and result[0].prior == 40, result
            assert c.connected and c.lease_error is None and not lost.is_set()
            s.step("elbow", 55)
            s.commit()
            assert rig.commanded("elbow") == 55
        else:
            w = c.watch()
            rig.daemon.stop()
            wait_for("the client to see the connection drop", lambda: not c.connected)
            # The supervisor unwound the saga on its way down.
            assert next_rollback(w, s.id, timeout=5).clean
            rig.start()
            wait_for("the client to reconnect", lambda: c.connected, timeout=15)
            with pytest.raises(ss.LeaseLostError):
                s.step("elbow", 50)
            assert lost.wait(5)
            assert not rig.status()["open_sagas"]
            c.hello()
            with c.saga() as s2:
                s2.step("elbow", 45)
            assert rig.commanded("elbow") == 45
        assert c.status()["ready"] is True


def test_login(rig: Rig, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    with pytest.raises(ss.LoginRefusedError):
        ss.Client(rig.broker, device=DEVICE, agent="planner", password_file=wrong, timeout=5).connect()
    with pytest.raises(ss.LoginRefusedError):
        ss.Client(rig.broker, device=DEVICE, agent="planner", timeout=5).connect()
    with pytest.raises(ss.LoginRefusedError):
        ss.Client(rig.broker, device=DEVICE, agent="stranger", credentials_dir=rig.credentials, timeout=5).connect()
    # A second connection of one agent, client id <agent>/<tag>, beside its
    # lease-holding first (the embedded broker; mosquitto makes every
    # client id the username, so a login has one connection there).
    if rig.kind == "embedded":
        with rig.client("planner") as c, rig.client("planner", tag="watch", no_lease=True) as w:
            assert w.client_id == "planner/watch" and w.lease is None
            assert w.status()["ready"] is True
            with pytest.raises(ss.LeaseError):
                w.begin()
            with c.saga() as s:
                s.step("elbow", 25)


def test_approval_attached_to_a_step(binary: str, tmp_path: Path) -> None:
    """The gripper requires an operator's approval: a step without one is
    refused; one carrying a token `ctl approve` signed moves it, once."""
    key = tmp_path / "operator.key"
    subprocess.run([binary, "ctl", "keygen", "--out", str(key)], check=True, capture_output=True, timeout=30)
    (tmp_path / "rig").mkdir()
    rig = Rig(binary, "embedded", tmp_path / "rig", approval_pub=Path(str(key) + ".pub"))
    failed = True
    try:

        def approve(saga: int, value: float) -> str:
            out = subprocess.run(
                [binary, "ctl", "approve", "--key", str(key), "--saga", str(saga), "--actuator", "gripper", "--value", repr(value), "--device", DEVICE],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
            return out.stdout.strip()

        with rig.client("planner") as c, c.saga() as s:
            with pytest.raises(ss.ApprovalError) as e:
                s.step("gripper", 30)
            assert e.value.code == "APPROVAL_REQUIRED" and rig.commanded("gripper") == 0
            token = approve(s.id, 30)
            with pytest.raises(ss.ApprovalError) as e:
                s.step("gripper", 31, approval=token)
            assert e.value.code == "APPROVAL_MISMATCH"
            assert s.step("gripper", 30, approval=token).step == 1
            assert rig.commanded("gripper") == 30
            with pytest.raises(ss.ApprovalError) as e:
                s.step("gripper", 30, approval=token)
            assert e.value.code == "APPROVAL_REPLAYED"
        failed = False
    finally:
        rig.close(failed)


def test_tls(binary: str, tmp_path: Path) -> None:
    """ssl:// to the embedded broker's TLS listener, verified with a CA."""
    openssl = need_tool("openssl")
    ca_key, ca, key, csr, cert = (tmp_path / n for n in ("ca.key", "ca.pem", "broker.key", "broker.csr", "broker.pem"))
    run: Callable[..., Any] = lambda *a: subprocess.run([openssl, *a], check=True, capture_output=True, timeout=60)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=saga test CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = tmp_path / "ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))
    key.chmod(0o600)
    (tmp_path / "rig").mkdir()
    rig = Rig(binary, "embedded", tmp_path / "rig", tls=(cert, key))
    failed = True
    try:
        url = rig.broker.replace("tcp://", "ssl://")
        with ss.Client(url, device=DEVICE, agent="planner", credentials_dir=rig.credentials, ca_file=ca, timeout=10) as c:
            assert c.tcp_nodelay
            with c.saga() as s:
                s.step("elbow", 33)
        assert rig.commanded("elbow") == 33
        # Without the CA the broker's certificate does not verify.
        with pytest.raises(ss.ConnectionLostError):
            ss.Client(url, device=DEVICE, agent="planner", credentials_dir=rig.credentials, timeout=3).connect()
        failed = False
    finally:
        rig.close(failed)


def test_watch_sees_state_and_events(rig: Rig) -> None:
    with rig.client("planner") as c:
        with c.watch() as w:
            states: Dict[str, Optional[float]] = {}
            status: Optional[ss.Status] = None
            deadline = time.monotonic() + 5
            while (status is None or len(states) < 4) and time.monotonic() < deadline:
                u = w.get(timeout=1)
                if u is None:
                    continue
                if u.status is not None:
                    status = u.status
                if u.state is not None:
                    states[u.state.actuator] = u.state.commanded
            assert status is not None and status.ready and not status.halted and status.seq > 0
            assert states == {"base": 0, "shoulder": 10, "elbow": 20, "gripper": 0}
            with c.saga() as s:
                s.step("elbow", 44)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                u = w.get(timeout=1)
                if u is not None and u.state is not None and u.state.actuator == "elbow" and u.state.commanded == 44:
                    break
            else:
                raise AssertionError("no state update for the elbow")
        # A second watch starts with what the client already knows.
        with c.watch() as w2:
            first = [w2.get(timeout=2) for _ in range(5)]
            assert [u.kind if u is not None else None for u in first] == ["status"] + ["state"] * 4
        assert list(w2) == [], "a closed watch ends"
    # Closing the client ends its watches, after what they hold.
    w3 = c.watch  # the client is closed: a watch cannot start
    with pytest.raises(ss.ClientClosedError):
        w3()

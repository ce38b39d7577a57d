"""Tests that need no supervisor: the code table against docs/API.md, the
encoding against docs/API.md's examples (which the Go tests hold equal to
what Go encodes), reports, URLs, secret files, paho's version switch."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest
from harness import REPO

import saga_supervisor as ss
from saga_supervisor import _paho, _wire
from saga_supervisor.errors import CODES, error_for_code


def api_doc() -> str:
    return (REPO / "docs" / "API.md").read_text()


def documented_codes() -> List[str]:
    """The codes of docs/API.md's table, in order."""
    doc = api_doc()
    section = doc[doc.index("\n## Codes\n") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^\| `([A-Z_]+)` \|", section, re.M)


def test_every_documented_code_has_a_family() -> None:
    codes = documented_codes()
    assert len(codes) > 40, codes
    assert sorted(codes) == sorted(CODES), "the client's table (errors.CODES) and docs/API.md's code table differ"


def test_families() -> None:
    cases: Dict[str, type] = {
        "LIMIT_MAX": ss.LimitError,
        "SUPPLY_LOW": ss.SupplyError,
        "ACTUATOR_BUSY": ss.StepRefusedError,
        "LEASE_EXPIRED": ss.LeaseLostError,
        "TOO_MANY_LEASES": ss.LeaseError,
        "SAGA_UNKNOWN": ss.SagaEndedError,
        "DUPLICATE_ID": ss.SagaError,
        "HALTED": ss.HaltedError,
        "NOT_READY": ss.NotReadyError,
        "FORBIDDEN": ss.ForbiddenError,
        "NO_OPERATOR_TOKEN": ss.ForbiddenError,
        "UNAUTHORIZED": ss.UnauthorizedError,
        "RATE_LIMITED": ss.BackOffError,
        "APPROVAL_REPLAYED": ss.ApprovalError,
        "APPROVALS_FULL": ss.BackOffError,
        "BAD_REQUEST": ss.RequestError,
        "STEP_IN_DOUBT": ss.StepFailedError,
        "INTERNAL": ss.InternalError,
        "A_CODE_FROM_THE_FUTURE": ss.InternalError,
    }
    for code, cls in cases.items():
        e = error_for_code(code, "why", op="step", request_id="7")
        assert isinstance(e, cls) and isinstance(e, ss.SagaSupervisorError), code
        assert e.code == code and e.message == "why" and e.request_id == "7"
        assert str(e) == f"step: {code}: why"
    # A failed step ends its saga; it moved something, so it is no refusal.
    failed = error_for_code("STEP_FAILED", "x")
    assert isinstance(failed, ss.SagaEndedError) and not failed.refusal
    assert error_for_code("LIMIT_MIN", "x").refusal
    assert not error_for_code("INTERNAL", "x").refusal
    assert not error_for_code("A_CODE_FROM_THE_FUTURE", "x").refusal
    assert isinstance(ss.ReplyTimeoutError("x"), TimeoutError)
    assert isinstance(ss.ConnectionLostError("x"), ConnectionError)


def doc_requests() -> List[str]:
    """Every request example of docs/API.md's fenced blocks (lines built by
    the shell with $ left out, as api/codes_test.go does)."""
    out = []
    fenced = False
    for line in api_doc().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            continue
        i = line.find("{")
        if not fenced or i < 0 or "$" in line:
            continue
        text = line[i : line.rfind("}") + 1]
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict) and "op" in obj and "kind" not in obj:
            out.append(text)
    return out


def test_requests_encode_as_go_does() -> None:
    reqs = doc_requests()
    assert len(reqs) >= 10
    ops = set()
    for text in reqs:
        req: Dict[str, Any] = json.loads(text)
        ops.add(req["op"])
        assert _wire.encode_request(req).decode() == text
    assert ops == set(_wire.OP_FIELDS), "docs/API.md shows an op this client does not know, or lacks one"


# What Go's encoding/json writes for each float64 (go run of json.Marshal).
GO_FLOATS = {
    30.0: "30",
    75.5: "75.5",
    -0.0: "-0",
    1e-7: "1e-7",
    -1.5e-7: "-1.5e-7",
    1e21: "1e+21",
    1.5e300: "1.5e+300",
    1e20: "100000000000000000000",
    123456789012345678.0: "123456789012345680",
    1e-5: "0.00001",
    2.5e-6: "0.0000025",
    1e-6: "0.000001",
    0.1: "0.1",
    5e-324: "5e-324",
    1.7976931348623157e308: "1.7976931348623157e+308",
    1e16: "10000000000000000",
}


def test_numbers_encode_as_go_does() -> None:
    for v, want in GO_FLOATS.items():
        assert _wire.go_float(v) == want, v
        assert float(want) == v


@pytest.mark.parametrize(
    "req, code",
    [
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "elbow", "value": math.nan}, "NOT_FINITE"),
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "elbow", "value": 10**400}, "NOT_FINITE"),
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "elbow", "value": True}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "a/b", "value": 1}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "elbow", "value": 1, "deadline_ms": 60001}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "commit", "lease": "L", "epoch": 1, "saga": 1, "deadline_ms": 5}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "abort", "lease": "L", "epoch": 1, "saga": 1, "reason": "two\nlines"}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "abort", "lease": "L", "epoch": 1, "saga": 1.0}, "BAD_REQUEST"),
        ({"id": "", "agent": "me", "op": "status"}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "jump"}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "step", "lease": "L", "epoch": 1, "saga": 1, "actuator": "elbow", "value": 1, "approval": "x" * 513}, "BAD_REQUEST"),
        ({"id": "1", "agent": "me", "op": "halt", "reason": "é" * 129}, "BAD_REQUEST"),
    ],
)
def test_refused_before_sending(req: Dict[str, Any], code: str) -> None:
    with pytest.raises(ss.RequestError) as e:
        _wire.encode_request(req)
    assert e.value.code == code and e.value.request_id is None and e.value.message.startswith("not sent: ")


def report(listed: List[str], **summary: Any) -> ss.RollbackReport:
    steps = [
        {"step": i + 1, "actuator": "elbow", "prior": 1, "target": 2, "outcome": "applied", "bucket": b, "attempts": 1}
        for i, b in enumerate(listed)
    ]
    return ss.RollbackReport.from_json({"saga": 7, "agent": "me", "order": "retrace", "verdict": "clean", "steps": steps, **summary})


def test_clean_is_derived_from_the_buckets() -> None:
    assert report([]).clean and report(["compensated", "compensated"]).clean
    # The wire's verdict says clean; a step that is not back says otherwise.
    for bucket in ("fallback_safe", "compensation_failed", "orphaned", "unresolved", "a_new_bucket"):
        r = report(["compensated", bucket])
        assert not r.clean and r.verdict == "partial", bucket
        assert [s.step for s in r.not_back] == [2]
    r = report(["compensated", "fallback_safe", "unresolved", "unresolved"])
    assert [len(r.compensated), len(r.fallback_safe), len(r.compensation_failed), len(r.orphaned), len(r.unresolved)] == [1, 1, 0, 0, 2]
    assert r.count("unresolved") == 2
    # A summary: the counts speak for the steps not listed.
    s = report(["compensated"], truncated=True, steps_total=1000, steps_omitted=999, buckets={"compensated": 995, "unresolved": 5})
    assert not s.clean and s.count("unresolved") == 5 and s.count("compensated") == 995
    s = report(["compensated"], truncated=True, steps_total=1000, steps_omitted=999, buckets={"compensated": 1000})
    assert s.clean
    s = report(["compensated"], truncated=True, steps_total=1000, steps_omitted=998, buckets={"compensated": 1000})
    assert not s.clean, "counts that do not add up read as partial"
    assert "verdict" not in ss.RollbackReport.__dataclass_fields__, "the verdict is derived, never stored"


def test_the_documented_reports_read_as_documented() -> None:
    """Every report in docs/API.md reads with the verdict it carries."""
    seen = 0
    for line in api_doc().split("\n"):
        i = line.find('"report":')
        if i < 0 or not line.startswith("{"):
            continue
        obj = json.loads(line)
        raw = obj["report"]
        r = ss.RollbackReport.from_json(raw)
        assert r.verdict == raw["verdict"], line
        seen += 1
    assert seen >= 3


def test_broker_urls() -> None:
    assert _wire.parse_broker_url("tcp://127.0.0.1:1883") == _wire.BrokerURL("127.0.0.1", 1883, False)
    assert _wire.parse_broker_url("mqtt://robot") == _wire.BrokerURL("robot", 1883, False)
    assert _wire.parse_broker_url("ssl://robot") == _wire.BrokerURL("robot", 8883, True)
    assert _wire.parse_broker_url("mqtts://robot:9999") == _wire.BrokerURL("robot", 9999, True)
    assert _wire.parse_broker_url("tcp://[::1]:1883") == _wire.BrokerURL("::1", 1883, False)
    for bad in ("ws://robot/mqtt", "robot:1883", "tcp://u:p@robot:1883", "tcp://robot:1883/x", "tcp://:1883", "tcp://robot:99999"):
        with pytest.raises(ValueError):
            _wire.parse_broker_url(bad)


def test_client_arguments() -> None:
    with pytest.raises(ValueError):
        ss.Client(device="arm1", agent="a/b")
    with pytest.raises(ValueError):
        ss.Client(device="arm+1", agent="planner")
    with pytest.raises(ValueError):
        ss.Client(device="arm1", agent="planner", tag="x/y")
    with pytest.raises(ValueError):
        ss.Client(device="arm1", agent="planner", password="a", password_file="b")
    with pytest.raises(ValueError):
        ss.Client("tcp://127.0.0.1:1883", device="arm1", agent="planner", ca_file="ca.pem")
    with pytest.raises(ValueError):
        ss.Client(device="arm1", agent="planner", ttl=0)
    c = ss.Client(device="arm1", agent="planner", tag="watch")
    assert c.client_id == "planner/watch" and c.topics.will("planner") == "saga/v1/arm1/will/planner"
    assert re.fullmatch(r"w[0-9a-f]{24}", c.will) and _wire.name_problem(c.will) is None
    assert ss.Client(device="arm1", agent="planner").will != c.will, "a will token is fresh for each client"


def test_secret_files(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text("s3cret\n")
    f.chmod(0o600)
    assert _wire.read_secret_file(str(f)) == "s3cret"
    f.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        _wire.read_secret_file(str(f))
    f.chmod(0o600)
    f.write_text("one\ntwo\n")
    with pytest.raises(ValueError, match="more than one line"):
        _wire.read_secret_file(str(f))
    with pytest.raises(OSError):
        _wire.read_secret_file(str(tmp_path / "missing"))
    # A client whose password file is not private refuses to use it.
    f.write_text("s3cret\n")
    f.chmod(0o640)
    with pytest.raises(ss.LoginRefusedError, match="group or others"):
        ss.Client(device="arm1", agent="planner", password_file=f).connect()


def test_paho_version_switch() -> None:
    import paho.mqtt

    assert _paho.PAHO_VERSION[:2] == tuple(int(x) for x in paho.mqtt.__version__.split(".")[:2])
    assert _paho.PAHO2 == (_paho.PAHO_VERSION[0] >= 2)
    assert _paho._version("2.1.0") == (2, 1, 0) and _paho._version("1.6.1") == (1, 6, 1) and _paho._version("2.0.0rc2") == (2, 0, 0)

    class Nothing:
        def on_connected(self, rc: int) -> None:
            pass

        def on_disconnected(self, rc: int) -> None:
            pass

        def on_subscribed(self, mid: int, granted: List[int]) -> None:
            pass

        def on_message(self, topic: str, payload: bytes, retained: bool) -> None:
            pass

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # paho 2.x warns when given callback API version 1
        mc = _paho.new_client("planner", Nothing())
    assert mc.on_connect is not None and mc.on_disconnect is not None and mc.on_subscribe is not None

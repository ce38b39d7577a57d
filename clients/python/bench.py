#!/usr/bin/env python3
"""A step's round trip through the Python client, beside the Go client's.

One supervisor (the real binary, its embedded broker, the default
configuration with servos that move at once) serves three controllers in
turn, round after round, so that all three figures come from the same
daemon in the same run:

  go client       the Go client (package client), in clients/python/benchgo
  python client   this package: Saga.step
  python paho     paho-mqtt alone, publishing a ready-encoded step and
                  waiting for its reply: what paho and its network thread
                  cost before this package adds anything

Each round runs each controller once, in an order that alternates, for
--n timed steps after --warmup untimed ones, toggling the elbow between two
values. The ratios are the Python figures over the Go client's at the same
percentile; the spread of the per-round p50 ratios says how noisy the
machine was. Both durability modes are measured: every-step (the default:
each step's intent is fdatasync'd before it moves) and first-touch (only a
saga's first intent per actuator waits for the disk), where the disk weighs
less and the clients more.

    make python-bench
    SAGA_BIN=bin/saga-supervisor PYTHONPATH=clients/python/src python3 clients/python/bench.py --rounds 5 --n 400
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import saga_supervisor as ss
from saga_supervisor import _paho, _wire

REPO = Path(__file__).resolve().parents[2]
DEVICE = "arm1"
ACTUATOR = "elbow"
LO, HI = 30.0, 31.0
TTL = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def go_tool() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(go, os.X_OK):
        sys.exit("bench: Go is needed to build the Go client's half (clients/python/benchgo)")
    return go


class Daemon:
    """The supervisor on its embedded broker, in a temporary directory."""

    def __init__(self, binary: str, root: Path, durability: str) -> None:
        self.root = root
        self.http = f"127.0.0.1:{free_port()}"
        self.broker = f"tcp://127.0.0.1:{free_port()}"
        text = (REPO / "configs" / "default.yaml").read_text()
        for old, new in [
            ("  dir: ./saga-data/journal", f"  dir: {root / 'journal'}"),
            ("  world: ./saga-data/world", f"  world: {root / 'world'}"),
            ("  listen: 127.0.0.1:8080", f"  listen: {self.http}"),
            ("  listen: 127.0.0.1:1883", f"  listen: {self.broker[len('tcp://'):]}"),
            ("  durability: every-step", f"  durability: {durability}"),
            ("sim: {slew: 720}", "sim: {slew: 0}"),
            # The agents' rate limits are lifted to the bounds: a round trip
            # is measured here, not the limiter (1000 steps/s by default).
            ("  rate: 1000 ", "  rate: 100000 "),
            ("  burst: 200 ", "  burst: 100000 "),
            ("    planner: {}      # the demo's controller: everything but reset\n", "    planner: {}\n    raw: {}\n"),
            ("    password_file: ./saga-data/mqtt/passwd", f"    password_file: {root / 'mqtt' / 'passwd'}"),
            ("    credentials_dir: ./saga-data/mqtt/credentials", f"    credentials_dir: {root / 'mqtt' / 'credentials'}"),
        ]:
            if old not in text:
                sys.exit(f"bench: configs/default.yaml no longer has {old!r}: adapt clients/python/bench.py")
            text = text.replace(old, new)
        cfg = root / "bench.yaml"
        cfg.write_text(text)
        self.credentials = root / "mqtt" / "credentials"
        self.log = open(root / "daemon.log", "wb")
        self.proc = subprocess.Popen([binary, "run", "--config", str(cfg)], cwd=root, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.ready():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                sys.exit(f"bench: the supervisor did not get ready:\n{(root / 'daemon.log').read_text()[-3000:]}")
            time.sleep(0.05)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def go_round(benchgo: str, d: Daemon, n: int, warmup: int) -> List[int]:
    out = subprocess.run(
        [benchgo, "--broker", d.broker, "--device", DEVICE, "--agent", "ctl", "--password-file", str(d.credentials / "ctl"),
         "--actuator", ACTUATOR, "--lo", str(LO), "--hi", str(HI), "--n", str(n), "--warmup", str(warmup)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if out.returncode != 0:
        sys.exit(f"bench: benchgo: {out.stderr}")
    samples: List[int] = json.loads(out.stdout)["samples_ns"]
    return samples


def py_round(c: ss.Client, n: int, warmup: int) -> List[int]:
    samples: List[int] = []
    clock = time.perf_counter_ns
    with c.saga() as s:
        for i in range(warmup + n):
            v = HI if i % 2 else LO
            t0 = clock()
            s.step(ACTUATOR, v)
            t1 = clock()
            if i >= warmup:
                samples.append(t1 - t0)
    return samples


class RawPaho:
    """paho alone: hello, begin, then each step published ready-encoded and
    its reply awaited on an Event that the network thread sets."""

    def __init__(self, d: Daemon) -> None:
        self.topics = ss.Topics(prefix=ss.DEFAULT_PREFIX, device=DEVICE)
        self.reply: Dict[str, Any] = {}
        self.got = threading.Event()
        self.subscribed = threading.Event()
        self.mc = _paho.new_client("raw", self)
        self.mc.username_pw_set("raw", (d.credentials / "raw").read_text().strip())
        url = _wire.parse_broker_url(d.broker)
        self.mc.connect(url.host, url.port, keepalive=30)
        self.mc.loop_start()
        if not self.subscribed.wait(10):
            sys.exit("bench: the raw paho client did not connect")
        self.n = 0

    def on_connected(self, rc: int) -> None:
        _paho.set_nodelay(self.mc)
        self.mc.subscribe(self.topics.reply("raw"), 1)

    def on_disconnected(self, rc: int) -> None:
        pass

    def on_subscribed(self, mid: int, granted: List[int]) -> None:
        self.subscribed.set()

    def on_message(self, topic: str, payload: bytes, retained: bool) -> None:
        self.reply = json.loads(payload)
        self.got.set()

    def call(self, req: Dict[str, Any]) -> Dict[str, Any]:
        self.n += 1
        req = {"id": f"raw-{self.n}", "agent": "raw", **req}
        self.got.clear()
        self.mc.publish(self.topics.cmd("raw"), json.dumps(req, separators=(",", ":")), qos=1)
        if not self.got.wait(10):
            sys.exit(f"bench: no reply to {req}")
        if not self.reply.get("ok"):
            sys.exit(f"bench: {req['op']} refused: {self.reply}")
        return self.reply

    def round(self, n: int, warmup: int) -> List[int]:
        hello = self.call({"op": "hello", "ttl_ms": int(TTL * 1000)})
        lease = {"lease": hello["lease"], "epoch": hello["epoch"]}
        saga = self.call({"op": "begin", **lease})["saga"]
        payloads = []
        for i in range(warmup + n):
            self.n += 1
            req = {"id": f"raw-{self.n}", "agent": "raw", "op": "step", **lease, "saga": saga, "actuator": ACTUATOR, "value": HI if i % 2 else LO}
            payloads.append(json.dumps(req, separators=(",", ":")).encode())
        topic = self.topics.cmd("raw")
        samples: List[int] = []
        clock = time.perf_counter_ns
        for i, p in enumerate(payloads):
            self.got.clear()
            t0 = clock()
            self.mc.publish(topic, p, qos=1)
            if not self.got.wait(10):
                sys.exit("bench: a raw step got no reply")
            t1 = clock()
            if not self.reply.get("ok"):
                sys.exit(f"bench: a raw step was refused: {self.reply}")
            if i >= warmup:
                samples.append(t1 - t0)
        self.call({"op": "commit", **lease, "saga": saga})
        self.call({"op": "bye", **lease})
        return samples

    def close(self) -> None:
        self.mc.disconnect()
        self.mc.loop_stop()


def pct(samples: List[int], q: float) -> int:
    s = sorted(samples)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e3:.0f}µs"


def measure(binary: str, benchgo: str, durability: str, rounds: int, n: int, warmup: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="saga-pybench-") as tmp:
        d = Daemon(binary, Path(tmp), durability)
        try:
            client = ss.Client(d.broker, device=DEVICE, agent="planner", credentials_dir=d.credentials, ttl=TTL).connect()
            raw = RawPaho(d)
            runs: Dict[str, Callable[[], List[int]]] = {
                "go client": lambda: go_round(benchgo, d, n, warmup),
                "python client": lambda: py_round(client, n, warmup),
                "python paho": lambda: raw.round(n, warmup),
            }
            samples: Dict[str, List[int]] = {k: [] for k in runs}
            per_round: Dict[str, List[int]] = {k: [] for k in runs}
            names = list(runs)
            for r in range(rounds):
                for name in names if r % 2 == 0 else list(reversed(names)):
                    got = runs[name]()
                    samples[name] += got
                    per_round[name].append(pct(got, 0.5))
            client.close()
            raw.close()
        finally:
            d.close()
    go50, go99 = pct(samples["go client"], 0.5), pct(samples["go client"], 0.99)
    rows = []
    for name in names:
        p50, p99 = pct(samples[name], 0.5), pct(samples[name], 0.99)
        ratios = [a / b for a, b in zip(per_round[name], per_round["go client"])]
        rows.append(
            {
                "name": name,
                "samples": len(samples[name]),
                "p50_ns": p50,
                "p99_ns": p99,
                "max_ns": max(samples[name]),
                "p50_x_go": p50 / go50,
                "p99_x_go": p99 / go99,
                "round_p50_x_go_min": min(ratios),
                "round_p50_x_go_max": max(ratios),
            }
        )
    return {"durability": durability, "rounds": rounds, "n": n, "warmup": warmup, "rows": rows}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description="A step's round trip through the Python client, beside the Go client's.")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; each runs every controller once (default %(default)s)")
    ap.add_argument("--n", type=int, default=400, help="timed steps per controller per round (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed steps first (default %(default)s)")
    ap.add_argument("--durability", choices=["every-step", "first-touch", "both"], default="both")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="saga-pybench-bin-") as bindir:
        binary = os.environ.get("SAGA_BIN", "")
        if not binary:
            binary = os.path.join(bindir, "saga-supervisor")
            subprocess.run([go_tool(), "build", "-o", binary, "./cmd/saga-supervisor"], cwd=REPO, check=True)
        benchgo = os.path.join(bindir, "benchgo")
        subprocess.run([go_tool(), "build", "-o", benchgo, "./clients/python/benchgo"], cwd=REPO, check=True)
        modes = ["every-step", "first-touch"] if args.durability == "both" else [args.durability]
        results = [measure(binary, benchgo, m, args.rounds, args.n, args.warmup) for m in modes]
    out = {"paho_mqtt": ".".join(map(str, _paho.PAHO_VERSION)), "python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"step round trip: python {out['python']}, paho-mqtt {out['paho_mqtt']}, {out['cpus']} CPUs; one supervisor (embedded broker) per mode")
    for res in results:
        print(f"\ndurability {res['durability']}: {res['rounds']} rounds x {res['n']} steps per controller (after {res['warmup']} untimed)")
        print(f"  {'':16}{'p50':>10}{'p99':>10}{'max':>10}   ratio to the Go client (p50, p99; per-round p50 spread)")
        for row in res["rows"]:
            ratio = ""
            if row["name"] != "go client":
                ratio = f"   x{row['p50_x_go']:.2f}  x{row['p99_x_go']:.2f}  (x{row['round_p50_x_go_min']:.2f}..x{row['round_p50_x_go_max']:.2f})"
            print(f"  {row['name']:16}{fmt_ns(row['p50_ns']):>10}{fmt_ns(row['p99_ns']):>10}{fmt_ns(row['max_ns']):>10}{ratio}")
    print("\nA shared 2-core machine is noisy: read the ratios, and the per-round spread, not the absolute times.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

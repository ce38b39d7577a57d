#!/usr/bin/env python3
"""A controller for the demo arm: the pick of examples/scenarios/pick.yaml
(swing, raise, reach, grip) as one saga, through saga-supervisor.

Run the supervisor on its default configuration in one terminal, and this
in another, from the same directory (it logs in as planner with the
password the supervisor wrote to saga-data/mqtt/credentials/planner):

    saga-supervisor run
    python3 examples/python/pick.py

(with the package installed: pip install clients/python, or
PYTHONPATH=clients/python/src). It shows the three outcomes a controller
deals with: a step refused by a limit (nothing moved; the saga goes on), a
saga committed, and a saga aborted by an exception in the controller, whose
unwind report says how cleanly the arm was put back.
"""

from __future__ import annotations

import argparse
import sys

import saga_supervisor as ss

PICK = [("base", 45.0), ("shoulder", 60.0), ("elbow", 90.0), ("gripper", 30.0)]


class Slipped(Exception):
    """The controller's own failure: the object slipped out of the gripper."""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--broker", default=ss.DEFAULT_BROKER, help="the broker's URL (default %(default)s)")
    ap.add_argument("--device", default="arm1", help="the robot's name (default %(default)s)")
    ap.add_argument("--agent", default="planner", help="this controller's agent name (default %(default)s)")
    ap.add_argument(
        "--credentials-dir",
        default=ss.DEFAULT_CREDENTIALS_DIR,
        help="where the supervisor wrote each agent's password (default %(default)s)",
    )
    ap.add_argument("--ca-file", help="the CA that verifies an ssl:// broker")
    args = ap.parse_args(argv)

    def lease_lost(e: ss.LeaseLostError) -> None:
        print(f"lease lost: {e}: the supervisor unwinds our sagas", file=sys.stderr)

    with ss.Client(
        args.broker,
        device=args.device,
        agent=args.agent,
        credentials_dir=args.credentials_dir,
        ca_file=args.ca_file,
        ttl=2.0,
        on_lease_lost=lease_lost,
    ) as client:
        lease = client.lease
        assert lease is not None
        print(f"lease {lease.id} (epoch {lease.epoch}, TTL {lease.ttl:g}s, heartbeat every {lease.heartbeat:g}s)")

        # The pick: one saga, committed when the block ends.
        with client.saga() as saga:
            print(f"saga {saga.id}: pick")
            for actuator, value in PICK:
                r = saga.step(actuator, value, deadline=0.5)
                print(f"  step {r.step}: {actuator} {r.prior:g} -> {r.value:g}")
            try:
                saga.step("elbow", 300.0)  # beyond the elbow's limit
            except ss.LimitError as e:
                print(f"  refused, nothing moved: {e.code}: {e.message}")
        print(f"saga {saga.id}: committed")

        # Place: the object slips half-way, and the saga is unwound.
        try:
            with client.saga() as saga:
                print(f"saga {saga.id}: place")
                for actuator, value in [("base", -45.0), ("elbow", 60.0)]:
                    r = saga.step(actuator, value, deadline=0.5)
                    print(f"  step {r.step}: {actuator} {r.prior:g} -> {r.value:g}")
                raise Slipped("the object slipped")
        except Slipped as e:
            report = saga.report
            assert report is not None
            print(f"saga {saga.id}: aborted ({e}); unwind {report.verdict}")
            for s in report.steps:
                back = "an unknown value" if s.prior is None else f"{s.prior:g}"
                print(f"  step {s.step}: {s.actuator} back to {back} ({s.bucket})")
            if not report.clean:
                print("  look at the robot: " + ", ".join(f"{s.actuator} ({s.bucket})" for s in report.not_back))
                return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ss.LoginRefusedError as e:
        sys.exit(f"pick: {e}\n(run it where `saga-supervisor run` runs, or give --credentials-dir)")
    except ss.SagaSupervisorError as e:
        sys.exit(f"pick: {e}")

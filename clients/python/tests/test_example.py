"""examples/python/pick.py runs against the supervisor as its docstring says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import REPO, Rig, child_env

PICK = REPO / "examples" / "python" / "pick.py"


def test_pick_example(binary: str, tmp_path: Path) -> None:
    """`saga-supervisor run` on its default configuration (on free ports),
    and pick.py run from the same directory: it logs in with the password the
    supervisor wrote, commits the pick, is refused the over-limit step and
    reports a clean unwind of the place."""
    rig = Rig(binary, "embedded", tmp_path, shipped_paths=True)
    failed = True
    try:
        out = subprocess.run(
            [sys.executable, str(PICK), "--broker", rig.broker],
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        for want in [
            "saga 1: pick",
            "  step 1: base 0 -> 45",
            "  step 4: gripper 0 -> 30",
            "  refused, nothing moved: LIMIT_MAX: elbow: 300 is above max 135",
            "saga 1: committed",
            "saga 2: aborted (the object slipped); unwind clean",
            "  step 2: elbow back to 90 (compensated)",
            "  step 1: base back to 45 (compensated)",
        ]:
            assert want in lines, f"pick.py printed no {want!r}:\n{out.stdout}"
        assert [rig.commanded(a) for a in ("base", "shoulder", "elbow", "gripper")] == [45, 60, 90, 30]
        assert not rig.status()["leases"], "pick.py said bye"
        # Run from elsewhere, it says where the password is to be found.
        away = subprocess.run([sys.executable, str(PICK), "--broker", rig.broker], cwd=tmp_path / "saga-data", env=child_env(), capture_output=True, text=True, timeout=60)
        assert away.returncode == 1 and "--credentials-dir" in away.stderr, away.stderr
        failed = False
    finally:
        rig.close(failed)

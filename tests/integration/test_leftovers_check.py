"""The session-end check (``tests.leftovers``) catches what the suite once left for half an
hour (issue 37): an orphan slurmstepd, alive after its slurmd and slurmctld were killed,
retrying its job's end for ever.  slurmd gives it no environment, so only its working folder
(the cluster's log folder, a ``session_folder``) says whose it is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INNER = """
import os
import signal
import subprocess
import time
from pathlib import Path

from demo.slurm.cluster import DEFAULT_NODES, start_cluster
from tests.leftovers import session_folder


def _stepds(base):
    found = []
    for p in Path("/proc").iterdir():
        try:
            if (p / "comm").read_text().strip() == "slurmstepd" and os.readlink(p / "cwd").startswith(f"{base}/"):
                found.append(int(p.name))
        except OSError:
            pass
    return found


def test_leaves_an_orphan_slurmstepd():
    base = session_folder("hfleak-")
    print(f"BASE {base}")
    c = start_cluster(base, DEFAULT_NODES, timeout=120)
    env = {**os.environ, **c.env}
    subprocess.run(["sbatch", "-p", c.partition, "--wrap", "sleep 2", "-o", "/dev/null"], env=env, check=True)
    deadline = time.monotonic() + 120
    while not _stepds(base) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _stepds(base)
    for pid_file in [*(base / "run").glob("*.pid"), base / "munge" / "munged.pid"]:
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)  # the daemons, not their slurmstepd
"""


def test_the_check_names_and_ends_an_orphan_slurmstepd(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "tests.leftovers", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_inner.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=280,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HFTEST_SETTLE": "5"},
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    base = next((line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("BASE ")), "")
    try:
        assert "1 passed" in out and proc.returncode != 0, out  # the test passed; the session did not
        assert "the test session left these running" in out and "slurmstepd: [" in out, out
        assert "they were ended once named" in out
        assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _works_in(p, base)]
    finally:
        if base:
            shutil.rmtree(base, ignore_errors=True)


def _works_in(p: Path, base: str) -> bool:
    try:
        return bool(base) and os.readlink(p / "cwd").startswith(f"{base}/")
    except OSError:
        return False

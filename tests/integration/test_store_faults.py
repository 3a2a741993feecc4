"""A state store that never dies of a transient problem: real `hetflow run` of real podman
steps against a store another process holds locked, a work directory on a full disk (a small
tmpfs), a page-damaged store, and a store deleted or emptied under a HETFLOW_HOME that had runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, podman, run_containers, write

TWO_STEPS = f"""
apiVersion: hetflow/v1
name: pair
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 1; echo a > /out/a.txt"]
    outputs: [a.txt]
  b:
    inputs: {{x: a/a.txt}}
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/x/a.txt > /out/b.txt; echo b >> /out/b.txt"]
    outputs: [b.txt]
"""

ONE_STEP = f"""
apiVersion: hetflow/v1
name: one
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo a > /out/a.txt"]
    outputs: [a.txt]
"""

LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


class Output:
    """A child's merged output, read on a thread so the test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.text = ""
        assert proc.stdout is not None
        stream = proc.stdout
        self._thread = threading.Thread(target=lambda: [self._add(line) for line in stream], daemon=True)
        self._thread.start()

    def _add(self, line: str) -> None:
        self.text += line


# Step a waits for a gate file the test writes (its data directory is mounted live), so the
# lock is surely held when it ends: a fixed sleep raced the test's polling on a loaded machine.
GATED = TWO_STEPS.replace(
    'command: [sh, -c, "sleep 1; echo a > /out/a.txt"]',
    'inputs: {g: data.gate}\n    command: [sh, -c, "until [ -f /in/g/go ]; do sleep 0.1; done; echo a > /out/a.txt"]',
).replace("steps:", "data:\n  gate: gate\nsteps:", 1)


def test_a_run_waits_out_a_store_another_process_holds_locked(hf: Hetflow, tmp_path: Path) -> None:
    """SQLite's own wait is cut to 0.5 s (HETFLOW_STORE_BUSY_TIMEOUT): holding the lock for
    several times that used to crash the executor with 'database is locked'."""
    hf("run", write(tmp_path, ONE_STEP, "one.yaml"), "-q")  # the store exists, as it would
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "closed").write_text("")
    env = {"HETFLOW_STORE_BUSY_TIMEOUT": "0.5"}
    run = hf.popen("run", write(tmp_path, GATED), extra_env=env)
    out = Output(run)
    locker: subprocess.Popen[str] | None = None
    try:
        hf.wait_for(lambda: run_step_running(hf), timeout=60)
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(hf.home / "state.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert locker.stdout is not None and locker.stdout.readline().strip() == "held"
        (tmp_path / "gate" / "go").write_text("")
        # step a ends within the hold: its result waits for the lock instead of crashing the run
        hf.wait_for(lambda: "state store busy" in out.text, timeout=60)
        assert f"(pid {locker.pid})" in out.text  # the holder, read from /proc/locks
        time.sleep(4 * 0.5)  # hold the lock for several of SQLite's waits more
        assert run.poll() is None  # still alive, waiting
        assert locker.stdin is not None
        locker.stdin.write("release\n")
        locker.stdin.flush()
        assert locker.wait(timeout=30) == 0
        assert run.wait(timeout=120) == 0, out.text
    finally:
        if locker is not None and locker.poll() is None:
            locker.kill()
        if run.poll() is None:
            run.kill()
    out._thread.join(timeout=10)
    assert "Traceback" not in out.text and "internal error" not in out.text
    data = hf.show(hf.last_run())
    assert (data["state"], {s["step"]: s["state"] for s in data["steps"]}) == (
        "succeeded",
        {"a": "succeeded", "b": "succeeded"},
    )


def run_step_running(hf: Hetflow) -> bool:
    """Whether the newest run's step a runs (its container started)."""
    proc = hf("ps", "--all", "--json", check=False)
    if proc.returncode != 0 or '"pair"' not in proc.stdout:
        return False
    data = hf.show(hf.last_run())
    return any(s["step"] == "a" and s["state"] == "running" for s in data["steps"])


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB tmpfs (we are root), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


FILLS_THE_DISK = f"""
apiVersion: hetflow/v1
name: fill
steps:
  small:
    image: {BUSYBOX}
    command: [sh, -c, "echo ok > /out/s.txt"]
    outputs: [s.txt]
  big:
    needs: [small]
    image: {BUSYBOX}
    command: [sh, -c, "dd if=/dev/zero of=/out/big bs=1M count=12"]
    outputs: [big]
"""


def test_a_step_that_fills_its_disk_fails_cleanly_and_resumes_once_there_is_room(
    hf: Hetflow, tmp_path: Path, small_disk: Path
) -> None:
    env = {"HETFLOW_WORKDIR": str(small_disk)}
    proc = hf("run", write(tmp_path, FILLS_THE_DISK), "-q", check=False, extra_env=env)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    run_id = hf.last_run()
    data = hf.show(run_id)
    steps = {s["step"]: s for s in data["steps"]}
    assert steps["small"]["state"] == "succeeded"
    assert steps["big"]["state"] == "failed"
    reason = steps["big"]["reason"]
    assert f"out of disk space: the disk at {small_disk}" in reason and "free more than" in reason, reason
    workdir = Path(data["workdir"])
    assert not (workdir / "attempts" / "big" / "1" / "out").exists()  # the partial output is gone
    assert shutil.disk_usage(small_disk).free > 6 << 20  # ... and its space with it

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    hf("resume", run_id, "-q", extra_env=env)
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert (workdir / "steps" / "big" / "out" / "big").stat().st_size == 12 << 20


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_page_damaged_store_is_refused_and_left_as_it_is(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, ONE_STEP)
    for _ in range(2):
        hf("run", wf, "-q")
    db = hf.home / "state.db"
    data = bytearray(db.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle : middle + page] = os.urandom(page)
    db.write_bytes(bytes(data))
    before = sha(db)

    for args in (["run", wf, "-q"], ["ps", "--all"]):
        proc = hf(*args, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"the state store {db} is damaged" in proc.stderr
        assert ".recover" in proc.stderr and "Traceback" not in proc.stderr
    assert sha(db) == before

    # the recipe the message gives (the .dump one: this Debian's sqlite3 cannot .recover)
    recipe = re.search(r"'(sqlite3 \S+ \.dump \| .*? \| sqlite3 (\S+))'", " ".join(proc.stderr.split()))
    assert recipe is not None, proc.stderr
    subprocess.run(["sh", "-c", recipe.group(1)], check=True, capture_output=True)
    db.rename(tmp_path / "damaged.db")
    Path(recipe.group(2)).rename(db)
    hf("run", wf, "-q")  # the recovered store is written to again
    assert len(json.loads(hf("ps", "--all", "--json").stdout)) >= 1


STORE_GONE = [
    pytest.param("delete", "is missing", id="deleted"),
    pytest.param("truncate", r"is empty \(0 bytes\)", id="zero-length"),
]


@pytest.mark.parametrize(("how", "said"), STORE_GONE)
def test_a_lost_store_is_reported_not_replaced(hf: Hetflow, tmp_path: Path, how: str, said: str) -> None:
    wf = write(tmp_path, ONE_STEP)
    hf("run", wf, "-q")  # a brand-new HETFLOW_HOME just works
    db = hf.home / "state.db"
    if how == "delete":
        db.unlink()
    else:
        db.write_bytes(b"")

    proc = hf("run", wf, "-q", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr

    message = " ".join(proc.stderr.split())
    assert re.search(f"the state store {db} {said}, but {db}.id says a store was created here", message), message
    assert "HETFLOW_NEW_STORE=1" in message
    assert not db.exists() or db.stat().st_size == 0  # nothing created in its place

    hf("run", wf, "-q", extra_env={"HETFLOW_NEW_STORE": "1"})  # the documented way to accept a fresh one
    assert len(hf.show(hf.last_run())["steps"]) == 1
    hf("ps", "--all")  # and the fresh store is the store from now on


TWO_LONG = f"""
apiVersion: hetflow/v1
name: long
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "trap 'exit 143' TERM; sleep 300 & wait"]
  b:
    image: {BUSYBOX}
    command: [sh, -c, "trap 'exit 143' TERM; sleep 300 & wait"]
"""


def fill(disk: Path) -> Path:
    """Write zeros under ``disk`` until it is full (ENOSPC); the file written."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


def test_a_store_whose_disk_fills_stops_the_run_cleanly_and_keeps_what_it_recorded(
    tmp_path: Path, busybox: str, small_disk: Path
) -> None:
    """HETFLOW_HOME on a small tmpfs that something else fills while the run goes on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HETFLOW_", "SUDO_"))}
    env.update(HETFLOW_HOME=str(small_disk), HETFLOW_WORKDIR=str(tmp_path / "work"), HETFLOW_POLL_INTERVAL="0.1")
    hf = Hetflow(small_disk, env)
    run = hf.popen("run", write(tmp_path, TWO_LONG), "-q")
    out = Output(run)
    try:
        hf.wait_for(lambda: both_running(hf), timeout=60)
        run_id = hf.last_run()
        before = hf.show(run_id)
        filler = fill(small_disk)
        podman("kill", f"hf-{run_id}-a-1")  # a's end must be recorded: the store cannot take it
        assert run.wait(timeout=60) == 2, out.text
    finally:
        if run.poll() is None:
            run.kill()
    out._thread.join(timeout=10)
    text = " ".join(out.text.split())
    assert f"the state store cannot be written: the disk at {small_disk}" in text, text
    assert f"The run was stopped; once there is room, 'hetflow resume {run_id}' continues it" in text
    assert "Traceback" not in text and "internal error" not in text
    assert run_containers(run_id, running=True) == []  # b was stopped with the run

    filler.unlink()
    after = hf.show(run_id)
    # recorded in the room the store kept for it (state.db.reserve): the run and b stopped, a's end
    # kept for resume to collect, as `hetflow stop` leaves them; nothing recorded before is lost
    assert after["state"] == "stopped" and "the disk at" in after["message"], after
    assert {s["step"]: (s["state"], s["attempts"]) for s in after["steps"]} == {
        "a": ("running", 1),
        "b": ("stopped", 1),
    }
    assert [s["attempts"] for s in before["steps"]] == [1, 1]
    assert (small_disk / "state.db.reserve").exists()  # taken again on the next open
    proc = hf("resume", run_id, "-q", "-d", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    hf.wait_for(lambda: hf.show(run_id)["steps"][1]["state"] == "running", timeout=60)
    hf("stop", run_id)


def both_running(hf: Hetflow) -> bool:
    proc = hf("ps", "--all", "--json", check=False)
    if proc.returncode != 0 or '"long"' not in proc.stdout:
        return False
    return all(s["state"] == "running" for s in hf.show(hf.last_run())["steps"])

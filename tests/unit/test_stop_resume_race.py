"""`hetflow stop` holds the run until its steps are recorded stopped, and `resume` refuses a
run a live process holds.  Seen from the dashboard (issue 24): Resume clicked as soon as the
run showed "stopped" was undone by stop's last writes, and the resumed executor failed its
step at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hetflow.errors import StateError
from hetflow.execute import resume_run, spawn_executor, stop_run
from hetflow.execute.backends.base import JobState
from hetflow.state import (
    RUN_RUNNING,
    RUN_STOPPED,
    RUNNING,
    AttemptRecord,
    Store,
    executor_gone,
    pid_alive,
    process_start,
)
from tests.unit.builders import node, world

TWO = """
a:
  image: a
b:
  image: b
  needs: [a]
"""


@pytest.fixture
def other_process() -> Iterator[int]:
    """A live process that is not this one (an executor, or another `hetflow stop`)."""
    p = subprocess.Popen(["sleep", "600"])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    ("message", "said"),
    [("", "is being executed by process"), ("stopping: stopped by hetflow stop", "is being stopped by process")],
    ids=["its-executor", "a-stop-in-progress"],
)
def test_resume_is_refused_while_a_live_process_holds_the_run(
    tmp_path: Path, other_process: int, message: str, said: str
) -> None:
    w = world(tmp_path, TWO)
    w.store.set_step(w.run.id, "a", state="failed", exit_code=1)
    w.store.set_run(
        w.run.id, state=RUN_RUNNING, pid=other_process, pid_start=process_start(other_process), message=message
    )
    with pytest.raises(StateError, match=said):
        resume_run(w.store, w.run.id, node())
    assert w.store.step(w.run.id, "a").state == "failed"  # nothing was reset


class Recorder:
    """The backend calls stop_run makes, with what the store said of the run at cancel."""

    def __init__(self, store: Store, run_id: str, containers: Sequence[str]) -> None:
        self.store, self.run_id, self.containers = store, run_id, list(containers)
        self.seen_at_cancel: tuple[str, int | None] | None = None

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {c: JobState(name=c, running=True, exit_code=None, status="running") for c in self.containers}

    def cancel(self, names: Sequence[str], grace: int | None = None) -> None:
        run = self.store.run(self.run_id)
        self.seen_at_cancel = (run.state, run.pid)

    def release(self, names: Sequence[str]) -> None:
        pass


def test_stop_holds_the_run_until_its_steps_are_recorded_stopped(tmp_path: Path) -> None:
    w = world(tmp_path, TWO)
    w.store.set_run(w.run.id, state=RUN_RUNNING)
    container = f"hf-{w.run.id}-a-1"
    w.store.add_attempt(
        AttemptRecord(w.run.id, "a", 1, "default", "n", (), (), container, "a", RUNNING, None, 1.0, None, "")
    )
    w.store.set_step(w.run.id, "a", state="launching")
    w.store.set_step(w.run.id, "a", state=RUNNING)
    backend = Recorder(w.store, w.run.id, [container])

    stop_run(w.store, backend, w.run.id)  # type: ignore[arg-type]

    assert backend.seen_at_cancel == (RUN_RUNNING, os.getpid())  # held by this process, not yet stopped
    run = w.store.run(w.run.id)
    assert (run.state, run.pid) == (RUN_STOPPED, None)
    assert w.store.step(w.run.id, "a").state == "stopped"


def _processes_with(marker: str) -> list[int]:
    """Pids of the live processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if pid_alive(pid)]


def _sleeper(marker: str) -> list[str]:
    """A stand-in executor that waits, its command line marked so that it can be found."""
    return [sys.executable, "-c", "import time; time.sleep(600)", marker]


def test_a_detached_executor_holds_its_run_from_the_moment_run_d_returns(tmp_path: Path) -> None:
    """CI saw a `resume -d` refused because the one before it had returned while its executor
    was still starting: the run looked held by the dead executor ("executor gone") though a
    live one was about to claim it.  spawn_executor claims the run for the child before
    returning."""
    w = world(tmp_path, TWO)
    w.store.set_run(w.run.id, state=RUN_RUNNING, pid=2**22 + 1, message="")  # a dead executor's claim
    assert executor_gone(w.store.run(w.run.id))
    marker = f"hetflow-test-executor-{os.getpid()}-a"
    log = tmp_path / "executor.log"
    pid = spawn_executor(w.store, w.run.id, _sleeper(marker), log=log, env=os.environ)
    try:
        held = w.store.run(w.run.id)
        assert (held.state, held.pid, held.pid_start) == (RUN_RUNNING, pid, process_start(pid))
        assert not executor_gone(held)
        assert os.getsid(pid) == pid  # its own session: a ^C in the submitting shell does not reach it
        with pytest.raises(StateError, match=f"is being executed by process {pid}"):
            resume_run(w.store, w.run.id, node())
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert log.exists()


def test_a_second_detached_executor_is_refused_and_killed_when_the_run_is_held(
    tmp_path: Path, other_process: int
) -> None:
    """Two `resume -d` at once both pass resume's check; the second to claim loses, and its
    executor must not be left running unclaimed."""
    w = world(tmp_path, TWO)
    w.store.set_run(w.run.id, state=RUN_RUNNING, pid=other_process, pid_start=process_start(other_process))
    marker = f"hetflow-test-executor-{os.getpid()}-b"
    with pytest.raises(StateError, match=f"is being executed by process {other_process}"):
        spawn_executor(w.store, w.run.id, _sleeper(marker), log=tmp_path / "x.log", env=os.environ)
    assert _processes_with(marker) == []
    assert w.store.run(w.run.id).pid == other_process

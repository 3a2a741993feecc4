"""How the executor learns of exits (execute/exits.py), with real processes standing in for
podman: ``wait`` is a shell command that prints an exit code, and the container's monitor
is a process named ``conmon`` (a copy of ``sleep``), followed through its pidfd."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hetflow.execute.backends.local.exits import Batches, ExitWatch
from hetflow.execute.engine import NEVER_STARTED

# How long a test waits for the watch to wake: generous, for a loaded machine (a pass waits only
# as long as the wake takes); every "this must not wait for X" below makes X far longer than this.
WAKE = 30.0


class Waits:
    """The engine's ``wait``: what each (name, interval) does, as a shell snippet (a list:
    one per call, the last one repeated)."""

    def __init__(self, scripts: Mapping[tuple[str, str], str | list[str]]) -> None:
        self.scripts = {k: [v] if isinstance(v, str) else list(v) for k, v in scripts.items()}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, interval: str) -> list[str]:
        self.calls.append((name, interval))
        todo = self.scripts.get((name, interval), ["exit 1"])
        return ["sh", "-c", todo.pop(0) if len(todo) > 1 else todo[0]]


def watch_with(
    waits: Waits, inspect: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[ExitWatch, threading.Event]:
    woken = threading.Event()
    entries = dict(inspect or {})
    w = ExitWatch(inspect=entries.get, wait_command=waits, wake=woken.set, env={"PATH": "/usr/bin:/bin"})
    return w, woken


def settle(
    w: ExitWatch, name: str, timeout: float = 10.0
) -> tuple[bool, int | None, str, Mapping[str, str], str] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = w.snapshot().get(name)
        if st is None or not st[0]:
            return st
        time.sleep(0.01)
    raise AssertionError(f"{name} still running after {timeout}s")


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose name is conmon, alive until the test ends it (never on a timer: on a
    loaded machine a timed monitor could go before the test looks)."""
    binary = tmp_path / "conmon"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    proc = subprocess.Popen([str(binary), "600"])
    yield proc
    proc.kill()
    proc.wait()


def test_without_a_monitor_the_engines_wait_gives_the_exit_code() -> None:
    waits = Waits({("c1", "250ms"): "sleep 0.2; echo 3"})
    w, woken = watch_with(waits)
    w.follow("c1", {"hetflow.run": "r"}, None)
    assert w.snapshot()["c1"][:2] == (True, None)
    assert woken.wait(WAKE)
    assert settle(w, "c1") == (False, 3, "exited", {"hetflow.run": "r"}, "")
    assert waits.calls == [("c1", "250ms")]
    w.close()


def test_a_step_is_followed_through_its_monitor_then_wait_reads_the_code(monitor: subprocess.Popen[bytes]) -> None:
    # wait is asked only once the monitor has gone (asked before, it would print 9)
    waits = Waits({("c2", "10ms"): "echo 7", ("c2", "250ms"): "echo 9"})
    w, woken = watch_with(waits)
    w.follow("c2", {}, monitor.pid)
    time.sleep(0.5)  # time for a wrong early wake; the monitor lives on until it is ended below
    assert w.snapshot()["c2"][:2] == (True, None)  # the monitor still runs: so does the step
    assert not woken.is_set() and waits.calls == []
    monitor.terminate()
    monitor.wait()
    assert woken.wait(WAKE)
    assert settle(w, "c2") == (False, 7, "exited", {}, "")  # 7: wait was asked after the monitor went
    assert waits.calls == [("c2", "10ms")]
    w.close()


def test_a_pid_that_is_not_a_monitor_counts_as_gone() -> None:
    other = subprocess.Popen(["sleep", "600"])  # alive, but not named conmon
    try:
        waits = Waits({("c3", "10ms"): "echo 0"})
        w, woken = watch_with(waits)
        w.follow("c3", {}, other.pid)
        assert woken.wait(WAKE)  # does not wait 600 s for the sleep
        assert settle(w, "c3") == (False, 0, "exited", {}, "")
        w.close()
    finally:
        other.kill()
        other.wait()


def test_an_attached_run_exits_with_the_containers_code_and_its_output_is_not_a_reason() -> None:
    waits = Waits({})
    w, woken = watch_with(waits)
    script = "echo 'Error: my own message' >&2; head -c 200000 /dev/zero >&2; sleep 0.2; exit 3"
    w.attach("a1", {"k": "v"}, ["sh", "-c", script], engine="podman")
    assert w.snapshot()["a1"][:2] == (True, None)
    assert woken.wait(WAKE)
    assert settle(w, "a1") == (False, 3, "exited", {"k": "v"}, "")  # 3: the step's own exit
    assert waits.calls == []  # no `wait` needed
    w.close()


def test_an_attached_run_the_engine_refused_says_why() -> None:
    w, woken = watch_with(Waits({}))
    script = "echo 'Error: localhost/nope: image not known' >&2; exit 125"
    w.attach("a2", {}, ["sh", "-c", script], engine="podman")
    assert woken.wait(WAKE)
    assert settle(w, "a2") == (
        False,
        125,
        "exited",
        {},
        "podman could not start a2: Error: localhost/nope: image not known",
    )
    w.close()


def test_an_attached_run_killed_itself_leaves_the_exit_to_the_engines_wait() -> None:
    w, woken = watch_with(Waits({("a3", "250ms"): "echo 0"}))
    w.attach("a3", {}, ["sh", "-c", "kill -9 $$"], engine="podman")
    assert woken.wait(WAKE)
    assert settle(w, "a3") == (False, 0, "exited", {}, "")
    w.close()


def test_an_attached_run_killed_before_it_started_its_container_is_never_started_not_exited_0() -> None:
    """issue 37: podman's wait answers 0 at once for a container that is only created; a run
    killed before starting it is recorded never started, the engine asked, no wait made."""
    waits = Waits({("a5", "250ms"): "echo 0"})
    asked: list[str] = []
    woken = threading.Event()

    def unstarted(name: str) -> bool:
        asked.append(name)
        return True

    nothing: dict[str, Mapping[str, Any]] = {}
    w = ExitWatch(
        inspect=nothing.get, wait_command=waits, wake=woken.set, env={"PATH": "/usr/bin:/bin"}, unstarted=unstarted
    )
    w.attach("a5", {}, ["sh", "-c", "kill -9 $$"], engine="podman")
    assert woken.wait(WAKE)
    assert settle(w, "a5") == (False, None, NEVER_STARTED, {}, "")
    assert (asked, waits.calls) == (["a5"], [])
    w.close()


def test_closing_kills_attached_runs_without_recording_an_exit() -> None:
    w, woken = watch_with(Waits({}))
    w.attach("a4", {}, ["sh", "-c", "sleep 30"], engine="podman")
    time.sleep(0.2)
    w.close()
    time.sleep(0.3)
    assert not woken.is_set()
    assert w.snapshot()["a4"][:2] == (True, None)


def test_a_container_the_engine_no_longer_has_is_dropped() -> None:
    w, woken = watch_with(Waits({}))  # every wait fails; inspect finds nothing
    w.follow("gone", {}, None)
    assert woken.wait(WAKE)
    assert settle(w, "gone") is None
    w.close()


def test_a_failed_wait_falls_back_to_inspect_for_the_exit_code() -> None:
    w, woken = watch_with(Waits({}), inspect={"c4": {"State": {"Status": "exited", "ExitCode": 137}}})
    w.follow("c4", {}, None)
    assert woken.wait(WAKE)
    assert settle(w, "c4") == (False, 137, "exited", {}, "")
    w.close()


def test_closing_stops_the_followers_without_waking() -> None:
    waits = Waits({("c5", "10ms"): "sleep 600", ("c5", "250ms"): "sleep 600"})
    w, woken = watch_with(waits)
    w.follow("c5", {}, None)
    time.sleep(0.2)
    closing = threading.Thread(target=w.close)
    closing.start()
    closing.join(WAKE)
    assert not closing.is_alive()  # closed without waiting out the 600 s waits
    time.sleep(0.3)  # time for a wrong wake after the close
    assert not woken.is_set()
    assert w.snapshot()["c5"][:2] == (True, None)


def test_forget_drops_a_container_and_its_exit() -> None:
    w, _ = watch_with(Waits({}))
    w.known_exit("old", {"k": "v"}, "exited", 2)
    assert w.snapshot() == {"old": (False, 2, "exited", {"k": "v"}, "")}
    w.forget(["old"])
    assert w.snapshot() == {}


def test_batches_take_everything_given_while_the_last_batch_was_handled() -> None:
    seen: list[list[int]] = []
    gate, taken = threading.Event(), threading.Event()

    def handle(batch: list[int]) -> None:
        seen.append(batch)
        taken.set()
        gate.wait(WAKE)

    b: Batches[int] = Batches("test", handle)
    b.put(1)
    assert taken.wait(WAKE)  # 1 is being handled (held at the gate)
    for i in (2, 3, 4):
        b.put(i)
    gate.set()
    b.close()  # waits for every item given before
    assert seen == [[1], [2, 3, 4]]


def test_a_batch_that_fails_does_not_stop_the_next() -> None:
    seen: list[list[str]] = []
    taken = threading.Event()

    def handle(batch: list[str]) -> None:
        seen.append(batch)
        taken.set()
        if "bad" in batch:
            raise RuntimeError("rm failed")

    b: Batches[str] = Batches("test", handle)
    b.put("bad")
    assert taken.wait(WAKE)  # "bad" was taken alone
    b.put("good")
    b.close()
    assert seen == [["bad"], ["good"]]

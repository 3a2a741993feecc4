"""A killed executor's launches still in flight (``execute.orphans``): found by their command
line in /proc (a real process here, named as the engine's client), waited for until their
container has started, and killed when they never finish."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from hetflow.execute.backends.local.orphans import Monitor, launchers, monitors, reap_unstarted, settle


@pytest.fixture
def podman_run(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line is ``.../podman -c ... run --rm --name hf-r-a-1 busybox``
    (a shell under that name that waits on a builtin ``read``, forking nothing: a launch that
    hangs), in a session of its own as ``ExitWatch.attach`` starts one."""
    argv = [str(tmp_path / "podman"), "-c", "read line", "run", "--rm", "--name", "hf-r-a-1", "busybox"]
    proc = subprocess.Popen(argv, executable="/bin/sh", stdin=subprocess.PIPE, start_new_session=True)
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    while b"hf-r-a-1" not in cmdline.read_bytes():  # the child between fork and exec: python's still
        threading.Event().wait(0.01)
    yield proc
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_launch_is_found_by_its_engine_and_container_name(podman_run: subprocess.Popen[bytes]) -> None:
    assert launchers("/usr/bin/podman", {"hf-r-a-1", "hf-r-b-1"}) == {podman_run.pid: "hf-r-a-1"}
    assert launchers("podman", {"hf-r-a-2"}) == {}  # another attempt's name
    assert launchers("docker", {"hf-r-a-1"}) == {}  # another engine's client
    assert launchers("podman", set()) == {}


def test_the_name_is_read_in_either_spelling(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, argv in {
        "7": ["podman", "run", "--name=x"],
        "8": ["podman", "ps", "--name", "x"],
        "9": ["conmon"],
    }.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "self").mkdir()
    assert launchers("podman", {"x"}, proc) == {7: "x"}  # `ps --name` is no launch


def test_settle_waits_until_the_container_has_started_then_returns() -> None:
    answers = iter(["", "created", "running"])  # absent, created, started
    asked: list[list[str]] = []

    def status(names: Collection[str]) -> dict[str, str]:
        asked.append(sorted(names))
        return {n: next(answers) for n in names}

    paused: list[float] = []
    got = settle("podman", {"c"}, status, pause=paused.append, find=lambda b, n: {4321: "c"})
    assert got == [] and asked == [["c"], ["c"], ["c"]] and len(paused) == 2


def test_settle_returns_at_once_when_no_launch_is_in_flight() -> None:
    def status(names: Collection[str]) -> dict[str, str]:
        raise AssertionError("nothing to ask")

    assert settle("podman", {"c"}, status, find=lambda b, n: {}) == []


def test_a_launch_that_never_finishes_is_killed_after_the_timeout(podman_run: subprocess.Popen[bytes]) -> None:
    now = iter([0.0, 5.0, 11.0])
    got = settle("podman", {"hf-r-a-1"}, lambda n: {}, timeout=10.0, pause=lambda s: None, clock=lambda: next(now))
    assert got == ["hf-r-a-1"]
    assert podman_run.wait(timeout=30) == -9  # its whole session group, SIGKILL


def _fake_proc(root: Path, table: dict[int, tuple[int, list[str]]]) -> Path:
    for pid, (ppid, argv) in table.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (root / str(pid) / "stat").write_text(f"{pid} ({Path(argv[0]).name if argv else ''}) S {ppid} 1 1 0")
    return root


def test_monitors_are_read_with_their_container_and_what_runs_under_them(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        {
            10: (1, ["/usr/bin/conmon", "--api-version", "1", "-c", "abc", "-u", "abc", "-n", "hf-r-a-1"]),
            11: (10, ["runc", "init"]),
            12: (11, ["sh", "-c", "x"]),
            20: (1, ["/usr/bin/conmon", "-c", "def"]),  # no name: not read
            30: (1, ["conmonitor", "-c", "x", "-n", "y"]),
        },
    )
    assert monitors(proc) == [Monitor(10, "abc", "hf-r-a-1", (11, 12))]


def test_only_a_container_made_and_never_started_is_reaped(monitor_tree: tuple[int, int]) -> None:
    conmon, init = monitor_tree
    running = {"Id": "abc123", "State": {"Status": "running"}}
    assert not reap_unstarted(running) and not reap_unstarted(None)
    assert _alive(conmon) and _alive(init)
    assert reap_unstarted({"Id": "abc123", "State": {"Status": "created"}})
    deadline = time.monotonic() + 30  # SIGKILL is sent; its delivery is the kernel's
    while (_alive(conmon) or _alive(init)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(conmon) and not _alive(init)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture
def monitor_tree(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A real 'conmon -c abc123 -n hf-r-a-1' (a shell so named) with a child that waits, as a
    runc init waits for a start: their PIDs."""
    argv = [str(tmp_path / "conmon"), "-s", "--", "-c", "abc123", "-n", "hf-r-a-1"]  # the script on stdin
    proc = subprocess.Popen(
        argv, executable="/bin/sh", stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"sleep 600 & echo $!; wait\n")
    proc.stdin.flush()
    child = int(proc.stdout.readline())
    yield proc.pid, child
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

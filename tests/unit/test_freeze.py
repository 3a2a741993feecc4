"""A periodic dump's outputs copied while the container is frozen (``checkpoint.freeze``, and the
same in the Slurm node's shell program), with a real cgroup freezer and a real process that
keeps writing its counter to its /out: the copy and the dump see the same moment, and the
process goes on afterwards.  Where no freezer is found the copy follows the dump.  No podman
here: the dump is a function (or a fake ``podman`` script) that looks at the cgroup's state."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hetflow.execute.backends.slurm.checkpoint import dump_args
from hetflow.execute.checkpoint.freeze import CGROUP_ROOT, freezer, frozen_dump


def wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


LOOP = 'i=0; while :; do i=$((i+1)); echo $i > "$1/n"; sleep 0.01; done'


@contextlib.contextmanager
def counting_cgroup(out: Path) -> Iterator[tuple[str, Path]]:
    """A new freezer cgroup with a process counting into ``out/n`` in it: (podman's
    ``CgroupPath`` for it, its state file)."""
    v2 = (CGROUP_ROOT / "cgroup.controllers").is_file()
    name = f"hetflow-test-{secrets.token_hex(4)}"
    folder = (CGROUP_ROOT if v2 else CGROUP_ROOT / "freezer") / name
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a freezer cgroup here ({exc}); needs root and a cgroup freezer")
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["sh", "-c", LOOP, "sh", str(out)])
    try:
        (folder / "cgroup.procs").write_text(str(proc.pid))
        wait_for(lambda: (out / "n").is_file() and (out / "n").read_text().strip() != "")
        yield f"/{name}", folder / ("cgroup.freeze" if v2 else "freezer.state")
    finally:
        f = freezer(f"/{name}")
        if f is not None:
            f.thaw()
        proc.kill()
        proc.wait()
        wait_for(lambda: not (folder / "cgroup.procs").read_text().strip())
        folder.rmdir()


def _is_frozen(state: Path) -> bool:
    if state.name == "cgroup.freeze":
        return "frozen 1" in (state.parent / "cgroup.events").read_text()
    return state.read_text().strip() == "FROZEN"


def _count(out: Path) -> str:
    return (out / "n").read_text().strip()


def _goes_on(out: Path, seen: str) -> bool:
    now = _count(out)
    return now != "" and now != seen


def test_the_outputs_are_copied_while_the_process_is_frozen_and_it_goes_on_after(tmp_path: Path) -> None:
    out, copy = tmp_path / "out", tmp_path / "copy"
    with counting_cgroup(out) as (cgroup, state):
        assert freezer(cgroup) is not None

        def dump() -> tuple[bool, str]:
            return _is_frozen(state), _count(out)  # what CRIU would see

        frozen, at_dump = frozen_dump(cgroup, (out, copy), dump)
        assert frozen and _count(copy) == at_dump, (frozen, _count(copy), at_dump)  # the dumped moment
        assert not _is_frozen(state)
        wait_for(lambda: _goes_on(out, at_dump))  # thawed: the counter goes on


def test_without_a_freezer_the_outputs_are_copied_right_after_the_dump(tmp_path: Path) -> None:
    out, copy = tmp_path / "out", tmp_path / "copy"
    out.mkdir()
    (out / "n").write_text("7")
    assert freezer("/no-such-cgroup") is None and freezer("") is None
    seen = frozen_dump("/no-such-cgroup", (out, copy), lambda: copy.exists())
    assert seen is False and _count(copy) == "7"
    assert frozen_dump("", None, lambda: 3) == 3  # a dump that stops the container: nothing to copy


def _slurm_node_program(tmp_path: Path, cgroup: str, state: Path, out: Path, copy: Path) -> str:
    """Run the Slurm node's dump program with a fake podman: ``inspect`` names ``cgroup``,
    ``checkpoint`` writes what it saw (frozen?, the copy's counter, the live counter)."""
    podman = tmp_path / "podman"
    seen = tmp_path / "seen"
    podman.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = inspect ]; then echo "{cgroup}"; exit 0; fi\n'
        f"f=$(cat {state}); [ -f {state.parent}/cgroup.events ] && f=$(grep frozen {state.parent}/cgroup.events)\n"
        f'c=$(cat {copy}/n 2>/dev/null || echo none); echo "$f|$c|$(cat {out}/n)" > {seen}\n'
    )
    podman.chmod(0o755)
    args = dump_args(
        "1", "hf-r-s-1", tmp_path / "d", leave_running=True, podman=str(podman), hooks="/h", conf="/c",
        criu_dir="/x", outputs=(out, copy),
    )  # fmt: skip
    program = args[args.index("-c") + 1 :]
    done = subprocess.run(["sh", "-c", *program], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "hetflow-dump " in done.stdout
    return seen.read_text().strip()


def test_the_slurm_node_program_copies_the_outputs_while_frozen(tmp_path: Path) -> None:
    out, copy = tmp_path / "out", tmp_path / "copy"
    with counting_cgroup(out) as (cgroup, state):
        seen = _slurm_node_program(tmp_path, cgroup, state, out, copy)
        frozen, copied, live = seen.split("|")
        assert frozen in ("FROZEN", "frozen 1") and copied == live, (seen, state.read_text())
        assert not _is_frozen(state)
        wait_for(lambda: _goes_on(out, live))


def test_the_slurm_node_program_without_a_freezer_copies_after_the_dump(tmp_path: Path) -> None:
    out, copy = tmp_path / "out", tmp_path / "copy"
    out.mkdir()
    (out / "n").write_text("5\n")
    state = tmp_path / "freezer.state"
    state.write_text("THAWED\n")
    assert os.path.exists(state)
    frozen, copied, _ = _slurm_node_program(tmp_path, "/no-such-cgroup", state, out, copy).split("|")
    assert frozen == "THAWED" and copied == "none"  # nothing copied before the dump
    assert _count(copy) == "5"

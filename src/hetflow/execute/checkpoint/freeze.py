"""A periodic dump's outputs, copied while the container is frozen (the cgroup freezer).

A dump with ``--leave-running`` lets the process go on the moment CRIU is done, so /out copied
after it may already hold what the process wrote later: a restored counter then finds
``/out/n`` ahead of itself, and a file it appends to longer than CRIU saw it (CRIU refuses
such a file).  So the container's cgroup is frozen first (``freezer.state`` on cgroup v1,
``cgroup.freeze`` on v2, what ``podman pause`` uses), /out is copied, the dump runs (CRIU
dumps a frozen cgroup as it is and leaves it frozen), and the cgroup is thawed.  Where no
freezer can be written, /out is copied right after the dump, as close to it as can be.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
CGROUP_ROOT = Path("/sys/fs/cgroup")
FREEZE_WAIT = 10.0  # seconds for a cgroup to report frozen (tasks in uninterruptible sleep delay it)


class Freezer:
    def __init__(self, state: Path, *, v2: bool) -> None:
        self.state, self.v2 = state, v2

    def freeze(self) -> bool:
        """Freeze and wait until every task is frozen; False (thawed again) if it never is."""
        try:
            self.state.write_text("1" if self.v2 else "FROZEN")
            deadline = time.monotonic() + FREEZE_WAIT
            while not self._frozen():
                if time.monotonic() > deadline:
                    self.thaw()
                    return False
                time.sleep(0.01)
        except OSError:
            return False
        return True

    def _frozen(self) -> bool:
        if self.v2:
            events = (self.state.parent / "cgroup.events").read_text().split()
            return "frozen" in events and events[events.index("frozen") + 1] == "1"
        return self.state.read_text().strip() == "FROZEN"

    def thaw(self) -> None:
        with contextlib.suppress(OSError):
            self.state.write_text("0" if self.v2 else "THAWED")


def freezer(cgroup_path: str, root: Path = CGROUP_ROOT) -> Freezer | None:
    """The freezer of the cgroup podman names (``.State.CgroupPath``), None where none is writable."""
    rel = cgroup_path.strip().lstrip("/")
    if not rel:
        return None
    if (root / "cgroup.controllers").is_file():  # the unified hierarchy
        return Freezer(root / rel / "cgroup.freeze", v2=True) if (root / rel / "cgroup.freeze").is_file() else None
    v1 = root / "freezer" / rel / "freezer.state"
    return Freezer(v1, v2=False) if v1.is_file() else None


def copy_outputs(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def frozen_dump(cgroup_path: str, outputs: tuple[Path, Path] | None, dump: Callable[[], T]) -> T:
    """Run ``dump`` with ``outputs`` (the container's /out, where to copy it) copied while the
    cgroup is frozen, or right after the dump where it cannot be frozen."""
    if outputs is None:
        return dump()
    f = freezer(cgroup_path)
    if f is None or not f.freeze():
        result = dump()
        copy_outputs(*outputs)
        return result
    try:
        copy_outputs(*outputs)
        return dump()
    finally:
        f.thaw()

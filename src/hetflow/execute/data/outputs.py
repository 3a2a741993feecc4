"""Accepting a step's outputs: check, hash, and move into place atomically."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from hetflow.execute.data import fencing
from hetflow.state import OutputRecord


def sha256_of(path: Path) -> str:
    """A file's sha256; for a directory, the sha256 of its sorted "relpath hash" lines."""
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            h.update(f"{p.relative_to(path).as_posix()} {sha256_of(p)}\n".encode())
        return h.hexdigest()
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def missing_outputs(out_dir: Path, declared: Sequence[str]) -> list[str]:
    return [o for o in declared if not (out_dir / o).exists()]


def accept_outputs(
    run_id: str, step: str, staging: Path, final: Path, declared: Sequence[str], *, attempt: int, tidy: bool = True
) -> list[OutputRecord]:
    """Hash the declared outputs in ``staging`` and rename the directory to ``final``.

    The rename is atomic on one file system: readers see the old outputs or the new
    ones, never half of them.  An old ``final`` is moved aside first and removed after.
    Only while the step's fencing token names ``attempt`` (``fencing``: checked under the
    step's lock, with the rename); ``fencing.Fenced`` when it names another.  ``tidy``:
    ``staging``'s folder is the attempt's own, removed once empty (a batch's is not)."""
    records = [
        OutputRecord(run_id, step, o, sha256_of(staging / o), _size(staging / o), str(final / o)) for o in declared
    ]
    if staging == final:  # already in place (resume after a crash between rename and commit)
        return records
    with fencing.locked(final):
        fencing.check(final, staging, attempt)
        move_into_place(staging, final, tidy=tidy)
    return records


def move_into_place(staging: Path, final: Path, *, tidy: bool = True) -> None:
    """Rename ``staging`` to ``final``: an old ``final`` is moved aside first and removed
    after (the Slurm job script does the same in shell: ``backends.slurm.publish``)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    trash = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final, trash)
    os.replace(staging, final)
    shutil.rmtree(trash, ignore_errors=True)
    if tidy:
        with contextlib.suppress(OSError):  # the attempt's now-empty directory
            staging.parent.rmdir()


def missing_message(missing: Sequence[str]) -> str:
    """Why an attempt that exited 0 failed, on every backend (the Slurm job script prints it too)."""
    return "exited 0 but did not write declared output(s) " + ", ".join(missing) + " under /out"


def damaged_outputs(records: Sequence[OutputRecord]) -> list[str]:
    """Names of recorded outputs that are gone or whose content changed."""
    bad = []
    for r in records:
        p = Path(r.path)
        if not p.exists() or sha256_of(p) != r.sha256:
            bad.append(r.name)
    return bad

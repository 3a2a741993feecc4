"""Publishing into a host folder: each step of a publish set, for one file.

``stage`` writes the file beside its target (``.NAME.TOKEN.hetflow-tmp``, fsynced: a copy, or
a hard link for ``mode: link``); ``lock`` holds an flock on ``.hetflow-publish.lock`` in a
target's folder, so two runs publishing there take turns (the lock lives in the folder, not
under HETFLOW_HOME, so runs with other HETFLOW_HOMEs, or on other machines sharing the folder,
take turns too: Linux maps flock to POSIX locks on NFS); ``judge`` applies the rule; ``apply``
keeps what it replaces (a hard link ``.NAME.TOKEN.hetflow-old``: the old file's inode stays
whole whatever the rename does) and renames the staged file into place; ``undo`` puts a target
back as it was, after a failure later in the set or from a journal a killed executor left;
``clean`` removes the staged file and the kept copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from hetflow.execute.data.inputs import sha256_file
from hetflow.execute.data.publishing.rule import KEPT_SUFFIX, LOCK_NAME, TMP_SUFFIX, By, Entry, Ledger, Verdict, decide
from hetflow.state import PublishRecord


def staged(e: Entry) -> Path:
    return Path(e.beside(TMP_SUFFIX))


def kept(e: Entry) -> Path:
    return Path(e.beside(KEPT_SUFFIX))


def stage(e: Entry, uid: int, gid: int) -> None:
    """The file to rename into place, in the target's folder: a hard link to the run's output
    for ``mode: link`` (a copy across file systems), else a copy owned by the submitter."""
    target, tmp = Path(e.target), staged(e)
    target.parent.mkdir(parents=True, exist_ok=True)
    if e.mode == "link":
        try:
            os.link(e.src, tmp)
            return
        except OSError:
            pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    try:
        shutil.copyfile(e.src, tmp)
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)  # the submitter owns what is published for them
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def lock(path: Path) -> Iterator[None]:
    """An exclusive flock on the lock file ``path`` (created if missing; read-only is enough
    for flock, so another user who may write the folder but not the lock file can still take
    it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def lock_files(entries: list[Entry]) -> list[Path]:
    """The target folders' lock files, each once, in one order for every publisher (no
    deadlock between two runs publishing to the same folders)."""
    return sorted({Path(os.path.realpath(Path(e.target).parent)) / LOCK_NAME for e in entries if not e.s3})


def judge(e: Entry, ledger: Ledger | None, by: By | None) -> tuple[Verdict, PublishRecord | None]:
    target = Path(e.target)
    present = target.exists() or target.is_symlink()
    regular = present and target.is_file() and not target.is_symlink()
    there = sha256_file(target) if regular else ""
    record = ledger.published(e.key) if ledger is not None and present else None
    verdict = decide(
        mode=e.mode,
        present=present,
        regular=regular,
        identical=there == e.sha256,
        unchanged=record is not None and there == record.sha256,
        record=record,
        workflow=by.workflow if by is not None else "",
        folder=present and target.is_dir() and not target.is_symlink(),
    )
    return verdict, record


def apply(e: Entry) -> None:
    """Put the staged file in place, keeping what it replaces until the whole set is in."""
    target = Path(e.target)
    if e.action == "replace":
        _keep(target, kept(e))
    os.replace(staged(e), target)
    _fsync_dir(target.parent)


def undo(e: Entry) -> None:
    """Put ``e``'s target back as it was before its publish: the kept copy back in place, a
    file this publish wrote removed.  Safe to run on any state a crash can leave: a target
    that is neither what was there (the kept copy's inode) nor what was published is someone
    else's later file, left alone."""
    target, copy, tmp = Path(e.target), kept(e), staged(e)
    if e.action == "replace" and copy.exists():
        if not (target.exists() or target.is_symlink()) or _same(target, copy) or _ours(target, e):
            os.replace(copy, target)
    elif e.action == "write" and not tmp.exists() and _ours(target, e):
        target.unlink()
    _fsync_dir(target.parent)


def clean(e: Entry) -> None:
    """Remove the staged file and the kept copy, where they are."""
    staged(e).unlink(missing_ok=True)
    kept(e).unlink(missing_ok=True)


def leftovers(e: Entry) -> list[str]:
    """The staged file and the kept copy, where a killed publish left them."""
    return [str(p) for p in (staged(e), kept(e)) if p.exists() or p.is_symlink()]


def _keep(target: Path, copy: Path) -> None:
    """``copy`` becomes another name of ``target``'s inode (a copy where hard links fail)."""
    copy.unlink(missing_ok=True)
    try:
        os.link(target, copy, follow_symlinks=False)
    except OSError:
        if target.is_symlink():
            os.symlink(os.readlink(target), copy)
        else:
            shutil.copy2(target, copy)


def _same(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.lstat(a), os.lstat(b)
    except FileNotFoundError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _ours(target: Path, e: Entry) -> bool:
    """Whether ``target`` holds the bytes this publish put there."""
    return target.is_file() and not target.is_symlink() and sha256_file(target) == e.sha256


def _fsync_dir(folder: Path) -> None:
    """A rename survives a crash once its folder is synced."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

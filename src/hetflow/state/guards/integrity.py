"""Is the store the one that was there, whole, and is its disk full?

- A damaged store (a page overwritten, a disk that lost a write) is found on open by
  ``PRAGMA quick_check`` (https://sqlite.org/pragma.html#pragma_quick_check: the integrity
  check without its index-content pass; O(N) in the file's size) and refused for writing,
  with how to recover it, before hetflow writes over what can still be saved.  A store found
  whole is not checked again while its files are unchanged (``state.db.checked`` keeps their
  size, mtime and inode, and the WAL's: ``file_stamp``), so `hetflow ps` on a store of 1,000
  runs does not pay the 0.1-0.2 s check every time; any write makes the next open check
  (damage that changes neither size nor mtime, a disk's own, waits for the next write).
- A store that went missing or empty (deleted, truncated, a restore that skipped it) is not
  silently replaced by an empty one while evidence says one existed: the ``state.db.id``
  file written beside it when it is created, or run folders under ``$HETFLOW_HOME/runs``.
  ``HETFLOW_NEW_STORE=1`` accepts a fresh store there.
- A full disk under the store fails a write with SQLITE_FULL; ``StoreFull`` names the disk.
  A ballast file, ``state.db.reserve`` (``RESERVE`` bytes, written when a writer opens the
  store), is given up then, so the executor can still record that it stopped the run.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from collections.abc import Mapping
from pathlib import Path

from hetflow.errors import StateError

NEW_STORE_ENV = "HETFLOW_NEW_STORE"
QUICK_CHECK_LINES = 5  # of quick_check's findings, this many are quoted
# Room for the executor to record a stop when the store's disk is full: ~250 WAL frames of
# 4 KiB, far more than stopping a run writes (a few pages per attempt).
RESERVE = 1 << 20


class StoreFull(StateError):
    """The store (or a file hetflow writes) could not be written: its disk is full."""


class StoreDamaged(StateError):
    """The store file is damaged: refused for writing."""


def id_file(db: Path) -> Path:
    return db.with_name(db.name + ".id")


def damaged_message(db: Path, detail: str) -> str:
    new = db.with_name("recovered.db")
    return (
        f"the state store {db} is damaged ({detail}); hetflow will not write to it. Save what it holds into a"
        f" new file: 'sqlite3 {db} .recover | sqlite3 {new}' (where .recover answers 'SQL logic error', as Debian"
        f" 12's sqlite3 does: 'sqlite3 {db} .dump | sed \"$ s/^ROLLBACK;.*/COMMIT;/\" | sqlite3 {new}'), then move"
        f" {db} away (keep it) and {new} to {db}; or move {db} away and run with {NEW_STORE_ENV}=1 to start an"
        " empty store (run history and the cache index are lost)"
    )


def quick_check(db: sqlite3.Connection) -> list[str]:
    """SQLite's quick_check findings, each on one line; empty when the store is whole."""
    rows = [" ".join(str(r[0]).split()) for r in db.execute("PRAGMA quick_check").fetchall()]
    return [] if rows == ["ok"] else rows


def checked_file(db: Path) -> Path:
    return db.with_name(db.name + ".checked")


def file_stamp(db: Path) -> str:
    """The store's files as they are now: size, mtime and inode of the file and of its WAL
    (a WAL that is absent or empty counts as none: the last connection's close removes it)."""
    parts = []
    for f in (db, db.with_name(db.name + "-wal")):
        try:
            st = f.stat()
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}" if st.st_size or f == db else "-")
    return " ".join(parts)


def check_whole(db: sqlite3.Connection, path: Path) -> None:
    """quick_check, unless the store's files are as they were when it last found them whole."""
    stamp = file_stamp(path)
    try:
        if checked_file(path).read_text(encoding="utf-8").strip() == stamp:
            return
    except OSError:
        pass
    _quick_check_or_refuse(db, path)
    try:
        part = checked_file(path).with_name(f".{checked_file(path).name}.{os.getpid()}")
        part.write_text(stamp + "\n", encoding="utf-8")
        os.replace(part, checked_file(path))
    except OSError:
        pass  # not kept: the next open checks again


def _quick_check_or_refuse(db: sqlite3.Connection, path: Path) -> None:
    try:
        problems = quick_check(db)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise
        problems = [str(exc)]
    if problems:
        detail = "; ".join(problems[:QUICK_CHECK_LINES]) + (" ..." if len(problems) > QUICK_CHECK_LINES else "")
        raise StoreDamaged(damaged_message(path, f"quick_check: {detail}"))


def _is_empty(db: Path) -> bool:
    try:
        return db.stat().st_size == 0
    except FileNotFoundError:
        return True


def evidence(db: Path) -> str | None:
    """What says a store existed at ``db`` before, or None for a truly new place."""
    marker = id_file(db)
    if marker.is_file():
        return f"{marker} says a store was created here"
    runs = db.parent / "runs"
    try:
        if runs.is_dir() and any(p.is_dir() for p in runs.iterdir()):
            return f"{runs} holds the folders of earlier runs"
    except OSError:
        return None
    return None


def refuse_replacing(db: Path, env: Mapping[str, str] | None = None) -> None:
    """Refuse to create a store where one is missing or empty but evidence says it existed."""
    env = os.environ if env is None else env
    if not _is_empty(db) or env.get(NEW_STORE_ENV, "") not in ("", "0"):
        return
    why = evidence(db)
    if why is None:
        return
    state = "is empty (0 bytes)" if db.exists() else "is missing"
    raise StateError(
        f"the state store {db} {state}, but {why}: hetflow will not start a new empty store in its place"
        f" (run history and the cache index would be lost). Restore {db} from a backup, or run again with"
        f" {NEW_STORE_ENV}=1 to accept a fresh, empty store"
    )


def write_id(db: Path, store_id: str) -> None:
    """Leave the marker that a store exists at ``db`` (written once, atomically)."""
    marker = id_file(db)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}")
    tmp.write_text(store_id + "\n")
    os.replace(tmp, marker)


def new_id() -> str:
    return uuid.uuid4().hex


# --- full disks ---------------------------------------------------------------------


def reserve_file(db: Path) -> Path:
    return db.with_name(db.name + ".reserve")


def ensure_reserve(db: Path) -> None:
    """Keep ``RESERVE`` bytes of real blocks (zeros, not a sparse file) beside the store;
    on a disk too full for them, go on without (the next open tries again)."""
    target = reserve_file(db)
    try:
        if target.stat().st_size >= RESERVE:
            return
    except FileNotFoundError:
        pass
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            f.write(b"\0" * RESERVE)  # file systems count written blocks at write(), no fsync needed
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)


def release_reserve(db: Path) -> bool:
    """Give the reserve's blocks back to a full disk; whether there was one."""
    try:
        reserve_file(db).unlink()
    except OSError:
        return False
    return True


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def megabytes(n: float) -> str:
    """``n`` bytes as '12.3 MB', as every disk message says them."""
    return f"{n / 1e6:.1f} MB"


def free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(mount_point(path)).free
    except OSError:
        return None


def disk_room(path: Path, free: str = "free") -> tuple[Path, str]:
    """The mount point of the disk holding ``path`` and its room in words: '0.0 MB free of
    8.4 MB' (``free`` is the middle word: 'free now'), or 'its size unknown'.  The one reading
    of a disk's room that the store's and a step's out-of-disk messages share."""
    mount = mount_point(path)
    try:
        usage = shutil.disk_usage(mount)
    except OSError:
        return mount, "its size unknown"
    return mount, f"{megabytes(usage.free)} {free} of {megabytes(usage.total)}"


def disk_full_message(path: Path, need: int | None = None) -> str:
    """'the disk at /mnt (holding PATH) is full: 0.0 MB free of 8.4 MB; free at least ...'"""
    mount, room = disk_room(path)
    wanted = f"free at least {megabytes(need)} there" if need else "free space there"
    return f"the disk at {mount} (holding {path}) is full: {room}; {wanted}"


def is_full(exc: BaseException) -> bool:
    """SQLITE_FULL, or an OSError ENOSPC / EDQUOT."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (28, 122)  # ENOSPC, EDQUOT (errno.h)


def is_corrupt(exc: BaseException) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return isinstance(exc, sqlite3.DatabaseError) and (
        name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)
    )

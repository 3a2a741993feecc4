"""The store is its user's alone: ``state.db`` holds every run's ``env:`` values and params.

SQLite creates a database with the process's umask (0644 under the usual 022) and gives the
``-wal``, ``-shm`` and ``-journal`` files it makes beside it the database's own mode (its unix
VFS, ``findCreateFileMode``).  So the file is made 0600 before SQLite first opens it, and a
store an older hetflow made world-readable is narrowed when a writer opens it (issue 38).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["STORE_MODE", "create_private", "make_private"]

STORE_MODE = 0o600
_BESIDE = ("-wal", "-shm", "-journal")


def create_private(db: Path) -> None:
    """Make ``db`` (empty: SQLite takes a zero-length file for a new database) with mode 0600,
    unless it is there already."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, STORE_MODE))


def make_private(db: Path) -> None:
    """Narrow ``db`` and the files SQLite keeps beside it to 0600 where they are wider.  One
    this process may not change (another user's) is left as it is: reading it still works."""
    for path in (db, *(db.with_name(db.name + suffix) for suffix in _BESIDE)):
        try:
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                os.chmod(path, STORE_MODE)
        except OSError:  # gone meanwhile (a -journal), or not ours
            continue

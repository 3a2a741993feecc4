"""What hetflow published where, mixed into ``Store`` (one connection, one ``_tx``): the
record ``execute.data.publishing.publish`` reads to know a target is its own earlier result (same workflow,
content unchanged since) that it may replace.  The table is added where it is missing
(presence-keyed, like every migration), by the store's open."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from hetflow.state.models import PublishRecord

PUBLISHED_TABLE = """CREATE TABLE IF NOT EXISTS published (
  target TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL, run_id TEXT NOT NULL,
  step TEXT NOT NULL, workflow TEXT NOT NULL, time REAL NOT NULL, etag TEXT NOT NULL DEFAULT '')"""


class PublishRows:
    """Publish records: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_published(self) -> None:
        """Add the ``published`` table where it is missing; a store that has it is not
        written to (readers such as ``hetflow ps`` never wait on this)."""
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'published'").fetchone():
            return
        with self._tx(immediate=True) as db:
            db.execute(PUBLISHED_TABLE)

    def published(self, target: str) -> PublishRecord | None:
        """The last record of ``target``; None when hetflow (this store) never published there."""
        try:
            row = self._db.execute("SELECT * FROM published WHERE target = ?", (target,)).fetchone()
        except sqlite3.OperationalError:  # a read-only view of a store from before the table
            return None
        return None if row is None else PublishRecord(**dict(row))

    def record_published(self, *records: PublishRecord) -> None:
        """Each of ``records`` is now what lies at its target (replacing any earlier record of
        it), all in one transaction: a step's publish set is recorded whole or not at all."""
        with self._tx(immediate=True) as db:
            db.executemany(
                "INSERT OR REPLACE INTO published VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(r.target, r.sha256, r.size, r.run_id, r.step, r.workflow, r.time, r.etag) for r in records],
            )

"""Measured GPU-sharing slowdowns, mixed into ``Store`` (one connection, one ``_tx``): the
samples ``hetflow profile slowdown FILE`` reads from a ``tools/gpu-check`` run, which the
planner fits (``plan.learn_slowdown``) for the classes of that GPU model whose cluster file
sets no slowdown.  The table is added where it is missing, by the store's open."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from hetflow.state.models import SlowdownSample

SLOWDOWN_TABLE = """CREATE TABLE IF NOT EXISTS gpu_slowdowns (
  gpu_model TEXT NOT NULL, mode TEXT NOT NULL, solo REAL NOT NULL, shared REAL NOT NULL,
  load REAL NOT NULL, source TEXT NOT NULL, time REAL NOT NULL)"""


class SlowdownRows:
    """Slowdown samples: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_slowdowns(self) -> None:
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'gpu_slowdowns'").fetchone():
            return
        with self._tx(immediate=True) as db:
            db.execute(SLOWDOWN_TABLE)

    def record_slowdowns(self, samples: Sequence[SlowdownSample]) -> None:
        """Add ``samples``, replacing those read earlier from the same source (reading a
        file twice counts it once)."""
        with self._tx(immediate=True) as db:
            for source in {s.source for s in samples}:
                db.execute("DELETE FROM gpu_slowdowns WHERE source = ?", (source,))
            db.executemany(
                "INSERT INTO gpu_slowdowns VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(s.gpu_model, s.mode, s.solo, s.shared, s.load, s.source, s.time) for s in samples],
            )

    def slowdowns(self) -> list[SlowdownSample]:
        try:
            rows = self._db.execute("SELECT * FROM gpu_slowdowns ORDER BY gpu_model, mode, time, load").fetchall()
        except sqlite3.OperationalError:  # a read-only view of a store from before the table
            return []
        return [SlowdownSample(**dict(r)) for r in rows]

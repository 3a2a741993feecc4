"""The rows of a run's data, mixed into ``Store`` (one connection, one ``_tx``): fan-outs
expanded at submit or run time (``run_expansions``, replayed on resume), the cross-run
cache's entries, and remembered file hashes (schema 3)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from hetflow.state.models import CachedResult, CacheEntry, OutputRecord


def _now() -> float:
    return time.time()


class DataRows:
    """Fan-out expansions, cache entries and file hashes: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    # --- fan-out --------------------------------------------------------------------------

    def record_expansion(self, run_id: str, step: str, items_json: str) -> None:
        """A fan-out expanded before the run's steps were recorded (lists known at submit)."""
        with self._tx(immediate=True) as db:
            self._add_expansion(db, run_id, step, items_json)

    def expand_step(self, run_id: str, step: str, items: list[str], items_json: str) -> bool:
        """Replace a pending fan-out step with its items (pending, in its place), and record
        the list so a resumed run expands alike.  False when it was already expanded."""
        with self._tx(immediate=True) as db:
            row = db.execute("SELECT ord FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
            if row is None:
                return False
            at = int(row["ord"])
            db.execute("DELETE FROM steps WHERE run_id = ? AND step = ?", (run_id, step))
            if len(items) != 1:
                db.execute("UPDATE steps SET ord = ord + ? WHERE run_id = ? AND ord > ?", (len(items) - 1, run_id, at))
            db.executemany(
                "INSERT INTO steps (run_id, step, ord, state) VALUES (?, ?, ?, 'pending')",
                [(run_id, s, at + i) for i, s in enumerate(items)],
            )
            self._add_expansion(db, run_id, step, items_json)
            db.execute(
                "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, ?, ?, 'expanded', ?)",
                (run_id, step, _now(), f"fan-out {step} expanded into {len(items)} step(s)"),
            )
        return True

    @staticmethod
    def _add_expansion(db: sqlite3.Connection, run_id: str, step: str, items_json: str) -> None:
        seq = db.execute("SELECT COUNT(*) FROM run_expansions WHERE run_id = ?", (run_id,)).fetchone()[0]
        db.execute("INSERT INTO run_expansions VALUES (?, ?, ?, ?)", (run_id, seq, step, items_json))

    def expansions(self, run_id: str) -> list[tuple[str, str]]:
        """(step, items as JSON) of every fan-out expanded for the run, in order."""
        rows = self._db.execute(
            "SELECT step, items_json FROM run_expansions WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        return [(str(r["step"]), str(r["items_json"])) for r in rows]

    # --- the cross-run cache --------------------------------------------------------------

    def put_cache_entry(self, e: CacheEntry) -> None:
        now = _now()
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO cache_entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (e.key, e.workflow, e.step, e.run_id, now, now, e.size, e.key_json, e.outputs_json),
            )

    def cache_entry(self, key: str) -> CacheEntry | None:
        row = self._db.execute("SELECT * FROM cache_entries WHERE key = ?", (key,)).fetchone()
        return None if row is None else CacheEntry(**dict(row))

    def cache_entries(self, prefix: str = "") -> list[CacheEntry]:
        rows = self._db.execute(
            "SELECT * FROM cache_entries WHERE key LIKE ? ORDER BY used DESC", (prefix.lower() + "%",)
        ).fetchall()
        return [CacheEntry(**dict(r)) for r in rows]

    # Every write goes through ``_tx``: its retry waits out a busy store (``state.guards.busy``).
    def touch_cache_entry(self, key: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE cache_entries SET used = ? WHERE key = ?", (_now(), key))

    def drop_cache_entry(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM cache_entries WHERE key = ?", (key,))

    def drop_cache_entries(self, used_before: float | None) -> int:
        with self._tx() as db:
            if used_before is None:
                return db.execute("DELETE FROM cache_entries").rowcount
            return db.execute("DELETE FROM cache_entries WHERE used < ?", (used_before,)).rowcount

    def cache_step(self, run_id: str, step: str, variant: str, outputs: list[OutputRecord], reason: str) -> None:
        """The step's result came from the cache: record its outputs, and the step succeeded
        with no attempt."""
        self.cache_steps(run_id, [CachedResult(step, variant, tuple(outputs), reason, "", _now())])

    def cache_steps(self, run_id: str, results: Sequence[CachedResult]) -> None:
        """Record many steps taken from the cache in one transaction (a cached rerun of
        thousands of steps pays one commit, not two a step): each step's outputs, the step
        succeeded (if it was still pending or waiting) with its event, and each entry's last
        use.  The rows are those ``cache_step`` writes for one."""
        if not results:
            return
        with self._tx() as db:
            db.executemany("DELETE FROM outputs WHERE run_id = ? AND step = ?", [(run_id, r.step) for r in results])
            db.executemany(
                "INSERT INTO outputs VALUES (?, ?, ?, ?, ?, ?)",
                [(o.run_id, o.step, o.name, o.sha256, o.size, o.path) for r in results for o in r.outputs],
            )
            db.executemany(
                "UPDATE steps SET state = 'succeeded', variant = ?, started = ?, ended = ?, exit_code = 0, reason = ?"
                " WHERE run_id = ? AND step = ? AND state IN ('pending', 'waiting')",
                [(r.variant, r.time, r.time, r.reason, run_id, r.step) for r in results],
            )
            db.executemany(
                "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, ?, ?, 'succeeded', ?)",
                [(run_id, r.step, r.time, r.reason) for r in results],
            )
            db.executemany(
                "UPDATE cache_entries SET used = ? WHERE key = ?", [(r.time, r.key) for r in results if r.key]
            )
            db.executemany(
                "INSERT OR REPLACE INTO result_inputs VALUES (?, ?, ?, '')",
                [(run_id, r.step, json.dumps(dict(r.inputs), sort_keys=True)) for r in results if r.inputs],
            )

    # --- remembered file hashes -----------------------------------------------------------

    def file_hash(self, key: str) -> str | None:
        row = self._db.execute("SELECT sha256 FROM file_hashes WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["sha256"])

    def remember_hash(self, key: str, sha256: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO file_hashes VALUES (?, ?, ?)", (key, sha256, _now()))

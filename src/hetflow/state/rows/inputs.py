"""What each attempt's host data was when it launched, and what a step's result was made
from, mixed into ``Store`` (one connection, one ``_tx``): the rows that hold "what ran is
what was hashed" (``execute.data.watch``).

- ``attempt_inputs``: per attempt, the content digest of every ``data.`` input the attempt
  read, as hashed when it launched, and a fingerprint of those files' stat signatures (device,
  inode, size, mtime, ctime), which the executor compares again once the attempt has ended.
- ``result_inputs``: per step, the digests its recorded result was made from (the attempt
  accepted, or the cache entry taken) and, when its files changed while it ran, what changed.
  ``hetflow resume`` compares them with the data as it is then.

The tables are added where they are missing (presence-keyed, like every migration)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

DATA_CHANGED = "data-changed"  # the kind of the run events that say what changed in its data

INPUTS_TABLES = """
CREATE TABLE IF NOT EXISTS attempt_inputs (
  run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL, digests_json TEXT NOT NULL,
  fingerprint TEXT NOT NULL, PRIMARY KEY (run_id, step, attempt));
CREATE TABLE IF NOT EXISTS result_inputs (
  run_id TEXT NOT NULL, step TEXT NOT NULL, digests_json TEXT NOT NULL, changed TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, step));
"""


@dataclass(frozen=True)
class InputsSeen:
    """A step's ``data.`` inputs as one attempt saw them (``fingerprint``), or as its result was
    made from (``changed``: what changed while it ran, "" when nothing did)."""

    digests: Mapping[str, str]  # data reference -> content digest
    fingerprint: str = ""
    changed: str = ""


class InputRows:
    """Attempt and result inputs: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_inputs(self) -> None:
        """Add the tables where they are missing; a store that has them is not written to."""
        have = {
            r[0]
            for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('attempt_inputs', 'result_inputs')"
            )
        }
        if len(have) == 2:
            return
        with self._tx(immediate=True) as db:
            for statement in INPUTS_TABLES.split(";"):
                if statement.strip():
                    db.execute(statement)

    def attempt_inputs(self, run_id: str, step: str, attempt: int) -> InputsSeen | None:
        try:
            row = self._db.execute(
                "SELECT digests_json, fingerprint FROM attempt_inputs WHERE run_id = ? AND step = ? AND attempt = ?",
                (run_id, step, attempt),
            ).fetchone()
        except sqlite3.OperationalError:  # a read-only view of a store from before the table
            return None
        return None if row is None else InputsSeen(json.loads(row[0]), str(row[1]))

    def record_result_inputs(self, run_id: str, rows: Sequence[tuple[str, Mapping[str, str], str]]) -> None:
        """(step, digests, changed) of results just recorded, in one transaction."""
        if not rows:
            return
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO result_inputs VALUES (?, ?, ?, ?)",
                [(run_id, s, json.dumps(dict(d), sort_keys=True), changed) for s, d, changed in rows],
            )

    def result_inputs(self, run_id: str) -> dict[str, InputsSeen]:
        """step -> the inputs its recorded result was made from (steps that read no data, or
        recorded by a hetflow before this table, are absent)."""
        try:
            rows = self._db.execute(
                "SELECT step, digests_json, changed FROM result_inputs WHERE run_id = ?", (run_id,)
            ).fetchall()
        except sqlite3.OperationalError:
            return {}
        return {str(r[0]): InputsSeen(json.loads(r[1]), changed=str(r[2])) for r in rows}

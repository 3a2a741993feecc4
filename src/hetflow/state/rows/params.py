"""A run's effective params and where each came from, mixed into ``Store`` (one connection,
one ``_tx``): recorded at submit (``execute.submit.record.create_run``), read by ``show``,
the HTML report and the dashboard.  The table is added where it is missing, by the store's
open; a run recorded before it existed has no rows (its values are still in
``runs.params_json``, which a resume reads)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from hetflow.state.models import ParamRecord

PARAMS_TABLE = """CREATE TABLE IF NOT EXISTS run_params (
  run_id TEXT NOT NULL, name TEXT NOT NULL, value_json TEXT NOT NULL, source TEXT NOT NULL,
  PRIMARY KEY (run_id, name))"""


class ParamRows:
    """Effective params: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_params(self) -> None:
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run_params'").fetchone():
            return
        with self._tx(immediate=True) as db:
            db.execute(PARAMS_TABLE)

    def record_params(self, run_id: str, params: Mapping[str, object], sources: Mapping[str, str]) -> None:
        """The params the run was loaded with, each with where its value was written (``sources``:
        a name missing there is the workflow file's own default, "workflow")."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO run_params VALUES (?, ?, ?, ?)",
                [(run_id, n, json.dumps(v), sources.get(n, "workflow")) for n, v in params.items()],
            )

    def run_params(self, run_id: str) -> list[ParamRecord]:
        """The run's effective params in name order; a run recorded by a hetflow that kept no
        sources gives its recorded values with source "-" (unknown)."""
        rows = self._db.execute(
            "SELECT name, value_json, source FROM run_params WHERE run_id = ? ORDER BY name", (run_id,)
        ).fetchall()
        if rows:
            return [ParamRecord(r["name"], json.loads(r["value_json"]), r["source"]) for r in rows]
        row = self._db.execute("SELECT params_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        values: dict[str, object] = json.loads(row["params_json"]) if row else {}
        return [ParamRecord(n, values[n], "-") for n in sorted(values)]

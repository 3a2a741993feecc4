"""The reads a dashboard makes of the store, mixed into ``Store`` (one connection): a page
of runs with how many match, every listed run's step counts in one query, a run's last
event id.  Reads only: ``Store(path, read_only=True)`` serves them; the runs' indexes they
(and `hetflow ps`) read through are made here (``_migrate_indexes``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from hetflow.state.models import RunRecord
from hetflow.state.rows.schema import RUN_INDEXES


class Pages:
    """The paged reads of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_indexes(self) -> None:
        """The runs' (and attempts') indexes, created once in a store made before them (a write
        on that open only); a store with no attempts table (schema 1) gets the runs' alone."""
        have = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type IN ('index', 'table')")}
        statements = [s for s in filter(str.strip, RUN_INDEXES.split(";"))]
        wanted = [s for s in statements if " ON attempts " not in s or "attempts" in have]
        if not {s.split(" IF NOT EXISTS ")[1].split()[0] for s in wanted} <= have:
            with self._tx(immediate=True) as db:
                for statement in wanted:
                    db.execute(statement)

    def runs_page(
        self, *, state: str | None = None, name: str | None = None, limit: int = 50, offset: int = 0
    ) -> tuple[list[RunRecord], int]:
        """One page of runs, newest first, with the number of runs the filters match:
        ``state`` exactly, ``name`` as a case-insensitive substring of the workflow's name."""
        where, args = [], []
        if state:
            where.append("state = ?")
            args.append(state)
        if name:
            where.append("name LIKE ? ESCAPE '\\'")
            args.append("%" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        total = int(self._db.execute(f"SELECT COUNT(*) FROM runs{cond}", args).fetchone()[0])
        rows = self._db.execute(
            f"SELECT * FROM runs{cond} ORDER BY created DESC LIMIT ? OFFSET ?", (*args, limit, offset)
        ).fetchall()
        return [RunRecord(**{k: r[k] for k in RunRecord.__dataclass_fields__}) for r in rows], total

    def step_counts(self, run_ids: Iterable[str]) -> dict[str, dict[str, int]]:
        """Per run, how many of its steps are in each state (one query for a page of runs)."""
        ids = list(run_ids)
        out: dict[str, dict[str, int]] = {r: {} for r in ids}
        if not ids:
            return out
        marks = ",".join("?" * len(ids))
        for r in self._db.execute(
            f"SELECT run_id, state, COUNT(*) AS n FROM steps WHERE run_id IN ({marks}) GROUP BY run_id, state", ids
        ):
            out[r["run_id"]][r["state"]] = int(r["n"])
        return out

    def last_event_id(self, run_id: str) -> int:
        row = self._db.execute("SELECT MAX(id) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0] or 0)

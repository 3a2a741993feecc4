"""The TES service's rows, mixed into ``Store`` (one connection, one ``_tx``): its tasks (the
request as accepted, the owner, the state, the logs, the hetflow run each became) and its
users' bearer tokens (hashed).  The tables are added where missing by the store's open.

A task moves QUEUED -> INITIALIZING only through ``claim_tes_task`` (one UPDATE that names the
state it expects), so two workers, or a server and its restarted self, never start one task
twice."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

TES_TABLES = """
CREATE TABLE IF NOT EXISTS tes_tasks (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,
  name TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, created REAL NOT NULL,
  run_id TEXT, attempt INTEGER NOT NULL DEFAULT 0, gpus INTEGER NOT NULL DEFAULT 0,
  task_json TEXT NOT NULL, logs_json TEXT NOT NULL DEFAULT '[]', tags_json TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS tes_tasks_state ON tes_tasks (state, seq);
CREATE TABLE IF NOT EXISTS tes_tokens (
  user TEXT PRIMARY KEY, hash TEXT NOT NULL, admin INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL);
"""


@dataclass(frozen=True)
class TesTaskRow:
    """One TES task as stored: ``task_json`` is the request as accepted (with the server's
    fields: id, creation_time), ``logs_json`` its TaskLog list."""

    seq: int
    id: str
    owner: str
    name: str
    state: str
    created: float
    run_id: str | None
    attempt: int
    gpus: int
    task_json: str
    logs_json: str
    tags_json: str

    @property
    def tags(self) -> dict[str, str]:
        return dict(json.loads(self.tags_json))


class TesRows:
    """TES tasks and tokens: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_tes(self) -> None:
        """Add the TES tables where missing; a store that has them is not written to."""
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tes_tasks'").fetchone():
            return
        with self._tx(immediate=True) as db:
            for statement in TES_TABLES.split(";"):
                if statement.strip():
                    db.execute(statement)

    def add_tes_task(
        self, *, task_id: str, owner: str, name: str, task_json: str, tags: dict[str, str], gpus: int
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO tes_tasks (id, owner, name, state, created, task_json, tags_json, gpus)"
                " VALUES (?, ?, ?, 'QUEUED', ?, ?, ?, ?)",
                (task_id, owner, name, time.time(), task_json, json.dumps(tags), gpus),
            )

    def tes_task(self, task_id: str) -> TesTaskRow | None:
        row = self._db.execute("SELECT * FROM tes_tasks WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else TesTaskRow(**dict(row))

    def tes_tasks(
        self,
        *,
        owner: str | None = None,
        states: Iterable[str] = (),
        name_prefix: str = "",
        before_seq: int | None = None,
        ascending: bool = False,
        chunk: int = 500,
    ) -> Iterator[TesTaskRow]:
        """Tasks newest first (``ascending``: oldest first), in chunks, filtered by owner,
        states and name prefix; ``before_seq``: only those older than it (a page token)."""
        where, args = _where(owner, tuple(states), name_prefix)
        order = "ASC" if ascending else "DESC"
        cursor = before_seq
        while True:
            bound: list[str] = []
            bound_args: list[Any] = []
            if cursor is not None:
                bound.append("seq > ?" if ascending else "seq < ?")
                bound_args.append(cursor)
            clause = " AND ".join([*where, *bound]) or "1"
            rows = self._db.execute(
                f"SELECT * FROM tes_tasks WHERE {clause} ORDER BY seq {order} LIMIT ?", (*args, *bound_args, chunk)
            ).fetchall()
            for row in rows:
                yield TesTaskRow(**dict(row))
            if len(rows) < chunk:
                return
            cursor = int(rows[-1]["seq"])

    def claim_tes_task(self, task_id: str, expect: str, state: str, **fields: Any) -> bool:
        """Move the task from ``expect`` to ``state`` (and set ``fields``); False when it was not
        in ``expect`` (another worker took it, or it was canceled meanwhile)."""
        sets = ", ".join(["state = ?", *(f"{k} = ?" for k in fields)])
        with self._tx() as db:
            cur = db.execute(
                f"UPDATE tes_tasks SET {sets} WHERE id = ? AND state = ?", (state, *fields.values(), task_id, expect)
            )
            return cur.rowcount == 1

    def set_tes_task(self, task_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE tes_tasks SET {sets} WHERE id = ?", (*fields.values(), task_id))

    def tes_total(self, states: Iterable[str] = ()) -> int:
        """How many tasks are in ``states`` (every task when none are named)."""
        where, args = _where(None, tuple(states), "")
        clause = " AND ".join(where) or "1"
        return int(self._db.execute(f"SELECT COUNT(*) FROM tes_tasks WHERE {clause}", args).fetchone()[0])

    def tes_counts(self, states: Iterable[str]) -> dict[str, tuple[int, int]]:
        """Per owner: (tasks, GPUs) in ``states``."""
        wanted = tuple(states)
        marks = ",".join("?" * len(wanted))
        rows = self._db.execute(
            f"SELECT owner, COUNT(*) AS n, SUM(gpus) AS g FROM tes_tasks WHERE state IN ({marks}) GROUP BY owner",
            wanted,
        ).fetchall()
        return {str(r["owner"]): (int(r["n"]), int(r["g"] or 0)) for r in rows}

    def set_tes_token(self, user: str, digest: str, *, admin: bool) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO tes_tokens VALUES (?, ?, ?, ?)", (user, digest, int(admin), time.time()))

    def tes_tokens(self) -> dict[str, tuple[str, bool]]:
        """user -> (token hash, admin)."""
        rows = self._db.execute("SELECT user, hash, admin FROM tes_tokens").fetchall()
        return {str(r["user"]): (str(r["hash"]), bool(r["admin"])) for r in rows}


def _where(owner: str | None, states: tuple[str, ...], name_prefix: str) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if owner is not None:
        where.append("owner = ?")
        args.append(owner)
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(states)
    if name_prefix:
        where.append("substr(name, 1, ?) = ?")
        args.extend([len(name_prefix), name_prefix])
    return where, args

"""SQLite state store (stdlib sqlite3, WAL), shared by every hetflow process on a host.

WAL lets ``hetflow ps`` read while a run writes; ``busy_timeout`` and, past it, the retry
around every write transaction (``state.guards.busy``) make concurrent writers (several ``hetflow
run`` at once, or a person's open ``sqlite3`` shell) wait instead of failing.  GPU leases live
here too, so a GPU's holders (one whole, or its time-slicing / MPS tenants, or one per
MIG instance) are the same for every process on the host.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from hetflow.errors import StateError
from hetflow.state.guards.busy import BusySettings, is_busy, retry_busy, say_on_stderr
from hetflow.state.guards.integrity import (
    StoreDamaged,
    StoreFull,
    check_whole,
    damaged_message,
    disk_full_message,
    ensure_reserve,
    free_bytes,
    id_file,
    is_corrupt,
    is_full,
    new_id,
    refuse_replacing,
    release_reserve,
    write_id,
)
from hetflow.state.guards.private import create_private, make_private
from hetflow.state.models import (
    STEP_COLUMNS,
    STEP_TRANSITIONS,
    Event,
    RunRecord,
    StepRecord,
    step_record,
)
from hetflow.state.rows.attempts import AttemptRows
from hetflow.state.rows.data import DataRows
from hetflow.state.rows.inputs import InputRows
from hetflow.state.rows.leases import Leases
from hetflow.state.rows.pages import Pages
from hetflow.state.rows.params import ParamRows
from hetflow.state.rows.published import PublishRows
from hetflow.state.rows.schema import SCHEMA, SCHEMA_DATA, SCHEMA_VERSION
from hetflow.state.rows.slowdowns import SlowdownRows
from hetflow.state.rows.tes import TesRows

OPEN_WAIT = 30.0  # seconds a new process waits for a store another one holds locked
T = TypeVar("T")


def _now() -> float:
    return time.time()


class Store(AttemptRows, Leases, Pages, DataRows, InputRows, PublishRows, SlowdownRows, TesRows, ParamRows):
    """One connection per process; every write is its own short transaction."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        """``read_only``: a reader that can never change the store (a dashboard): SQLite's
        ``mode=ro`` plus ``query_only``; it creates and migrates nothing, so the store must exist.

        A writer waits out a busy store (``busy.retry_busy``), refuses a damaged one
        (``integrity.check_whole``) and will not replace a missing or empty one where one was
        (``integrity.refuse_replacing``)."""
        self.path = path
        self.read_only = read_only
        self.busy = BusySettings.from_env()
        self.say: Callable[[str], None] = say_on_stderr  # where "state store busy" messages go
        if read_only:
            self._open_read_only(path)
            return
        refuse_replacing(path)
        deadline = time.monotonic() + OPEN_WAIT
        while True:
            try:
                self._open(path)
                ensure_reserve(path)
                return
            except sqlite3.OperationalError as exc:
                locked = is_busy(exc)
                with contextlib.suppress(AttributeError, sqlite3.Error):
                    self._db.close()
                if locked and time.monotonic() < deadline:
                    # Two processes opening a new store at once: switching it to WAL or creating the
                    # schema takes a lock that SQLite's busy handler does not always wait for.
                    time.sleep(0.05)
                    continue
                if locked:
                    raise StateError(
                        f"the state store {path} stayed locked for {OPEN_WAIT:g} s; is another hetflow stuck?"
                    ) from None
                if is_full(exc):
                    raise StoreFull(f"cannot open the state store: {disk_full_message(path)}") from None
                raise StateError(f"cannot open the state store {path}: {exc}") from None
            except StateError:
                with contextlib.suppress(AttributeError, sqlite3.Error):
                    self._db.close()
                raise
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(AttributeError, sqlite3.Error):
                    self._db.close()
                raise StoreDamaged(damaged_message(path, str(exc))) from None

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_private(path)  # 0600 before SQLite makes it with the umask (private.py)
        # isolation_level=None: we issue BEGIN ourselves (BEGIN IMMEDIATE for leases).
        self._db = sqlite3.connect(str(path), timeout=self.busy.busy_timeout, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        make_private(path)  # a store (and -wal, -shm) an older hetflow made world-readable
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA busy_timeout={int(self.busy.busy_timeout * 1000)}")
        new = not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
        if not new:
            check_whole(self._db, path)  # before anything is written to it
        # Only a new store is written to on open, so readers (ps, show) never wait on a writer.
        self._migrate()
        if new:
            self._db.executescript(SCHEMA + SCHEMA_DATA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (new_id(),))
        if new or not id_file(path).exists():
            # the marker that a store exists here (an older hetflow's store gets it on its first open)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
            try:
                write_id(path, str(row[0]) if row else new_id())
            except OSError as exc:
                if is_full(exc):
                    raise StoreFull(f"cannot open the state store: {disk_full_message(path)}") from None
                raise StateError(f"cannot write {id_file(path)}: {exc.strerror}") from None
        self._migrate_published()  # old and new stores alike (issue 22: publish records)
        self._migrate_slowdowns()  # measured GPU-sharing slowdowns (tools/gpu-check)
        self._migrate_node_fault()  # attempts lost with their node: the budget survives resume
        self._migrate_inputs()  # what each attempt's data was at launch (issue 37)
        self._migrate_tes()  # the TES service's tasks and tokens (issue 41)
        self._migrate_params()  # each run's effective params and their sources (issue 42)
        self._migrate_indexes()  # runs newest first without a sort (issue 43)

    def _open_read_only(self, path: Path) -> None:
        if not path.is_file():
            raise StateError(
                f"no state store at {path}: nothing has run yet (set HETFLOW_HOME to where runs were made)"
            )
        try:
            self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA query_only=ON")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StateError(f"cannot read the state store {path}: {exc}") from None

    def _migrate(self) -> None:
        """Upgrade a store written by an older hetflow in place; a new store skips this.

        Before backends existed runs had no backend columns (schema 1 without them); before
        schema 2 a run's plan was not stored and events had no typed data.  A run from
        then has no stored plan: resuming it plans again, as that hetflow did."""
        cols = {r["name"] for r in self._db.execute("PRAGMA table_info(runs)")}
        if not cols:
            return  # a new store: SCHEMA creates everything
        if "backend" not in cols:
            self._db.execute("ALTER TABLE runs ADD COLUMN backend TEXT NOT NULL DEFAULT 'local'")
            self._db.execute("ALTER TABLE runs ADD COLUMN backend_json TEXT NOT NULL DEFAULT '{}'")
        event_cols = {r["name"] for r in self._db.execute("PRAGMA table_info(events)")}
        if event_cols and "data" not in event_cols:
            with self._tx(immediate=True) as db:
                db.execute("ALTER TABLE events ADD COLUMN data TEXT NOT NULL DEFAULT '{}'")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS run_plans"
                    " (run_id TEXT PRIMARY KEY REFERENCES runs(id), plan_json TEXT NOT NULL)"
                )
                db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" in tables and "run_expansions" not in tables:
            self._db.executescript(SCHEMA_DATA)  # schema 3: fan-out expansions, file hashes, the cache
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        self._migrate_attempt_usage()
        self._migrate_leases()
        self._migrate_workflow_version()
        self._migrate_gpu_usage()
        if "pid_start" not in cols:
            # nullable: a run claimed by an older hetflow has no start time; liveness trusts its pid
            with self._tx(immediate=True) as db:
                if "pid_start" not in {r["name"] for r in db.execute("PRAGMA table_info(runs)")}:
                    db.execute("ALTER TABLE runs ADD COLUMN pid_start INTEGER")

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction.  Always BEGIN IMMEDIATE (``immediate`` is kept for the callers
        that need it said): the write lock is taken, or waited for, at BEGIN, so no statement
        inside ever meets a busy store (in WAL mode only BEGIN and, rarely, COMMIT wait for
        another writer: https://sqlite.org/lang_transaction.html), and the one retry
        (``busy.retry_busy``) around BEGIN and COMMIT waits out any lock, however long held.
        A full disk or a damaged page fails with a StateError that says so."""
        del immediate
        nested = self._db.in_transaction  # inside ``transaction``: a savepoint, committed with it
        begun = False
        try:
            self._retry(lambda: self._db.execute("SAVEPOINT w" if nested else "BEGIN IMMEDIATE"))
            begun = True
            yield self._db
            self._retry(lambda: self._db.execute("RELEASE w" if nested else "COMMIT"))
        except BaseException as exc:
            if begun and self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    for sql in ("ROLLBACK TO w", "RELEASE w") if nested else ("ROLLBACK",):
                        self._db.execute(sql)
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._store_error(exc) from None
            raise

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """The writes inside as one commit (a batch's items); each stays whole (a savepoint)."""
        return self._tx()

    def release_reserve(self) -> bool:
        """The store's disk is full: give back the reserve (``integrity.RESERVE``) so that what
        must still be recorded (a run stopped) can be; whether there was one to give."""
        return release_reserve(self.path)

    def _retry(self, call: Callable[[], T]) -> T:
        return retry_busy(call, db=self.path, settings=self.busy, say=self.say)

    def _store_error(self, exc: sqlite3.DatabaseError) -> Exception:
        """What a failed write means to a user: a full disk, a damaged store, else the error."""
        if is_full(exc) or (
            "disk I/O error" in str(exc) and (free_bytes(self.path) or 0) < 1 << 20
        ):  # ENOSPC on the WAL can surface as an I/O error
            return StoreFull(f"the state store cannot be written: {disk_full_message(self.path)}")
        if is_corrupt(exc):
            return StoreDamaged(damaged_message(self.path, str(exc)))
        return exc

    # --- runs -------------------------------------------------------------------------

    def create_run(
        self,
        *,
        run_id: str,
        name: str,
        workflow_file: str,
        spec_json: str,
        params_json: str,
        uid: int,
        gid: int,
        workdir: str,
        steps: Iterable[str],
        backend: str = "local",
        backend_json: str = "{}",
        plan_json: str | None = None,
        expansions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Record a run, its steps (pending) and, when given, the plan it follows (JSON text:
        the store keeps it, ``plan.stored`` reads it) and the fan-outs expanded at submit."""
        now = _now()
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (id, name, workflow_file, state, created, uid, gid, workdir,"
                " spec_json, params_json, backend, backend_json) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, name, workflow_file, now, uid, gid, workdir, spec_json, params_json, backend, backend_json),
            )
            db.executemany(
                "INSERT INTO steps (run_id, step, ord, state) VALUES (?, ?, ?, 'pending')",
                [(run_id, s, i) for i, s in enumerate(steps)],
            )
            db.execute(
                "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, NULL, ?, 'created', ?)",
                (run_id, now, f"run of {name} created from {workflow_file}"),
            )
            if plan_json is not None:
                db.execute("INSERT INTO run_plans VALUES (?, ?)", (run_id, plan_json))
            for step, items_json in expansions:
                self._add_expansion(db, run_id, step, items_json)

    def plan_json(self, run_id: str) -> str | None:
        """The plan stored with the run (JSON text), or None for a run recorded without one."""
        row = self._db.execute("SELECT plan_json FROM run_plans WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else str(row["plan_json"])

    def set_plan_json(self, run_id: str, plan_json: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO run_plans VALUES (?, ?)", (run_id, plan_json))

    def resolve_run_id(self, prefix: str) -> str:
        """A full run id from a unique prefix, as docker accepts short container ids."""
        if not prefix:
            raise StateError("give a run id; 'hetflow ps --all' lists runs")
        if self._db.execute("SELECT 1 FROM runs WHERE id = ?", (prefix,)).fetchone():
            return prefix
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._db.execute(
            "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created DESC LIMIT 2", (pattern,)
        ).fetchall()
        if not rows:
            raise StateError(f"no run {prefix!r} in {self.path}; 'hetflow ps --all' lists runs")
        if len(rows) > 1:
            raise StateError(f"run id prefix {prefix!r} is ambiguous; give more characters")
        return str(rows[0]["id"])

    def run(self, run_id: str) -> RunRecord:
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StateError(f"no run {run_id!r} in {self.path}; 'hetflow ps --all' lists runs")
        return RunRecord(**{k: row[k] for k in RunRecord.__dataclass_fields__})

    def runs(self, *, include_ended: bool = True, limit: int = 200) -> list[RunRecord]:
        sql = "SELECT * FROM runs"
        if not include_ended:
            sql += " WHERE state IN ('pending', 'running')"
        rows = self._db.execute(sql + " ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
        return [RunRecord(**{k: r[k] for k in RunRecord.__dataclass_fields__}) for r in rows]

    def set_run(self, run_id: str, **fields: Any) -> None:
        allowed = {"state", "started", "ended", "pid", "pid_start", "message"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot set {bad} on a run")
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*fields.values(), run_id))

    def claim_run(self, run_id: str, pid: int, alive: Any, start: int | None = None) -> None:
        """Make ``pid`` the run's executor; refuse while another live process holds it.
        ``start`` is the process's start time (``liveness.process_start``), kept so that a
        reader can tell the executor from a later process given the same pid."""
        with self._tx(immediate=True) as db:
            row = db.execute("SELECT pid, state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StateError(f"no run {run_id!r}")
            other = row["pid"]
            if other and other != pid and row["state"] == "running" and alive(other):
                raise StateError(f"run {run_id} is being executed by process {other}; 'hetflow stop {run_id}' stops it")
            db.execute(
                "UPDATE runs SET pid = ?, pid_start = ?, state = 'running', ended = NULL,"
                " started = COALESCE(started, ?) WHERE id = ?",
                (pid, start, _now(), run_id),
            )

    # --- steps ------------------------------------------------------------------------

    def steps(self, run_id: str, states: Sequence[str] = ()) -> list[StepRecord]:
        """The run's steps in order; with ``states``, only those in one of them (filtered by SQLite)."""
        only = f" AND state IN ({', '.join('?' * len(states))})" if states else ""
        sql = f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ?{only} ORDER BY ord"
        cur = self._db.execute(sql, (run_id, *states))
        cur.row_factory = None  # tuples: ``step_record`` reads by position
        return [step_record(r) for r in cur.fetchall()]

    def progress_counts(self, run_id: str) -> tuple[int, int]:
        """(steps, succeeded steps) of the run: a cheap sign that something became ready."""
        row = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(state = 'succeeded'), 0) FROM steps WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0]), int(row[1])

    def step(self, run_id: str, step: str) -> StepRecord:
        cur = self._db.execute(f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ? AND step = ?", (run_id, step))
        cur.row_factory = None
        row = cur.fetchone()
        if row is None:
            raise StateError(f"run {run_id} has no step {step!r}")
        return step_record(row)

    def set_step(self, run_id: str, step: str, *, event: str | None = None, **fields: Any) -> None:
        """Update a step; a state change must be an allowed transition (models.STEP_TRANSITIONS)."""
        if "gpus" in fields:
            fields["gpus"] = json.dumps(list(fields["gpus"]))
        with self._tx(immediate=True) as db:
            if "state" in fields:
                row = db.execute("SELECT state FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
                if row is None:
                    raise StateError(f"run {run_id} has no step {step!r}")
                old, new = row["state"], fields["state"]
                if old != new and new not in STEP_TRANSITIONS.get(old, frozenset()):
                    raise StateError(f"step {step!r}: illegal transition {old} -> {new}")
            cols = ", ".join(f"{k} = ?" for k in fields)
            db.execute(
                f"UPDATE steps SET {cols} WHERE run_id = ? AND step = ?",
                (*fields.values(), run_id, step),
            )
            if event:
                db.execute(
                    "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, ?, ?, ?, ?)",
                    (run_id, step, _now(), fields.get("state", "update"), event),
                )

    def amend_run(
        self,
        run_id: str,
        *,
        spec_json: str,
        plan_json: str | None,
        add: Sequence[str],
        drop: Sequence[str],
        expansions: Iterable[tuple[str, str]],
        message: str,
    ) -> None:
        """A resume applied an edited workflow: its definition and plan replaced, new steps
        added (pending, after the others), removed steps' rows dropped (their attempts, outputs
        and events are kept), new fan-out expansions recorded: one transaction."""
        with self._tx(immediate=True) as db:
            db.execute("UPDATE runs SET spec_json = ? WHERE id = ?", (spec_json, run_id))
            if plan_json is not None:
                db.execute("INSERT OR REPLACE INTO run_plans VALUES (?, ?)", (run_id, plan_json))
            db.executemany("DELETE FROM steps WHERE run_id = ? AND step = ?", [(run_id, s) for s in drop])
            top = db.execute("SELECT COALESCE(MAX(ord), -1) FROM steps WHERE run_id = ?", (run_id,)).fetchone()[0]
            db.executemany(
                "INSERT INTO steps (run_id, step, ord, state) VALUES (?, ?, ?, 'pending')",
                [(run_id, s, top + 1 + i) for i, s in enumerate(add)],
            )
            for step, items_json in expansions:
                self._add_expansion(db, run_id, step, items_json)
            db.execute(
                "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, NULL, ?, 'amended', ?)",
                (run_id, _now(), message),
            )

    # --- events -----------------------------------------------------------------------

    def add_event(self, run_id: str, step: str | None, kind: str, message: str, data: str = "{}") -> None:
        """Append to the run's event stream (``state.events`` types what it reads back)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO events (run_id, step, time, kind, message, data) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, step, _now(), kind, message, data),
            )

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        rows = self._db.execute(
            "SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id", (run_id, after)
        ).fetchall()
        return [Event(**dict(r)) for r in rows]

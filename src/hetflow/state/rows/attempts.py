"""Attempts, their outputs and the measured history, mixed into ``Store`` (one connection,
one ``_tx``): what each attempt asked for and used, the outputs a success records in the
same transaction as its state, and the run times and usage the planner's profile and the
right-sizing suggestions are learned from."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from hetflow.state.models import USAGE_FIELDS, AttemptRecord, OutputRecord, UsageRow
from hetflow.state.rows.inputs import InputsSeen
from hetflow.state.rows.schema import SCHEMA_VERSION

# What an attempt's GPUs did (``execute.devices.usage``), all nullable: unknown where not sampled.
GPU_USAGE_COLUMNS = (
    ("gpu_util_mean", "REAL"),
    ("gpu_util_max", "REAL"),
    ("gpu_memory_peak", "INTEGER"),
    ("gpu_memory_of", "TEXT"),
)


class AttemptRows:
    """Attempt, output and history rows: the methods of ``Store``."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    # Schema 3's new attempt columns, all nullable: older attempts read as "unknown".
    _USAGE_COLUMNS = (
        ("cpus", "REAL"),
        ("memory", "INTEGER"),
        ("peak_memory", "INTEGER"),
        ("cpu_seconds", "REAL"),
        ("image_id", "TEXT"),
        ("run_started", "REAL"),
        ("run_ended", "REAL"),
    )

    def _add_attempt_columns(self, columns: tuple[tuple[str, str], ...], *, version: bool = False) -> None:
        """Add the nullable ``columns`` an older store's attempts lack, keyed on their
        presence, so a store half-upgraded by a crash finishes here; ``version``: record
        SCHEMA_VERSION in the same transaction."""
        have = {r["name"] for r in self._db.execute("PRAGMA table_info(attempts)")}
        if not have or all(c in have for c, _ in columns):
            return
        with self._tx(immediate=True) as db:
            have = {r["name"] for r in db.execute("PRAGMA table_info(attempts)")}  # another process may have won
            for column, sql_type in columns:
                if column not in have:
                    db.execute(f"ALTER TABLE attempts ADD COLUMN {column} {sql_type}")
            if version:
                db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    def _migrate_attempt_usage(self) -> None:
        """Schema 3: the usage columns (older attempts read as unknown)."""
        self._add_attempt_columns(self._USAGE_COLUMNS, version=True)

    def _migrate_workflow_version(self) -> None:
        """attempts.workflow_version (nullable: older attempts read as unknown)."""
        self._add_attempt_columns((("workflow_version", "INTEGER"),))

    def _migrate_gpu_usage(self) -> None:
        """attempts' GPU-usage columns (``execute.devices.usage``)."""
        self._add_attempt_columns(GPU_USAGE_COLUMNS)

    def _migrate_node_fault(self) -> None:
        """attempts.node_fault (nullable; 1: lost with its node and run again outside the step's
        retries), for old and new stores alike: the node-fault budget is counted from it; and
        attempts.native_id (nullable), the engine's own id of the attempt's job (issue 42)."""
        self._add_attempt_columns((("node_fault", "INTEGER"), ("native_id", "TEXT")))

    def node_faults(self, run_id: str, step: str) -> int:
        """How many of the step's attempts were lost with their node and run again outside its
        retries (``attempts.NODE_FAULT_REQUEUES`` bounds them, across resumes)."""
        if "node_fault" not in {r["name"] for r in self._db.execute("PRAGMA table_info(attempts)")}:
            return 0  # a store an older hetflow wrote, opened read-only
        row = self._db.execute(
            "SELECT COUNT(*) FROM attempts WHERE run_id = ? AND step = ? AND node_fault = 1", (run_id, step)
        ).fetchone()
        return int(row[0])

    # --- attempts ---------------------------------------------------------------------

    def add_attempt(self, a: AttemptRecord, inputs: InputsSeen | None = None) -> None:
        """Record the intent to launch, before the container is started; ``inputs``: its data
        inputs as its launch found them (``attempt_inputs``), in the same transaction."""
        with self._tx() as db:
            if inputs is not None:
                db.execute(
                    "INSERT OR REPLACE INTO attempt_inputs VALUES (?, ?, ?, ?, ?)",
                    (a.run_id, a.step, a.attempt, json.dumps(dict(inputs.digests), sort_keys=True), inputs.fingerprint),
                )
            db.execute(
                "INSERT OR REPLACE INTO attempts (run_id, step, attempt, variant, node, gpus, gpu_uuids,"
                " container, image, state, exit_code, started, ended, message, cpus, memory, workflow_version)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    a.run_id,
                    a.step,
                    a.attempt,
                    a.variant,
                    a.node,
                    json.dumps(list(a.gpus)),
                    json.dumps(list(a.gpu_uuids)),
                    a.container,
                    a.image,
                    a.state,
                    a.exit_code,
                    a.started,
                    a.ended,
                    a.message,
                    a.cpus,
                    a.memory,
                    a.workflow_version,
                ),
            )

    def set_usage(self, run_id: str, step: str, attempt: int, **usage: float | int | str | None) -> None:
        """Record what an attempt used (``models.USAGE_FIELDS``); None stays unknown."""
        bad = set(usage) - set(USAGE_FIELDS)
        if bad:
            raise ValueError(f"not usage fields of an attempt: {sorted(bad)}")
        if usage:
            self.set_attempt(run_id, step, attempt, **usage)

    def set_attempt(self, run_id: str, step: str, attempt: int, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE attempts SET {cols} WHERE run_id = ? AND step = ? AND attempt = ?",
                (*fields.values(), run_id, step, attempt),
            )

    def attempts(self, run_id: str, step: str | None = None) -> list[AttemptRecord]:
        sql, args = "SELECT * FROM attempts WHERE run_id = ?", [run_id]
        if step is not None:
            sql += " AND step = ?"
            args.append(step)
        rows = self._db.execute(sql + " ORDER BY step, attempt", args).fetchall()
        return [_attempt(r) for r in rows]

    def has_attempts(self, run_id: str) -> bool:
        """Whether any attempt of the run is stored (one indexed row read, not every row)."""
        return self._db.execute("SELECT 1 FROM attempts WHERE run_id = ? LIMIT 1", (run_id,)).fetchone() is not None

    # --- outputs ----------------------------------------------------------------------

    def succeed_step(
        self,
        run_id: str,
        step: str,
        attempt: int,
        outputs: list[OutputRecord],
        ended: float,
        exit_code: int,
    ) -> None:
        """Outputs, attempt and step state in one transaction: a crash leaves all or none."""
        with self._tx(immediate=True) as db:
            db.execute("DELETE FROM outputs WHERE run_id = ? AND step = ?", (run_id, step))
            db.executemany(
                "INSERT INTO outputs VALUES (?, ?, ?, ?, ?, ?)",
                [(o.run_id, o.step, o.name, o.sha256, o.size, o.path) for o in outputs],
            )
            db.execute(
                "UPDATE attempts SET state = 'succeeded', exit_code = ?, ended = ?"
                " WHERE run_id = ? AND step = ? AND attempt = ?",
                (exit_code, ended, run_id, step, attempt),
            )
            db.execute(
                "UPDATE steps SET state = 'succeeded', exit_code = ?, ended = ? WHERE run_id = ? AND step = ?",
                (exit_code, ended, run_id, step),
            )
            db.execute(
                "INSERT INTO events (run_id, step, time, kind, message) VALUES (?, ?, ?, 'succeeded', ?)",
                (
                    run_id,
                    step,
                    ended,
                    f"attempt {attempt} succeeded; {len(outputs)} output(s) recorded",
                ),
            )

    def outputs(self, run_id: str, step: str | None = None) -> list[OutputRecord]:
        sql, args = "SELECT * FROM outputs WHERE run_id = ?", [run_id]
        if step is not None:
            sql += " AND step = ?"
            args.append(step)
        return [OutputRecord(**dict(r)) for r in self._db.execute(sql + " ORDER BY step, name", args)]

    # --- measured history (the planner's profile) ---------------------------------------

    def history(self, workflow: str | None = None, newest: int | None = None) -> list[tuple[str, str, str, str, float]]:
        """Run times of succeeded attempts: (workflow, step, variant, node, seconds), newest
        first.  The planner's profile is built from these (per step, variant, node class).
        ``newest`` (with a ``workflow``): only that many of each (step, variant, node), the
        newest (what the profile keeps), each key's read backwards along the
        ``attempts_history`` index (issue 43: ``plan`` of a workflow with 1,000 past runs
        made 20,000 rows into tuples to keep 100; SQLite's window functions sort them all)."""
        sql = (
            "SELECT r.name, a.step, a.variant, a.node, a.ended - a.started FROM attempts a"
            " JOIN runs r ON r.id = a.run_id WHERE a.state = 'succeeded' AND a.ended IS NOT NULL"
        )
        args: list[str] = []
        if workflow is not None:
            sql += " AND r.name = ?"
            args.append(workflow)
            if newest is not None:
                return self._newest_history(workflow, newest)
        rows = self._db.execute(sql + f" ORDER BY {_NEWEST_FIRST}", args).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4])) for r in rows]

    def _newest_per_key(
        self, workflow: str, newest: int, cols: str
    ) -> Iterator[tuple[tuple[str, str, str], list[Any]]]:
        """Each (step, variant, node) of ``workflow``'s succeeded attempts with its ``newest``
        rows of ``cols``, newest first, read backwards along the ``attempts_history`` index."""
        join = (
            "FROM attempts a JOIN runs r ON r.id = a.run_id"
            " WHERE a.state = 'succeeded' AND a.ended IS NOT NULL AND r.name = ?"
        )
        keys = self._db.execute(f"SELECT DISTINCT a.step, a.variant, a.node {join}", [workflow]).fetchall()
        per_key = (
            f"SELECT {cols} {join} AND a.step = ? AND a.variant = ? AND a.node = ? ORDER BY {_NEWEST_FIRST} LIMIT ?"
        )
        for step, variant, node in keys:
            yield (step, variant, node), self._db.execute(per_key, [workflow, step, variant, node, newest]).fetchall()

    def _newest_history(self, workflow: str, newest: int) -> list[tuple[str, str, str, str, float]]:
        """``history(workflow, newest)``: the keys, then each key's newest rows."""
        cols = "a.ended - a.started, a.ended, a.run_id, a.attempt"
        found: list[tuple[tuple[float, str, int], tuple[str, str, str, str, float]]] = []
        for (step, variant, node), rows in self._newest_per_key(workflow, newest, cols):
            for seconds, ended, run_id, attempt in rows:
                row = (workflow, str(step), str(variant), str(node), float(seconds))
                found.append(((float(ended), str(run_id), int(attempt)), row))
        found.sort(key=lambda f: f[0], reverse=True)  # newest first, as the whole history is
        return [row for _, row in found]

    def _newest_usage(self, workflow: str, newest: int, cols: str) -> list[UsageRow]:
        """``usage_history(workflow, newest)`` along the ``attempts_history`` index: each
        (step, variant, node)'s newest rows, then each (step, variant)'s newest of those (its
        newest are among its nodes' newest), in the whole history's order."""
        by_step: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        for (step, variant, _), rows in self._newest_per_key(
            workflow, newest, f"{cols}, a.ended, a.run_id, a.step, a.attempt"
        ):
            by_step.setdefault((step, variant), []).extend(tuple(r) for r in rows)
        kept = [r for rows in by_step.values() for r in sorted(rows, key=_usage_key, reverse=True)[:newest]]
        kept.sort(key=_usage_key, reverse=True)
        return [UsageRow(*r[:8]) for r in kept]

    def usage_history(self, workflow: str | None = None, newest: int | None = None) -> list[UsageRow]:
        """Requested and used resources of succeeded attempts, newest first: what the
        right-sizing suggestions (``plan.rightsize``) are learned from.  ``newest``: only that
        many of each (workflow, step, variant), the newest (what right-sizing keeps): for one
        workflow, read along the ``attempts_history`` index; for all, chosen by a window
        (issue 43: ``plan`` of a workflow with 1,000 past runs made 20,000 rows into objects
        to keep 100; the window sorted them all, 48 ms).  Ties in ``ended``: the later run id,
        step, attempt first."""
        cols = (
            "r.name, a.step, a.variant, a.cpus, a.memory, a.peak_memory, a.cpu_seconds,"
            " COALESCE(a.run_ended - a.run_started, a.ended - a.started)"
        )
        where = "a.state = 'succeeded' AND a.ended IS NOT NULL" + ("" if workflow is None else " AND r.name = ?")
        args: list[object] = [] if workflow is None else [workflow]
        order = "a.ended DESC, a.run_id DESC, a.step DESC, a.attempt DESC"
        sql = f"SELECT {cols} FROM attempts a JOIN runs r ON r.id = a.run_id WHERE {where} ORDER BY {order}"
        if newest is None:
            return [UsageRow(*r) for r in self._db.execute(sql, args)]
        if workflow is not None:
            return self._newest_usage(workflow, newest, cols)
        ranked = (
            f"SELECT {cols}, a.ended AS o1, a.run_id AS o2, a.step AS o3, a.attempt AS o4,"
            f" ROW_NUMBER() OVER (PARTITION BY r.name, a.step, a.variant ORDER BY {order}) AS k"
            f" FROM attempts a JOIN runs r ON r.id = a.run_id WHERE {where}"
        )
        sql = f"SELECT * FROM ({ranked}) WHERE k <= ? ORDER BY o1 DESC, o2 DESC, o3 DESC, o4 DESC"
        return [UsageRow(*tuple(r)[:8]) for r in self._db.execute(sql, [*args, newest])]


# the history's order: ties in ``ended``, the later run, the later attempt first
# (``attempts_history`` holds a key's attempts in this order: a key's newest are its last)
_NEWEST_FIRST = "a.ended DESC, a.run_id DESC, a.attempt DESC"


def _usage_key(row: tuple[Any, ...]) -> tuple[float, str, str, int]:
    """A usage row's place in the history (its trailing ended, run id, step, attempt)."""
    return (float(row[8]), str(row[9]), str(row[10]), int(row[11]))


def _attempt(r: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(
        run_id=r["run_id"],
        step=r["step"],
        attempt=r["attempt"],
        variant=r["variant"],
        node=r["node"],
        gpus=tuple(json.loads(r["gpus"])),
        gpu_uuids=tuple(json.loads(r["gpu_uuids"])),
        container=r["container"],
        image=r["image"],
        state=r["state"],
        exit_code=r["exit_code"],
        started=r["started"],
        ended=r["ended"],
        message=r["message"],
        cpus=r["cpus"],
        memory=r["memory"],
        peak_memory=r["peak_memory"],
        cpu_seconds=r["cpu_seconds"],
        image_id=r["image_id"],
        run_started=r["run_started"],
        run_ended=r["run_ended"],
        # a store an older hetflow wrote, opened read-only (not migrated); sqlite3.Row's "in" tests values
        workflow_version=r["workflow_version"] if "workflow_version" in r.keys() else None,  # noqa: SIM118
        **{c: r[c] for c, _ in GPU_USAGE_COLUMNS if c in r.keys()},  # noqa: SIM118
        lost=bool(r["node_fault"]) if "node_fault" in r.keys() else False,  # noqa: SIM118
        native_id=r["native_id"] if "native_id" in r.keys() else None,  # noqa: SIM118
    )

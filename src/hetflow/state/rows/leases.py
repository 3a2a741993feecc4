"""GPU lease rows, the part of the store every hetflow process on a host shares to know
who holds which GPU: one whole, or its time-slicing / MPS tenants, or one holder per MIG
instance (schema 4: keyed on (gpu_uuid, container), with the holding's mode, share and
MIG uuid).  Whether a claim fits beside the others is the caller's arithmetic
(``plan.tenancy``), asked inside the write transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from hetflow.state.models import Lease

LEASES_TABLE = """CREATE TABLE IF NOT EXISTS gpu_leases (
  gpu_uuid TEXT NOT NULL, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL,
  container TEXT NOT NULL, pid INTEGER NOT NULL, acquired REAL NOT NULL,
  mode TEXT NOT NULL DEFAULT 'whole', share REAL NOT NULL DEFAULT 0, mig TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (gpu_uuid, container))"""


_SCHEMA_VERSION = 4  # the store's (``store.SCHEMA_VERSION``), from which leases took this shape


class Leases:
    """The lease methods of ``Store`` (mixed in: one connection, one ``_tx``)."""

    _db: sqlite3.Connection

    if TYPE_CHECKING:

        def _tx(self, immediate: bool = False) -> AbstractContextManager[sqlite3.Connection]: ...

    def _migrate_leases(self) -> None:
        """Schema 4: a lease table keyed on the GPU alone (one holder per GPU) becomes one
        keyed (gpu_uuid, container) with the holding's mode, share and MIG instance; the
        leases held then are whole GPUs, and are kept as such."""
        have = {r["name"] for r in self._db.execute("PRAGMA table_info(gpu_leases)")}
        if "mode" in have:
            return
        with self._tx(immediate=True) as db:
            have = {r["name"] for r in db.execute("PRAGMA table_info(gpu_leases)")}
            if "mode" in have:
                return  # another process won
            if not have:  # a store from before leases were kept
                db.execute(LEASES_TABLE)
                return
            db.execute("ALTER TABLE gpu_leases RENAME TO gpu_leases_v3")
            db.execute(LEASES_TABLE)
            db.execute(
                "INSERT INTO gpu_leases (gpu_uuid, run_id, step, attempt, container, pid, acquired)"
                " SELECT gpu_uuid, run_id, step, attempt, container, pid, acquired FROM gpu_leases_v3"
            )
            db.execute("DROP TABLE gpu_leases_v3")
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(_SCHEMA_VERSION),))

    def leases(self) -> list[Lease]:
        rows = self._db.execute("SELECT * FROM gpu_leases ORDER BY acquired, gpu_uuid").fetchall()
        return [_lease(r) for r in rows]

    def acquire_gpus(self, uuids: list[str], holder: Lease, stale: list[Lease]) -> bool:
        """Take every GPU in ``uuids`` whole for ``holder`` or none of them (see ``acquire``)."""
        claims = [replace(holder, gpu_uuid=u, mode="whole", share=0.0, mig="") for u in uuids]
        return self.acquire(claims, stale, lambda claim, others: not others)

    def acquire(
        self, claims: Sequence[Lease], stale: Sequence[Lease], admits: Callable[[Lease, list[Lease]], bool]
    ) -> bool:
        """Write every lease in ``claims`` (one attempt's: one container) or none of them.

        In one write transaction, each claim is shown the other holders of its GPU
        (``admits(claim, others)``: the caller's arithmetic, ``plan.tenancy``), so two
        processes racing for the last share of a GPU cannot both get it.  ``stale`` are
        leases the caller found dead (holder process gone and container not running); they
        are dropped only if still exactly as seen, so two processes cannot both reclaim one."""
        with self._tx(immediate=True) as db:
            for s in stale:
                db.execute(
                    "DELETE FROM gpu_leases WHERE gpu_uuid = ? AND container = ? AND pid = ?",
                    (s.gpu_uuid, s.container, s.pid),
                )
            for claim in claims:
                rows = db.execute(
                    "SELECT * FROM gpu_leases WHERE gpu_uuid = ? AND container != ?",
                    (claim.gpu_uuid, claim.container),
                ).fetchall()
                others = [_lease(r) for r in rows]
                if not admits(claim, others):
                    return False
            db.executemany(
                "INSERT OR REPLACE INTO gpu_leases"
                " (gpu_uuid, run_id, step, attempt, container, pid, acquired, mode, share, mig)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.gpu_uuid, c.run_id, c.step, c.attempt, c.container, c.pid, time.time(), c.mode, c.share, c.mig)
                    for c in claims
                ],
            )
            return True

    def release_gpus(self, container: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM gpu_leases WHERE container = ?", (container,))

    def adopt_leases(self, run_id: str, pid: int) -> None:
        """A resumed executor takes over the leases of its run's still-running containers."""
        with self._tx() as db:
            db.execute("UPDATE gpu_leases SET pid = ? WHERE run_id = ?", (pid, run_id))


def _lease(r: sqlite3.Row) -> Lease:
    return Lease(
        gpu_uuid=r["gpu_uuid"],
        run_id=r["run_id"],
        step=r["step"],
        attempt=r["attempt"],
        container=r["container"],
        pid=r["pid"],
        mode=r["mode"],
        share=r["share"],
        mig=r["mig"],
    )

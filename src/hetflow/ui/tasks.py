"""The dashboard's TES tasks page: the tasks ``hetflow tes serve`` keeps in the same store,
beside the runs they became (owner, state, the node and GPUs the attempt ran on).  Read from
the store only: the dashboard and the TES server are siblings and import nothing of each other."""

from __future__ import annotations

import sqlite3
from typing import Any

from hetflow.state import Store
from hetflow.ui.views import BadRequest, int_param

# the TES v1.1 task states (tesState), as the server stores them
TES_STATES = (
    "QUEUED",
    "INITIALIZING",
    "RUNNING",
    "PAUSED",
    "COMPLETE",
    "EXECUTOR_ERROR",
    "SYSTEM_ERROR",
    "CANCELING",
    "CANCELED",
    "PREEMPTED",
)
MAX_TASKS_PAGE = 200


def tasks_query(state: str | None, limit: str | None, offset: str | None) -> tuple[str | None, int, int]:
    """The task list's query parameters, checked: a bad one is a 400 that names it."""
    if state and state not in TES_STATES:
        raise BadRequest(f"state={state[:40]!r}: use one of {', '.join(TES_STATES)}")
    return state or None, int_param("limit", limit, 50, 1, MAX_TASKS_PAGE), int_param("offset", offset, 0, 0, 2**62)


def tasks_page(store: Store, state: str | None, limit: int, offset: int) -> dict[str, Any]:
    """A page of tasks, newest first: each with its owner, state, attempt, the GPUs it asked,
    and, once an attempt ran, its run and the node and GPUs of that run's last executor."""
    states = [state] if state else []
    try:
        total = store.tes_total(states)
        rows = []
        for i, row in enumerate(store.tes_tasks(states=states, chunk=limit + offset)):
            if i >= offset + limit:
                break
            if i >= offset:
                rows.append(row)
    except sqlite3.OperationalError:  # a store no TES server has written to (no tes_tasks table)
        return {"tasks": [], "total": 0, "offset": offset, "limit": limit}
    tasks = []
    for row in rows:
        node, gpus = None, []
        attempts = store.attempts(row.run_id) if row.run_id else []
        if attempts:
            last = max(attempts, key=lambda a: (a.started or 0.0, a.step))
            node, gpus = last.node, list(last.gpus)
        tasks.append(
            {
                "id": row.id,
                "name": row.name,
                "owner": row.owner,
                "state": row.state,
                "created": row.created,
                "attempt": row.attempt,
                "gpus_asked": row.gpus,
                "run_id": row.run_id,
                "node": node,
                "gpus": gpus,
            }
        )
    return {"tasks": tasks, "total": total, "offset": offset, "limit": limit}

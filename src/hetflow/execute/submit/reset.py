"""What ``hetflow resume`` resets before the run is opened again: the steps to run again go
back to pending (failed, stopped and skipped ones; a succeeded one whose recorded outputs are
gone or changed, with everything after it), the rest stay as they are."""

from __future__ import annotations

import time
from collections.abc import Callable

from hetflow.errors import StateError
from hetflow.spec import descendants
from hetflow.state import FAILED, PENDING, SKIPPED, STOPPED, SUCCEEDED, Note, Store, record


def reset_for_resume(
    store: Store,
    run_id: str,
    damaged: Callable[[str], list[str]],
    edges: dict[str, list[str]],
    *,
    only: str | None = None,
) -> list[str]:
    """Make a stopped or failed run runnable again.

    Failed, stopped and skipped steps go back to pending; a succeeded step whose
    recorded outputs are gone or changed is re-run, and so is everything downstream
    of it.  Launching/running steps are left for the runner's reconcile.  ``only``:
    retry that one failed or stopped step (and the steps skipped because of it); other
    failed steps stay failed.  Returns the steps reset."""
    reset: set[str] = set()
    steps = store.steps(run_id)
    if only is not None:
        by_name = {s.step: s for s in steps}
        if only not in by_name:
            raise StateError(f"run {run_id} has no step {only!r}; its steps: {', '.join(by_name)}")
        if by_name[only].state not in (FAILED, STOPPED):
            raise StateError(
                f"step {only!r} of run {run_id} is {by_name[only].state}: only a failed or stopped step can be retried"
            )
        reset = {only} | {d for d in descendants(edges, only) if d in by_name and by_name[d].state == SKIPPED}
    else:
        for s in steps:
            if s.state in (FAILED, STOPPED, SKIPPED):
                reset.add(s.step)
            elif s.state == SUCCEEDED:
                bad = damaged(s.step)
                if bad:
                    message = f"recorded output(s) {', '.join(bad)} missing or changed; the step runs again"
                    record(store, Note(0, run_id, time.time(), message, s.step, "damaged"))
                    reset.add(s.step)
                    reset |= descendants(edges, s.step)
    for s in steps:
        if s.step in reset and s.state != PENDING:
            store.set_step(run_id, s.step, state=PENDING, exit_code=None, ended=None, reason="", not_before=None)
    return sorted(reset)

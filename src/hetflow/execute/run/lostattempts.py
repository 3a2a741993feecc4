"""Attempts hetflow gave up, and the nodes that failed under them (issue 37: only the accepted
attempt writes).

The moment the runner gives an attempt up (failed, requeued, lost with its node), its fencing
token is taken back (``data.fencing.revoke``): whatever the attempt still does, it can never
put outputs in the step's folder, which only the attempt hetflow accepts writes.  An attempt
lost with its node (Slurm NODE_FAIL, a lost Ray node) may well go on: a node that lost only its
slurmd or its network keeps running the job and its container.  So, beyond the fence:

- its job is cancelled (scancel, the Ray keeper's cancel): the engine delivers it when it can
  reach the node (Slurm's controller kills a NODE_FAIL job once the node's slurmd answers again);
- its node is declared failed for the rest of the run: ``ClusterDispatch`` places no later
  attempt of any step there (not only the step that was on it; Slurm would hold a job pinned to
  it pending, ReqNodeNotAvail, Ray refuse it);
- its end, if it comes, is watched: a job script that finds the token gone leaves its outputs
  in its own folder marked ``discarded`` (``data.fencing.discarded_file``), and ``check``
  records that on the attempt (its message, and a ``discarded`` event), so ``hetflow show``
  tells.

What the executor session knew goes with it: a resumed run starts with no node declared failed
and watches no late end, as a retry policy's changes (``nextattempt``) start again; the fence
stays, in the shared work directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from types import MappingProxyType

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import Backend
from hetflow.execute.data.fencing import discarded_file, revoke
from hetflow.execute.data.paths import RunPaths
from hetflow.state import Note, Store, record

__all__ = ["LostAttempts"]


class LostAttempts:
    """The run's given-up attempts' fences, its failed nodes, and the late ends it watches."""

    def __init__(
        self, store: Store, run_id: str, paths: RunPaths, backend: Backend, clock: Callable[[], float]
    ) -> None:
        self.store, self.run_id, self.paths, self.backend, self.clock = store, run_id, paths, backend, clock
        # declared failed in this run (node -> the step first lost there): no later placement goes there
        self._nodes: dict[str, str] = {}
        self.nodes: Mapping[str, str] = MappingProxyType(self._nodes)  # read-only, live: ``lose`` adds
        self._watched: set[tuple[str, int]] = set()  # (step, attempt) lost with its node

    def fence(self, step: str, attempt: int) -> None:
        """The attempt is given up: it may no longer write the step's outputs."""
        revoke(self.paths.step_out(step), attempt)

    def lose(self, step: str, attempt: int, container: str, node: str | None) -> None:
        """The attempt was lost with ``node`` (None: unknown): fenced, its job cancelled, its node
        avoided by every later placement of the run, its end watched."""
        self.fence(step, attempt)
        if node:
            self._nodes.setdefault(node, step)
        self._watched.add((step, attempt))
        with contextlib.suppress(HetflowError):  # the engine may not reach it yet; the fence holds
            self.backend.cancel([container], 0)

    def check(self) -> None:
        """Record the watched attempts that ended since and had their outputs discarded."""
        for step, attempt in sorted(self._watched):
            try:
                said = discarded_file(self.paths.staging(step, attempt)).read_text().strip()
            except OSError:
                continue  # not ended, or ended without coming to put its outputs in place
            self._watched.discard((step, attempt))
            before = next((a.message for a in self.store.attempts(self.run_id, step) if a.attempt == attempt), "")
            self.store.set_attempt(self.run_id, step, attempt, message=f"{before}; {said}" if before else said)
            record(self.store, Note(0, self.run_id, self.clock(), said, step, "discarded"))

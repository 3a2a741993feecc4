"""Moving running steps: their periodic CRIU checkpoints, and ``hetflow migrate`` / ``drain``.

``Moves.turn`` runs once per pass of the runner's loop.  It queues the periodic dumps that
are due (``checkpoint.Checkpointer``, on a thread of its own) and notes the ones done; and it
answers the migration requests that ``hetflow migrate`` (or ``drain``) left in the run's
folder: the step's container is dumped (which stops it), the dump made its attempt's
checkpoint, and the attempt requeued outside the retries, so the next attempt is restored
from it: on the node asked for (``--to``), else anywhere but the node it left (a cluster),
or here again (this machine, the only node).  Each request gets an answer file the command
waits for; a step that is not running, or cannot be dumped, is answered with why.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from hetflow.errors import HetflowError, StateError
from hetflow.execute.backends.base import Checkpoints
from hetflow.execute.checkpoint import Checkpointer, CheckpointImages, write_json
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.attempts import Attempts
from hetflow.execute.settings import Settings
from hetflow.spec import Checkpoint, Workflow, format_bytes
from hetflow.state import RUN_RUNNING, RUNNING, Note, Store, executor_gone


def requests_dir(paths: RunPaths) -> Path:
    return paths.workdir / "migrate"


def request_migration(paths: RunPaths, step: str, to: str | None) -> Path:
    """Leave a request for the run's executor; returns the answer file to wait for."""
    folder = requests_dir(paths)
    folder.mkdir(parents=True, exist_ok=True)
    answer = folder / f"{step}.answer.json"
    answer.unlink(missing_ok=True)
    write_json(folder / f"{step}.request.json", {"step": step, "to": to, "asked": time.time()})
    return answer


class Moves:
    def __init__(self, attempts: Attempts, workflow: Callable[[], Workflow]) -> None:
        self.attempts, self.workflow = attempts, workflow
        backend = attempts.backend
        self.images = CheckpointImages(attempts.paths)
        self.checkpointer = (
            Checkpointer(self.images, self._setting, backend) if isinstance(backend, Checkpoints) else None
        )

    def _setting(self, step: str) -> Checkpoint | None:
        s = self.workflow().steps.get(step)
        return s.checkpoint if s is not None else None

    def turn(self) -> None:
        a = self.attempts
        if self.checkpointer is not None:
            running = [(x.step, x.attempt, x.container) for x in a.active.values() if not x.waiting]
            for done in self.checkpointer.tick(running):
                a.emit(Note(0, a.run_id, a.clock(), done.message(), done.due.step, "checkpoint"))
        folder = requests_dir(a.paths)
        if folder.is_dir():
            for request in sorted(folder.glob("*.request.json")):
                self._answer(request)

    def _answer(self, request: Path) -> None:
        try:
            asked = json.loads(request.read_text(encoding="utf-8"))
            step, to = str(asked["step"]), asked.get("to")
        except (OSError, ValueError, KeyError):
            request.unlink(missing_ok=True)
            return
        request.unlink(missing_ok=True)
        try:
            said, ok = self.migrate(step, str(to) if to else None), True
        except HetflowError as exc:
            said, ok = str(exc), False
        write_json(request.with_name(f"{step}.answer.json"), {"ok": ok, "message": said})

    def migrate(self, step: str, to: str | None) -> str:
        """Dump ``step``'s running attempt and requeue it to be restored elsewhere."""
        a = self.attempts
        # what was asked is checked before what the step is doing: a bad --to is named as such
        if to is not None and a.cluster and a.limits(to) is None:
            raise HetflowError(f"--to {to}: the run's cluster has no node (or node class) {to!r}")
        act = a.active.get(step)
        if act is None:
            state = a.store.step(a.run_id, step).state if step in self.workflow().steps else "not a step of this run"
            raise HetflowError(f"step {step!r} is not running ({state}); only a running step can be migrated")
        if to is not None and not a.cluster and to != act.node:
            raise HetflowError(
                f"--to {to}: this run uses this machine only ({act.node}); a cluster run moves between nodes"
            )
        c = self._setting(step)
        if c is None or not c.transparent:
            raise HetflowError(
                f"step {step!r} has no CRIU checkpoint (add 'checkpoint: true' to it); a step with checkpoint: "
                "{mode: app} is moved by 'hetflow stop' and 'hetflow resume' (it saves its own state)"
            )
        if not isinstance(a.backend, Checkpoints) or act.waiting:
            raise HetflowError(
                f"{act.container} cannot be checkpointed here ({act.waiting or a.backend.capabilities.name})"
            )
        with self.checkpointer.exclusive() if self.checkpointer is not None else contextlib.nullcontext():
            part = self.images.part(step, act.attempt)
            try:
                took = a.backend.checkpoint(act.container, part, leave_running=False)
            except HetflowError:
                part.unlink(missing_ok=True)
                raise
            saved = self.images.commit(step, act.attempt, act.container, part, took)
        if a.cluster:
            a.move_next(step, to, act.node)
        where = f"to {to}" if to else "off " + act.node if a.cluster else "on this machine"
        said = f"{act.container} checkpointed ({format_bytes(saved.size)} in {took:.2f}s) and migrated {where}"
        a.requeue(act, f"migrated by hetflow migrate: {said}")
        return said

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()


def migrate_step(store: Store, run_id: str, step: str, to: str | None, *, wait: float = 600) -> str:
    """``hetflow migrate``: ask the run's executor to move ``step`` and wait for its answer
    (StateError with the reason when it could not)."""
    run = store.run(run_id)
    if run.state != RUN_RUNNING or executor_gone(run):
        raise StateError(
            f"run {run_id} is {'without an executor' if run.state == RUN_RUNNING else run.state}: migrate moves a "
            f"step of a running run; 'hetflow stop --checkpoint {run_id}' then 'hetflow resume {run_id}' restores it"
        )
    answer = request_migration(RunPaths(Path(run.workdir)), step, to)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if answer.is_file():
            said = json.loads(answer.read_text(encoding="utf-8"))
            answer.unlink(missing_ok=True)
            if not said.get("ok"):
                raise StateError(f"run {run_id}: {said.get('message')}")
            return str(said.get("message"))
        if executor_gone(store.run(run_id)):
            raise StateError(f"run {run_id}'s executor ended before it answered; 'hetflow resume {run_id}' goes on")
        time.sleep(0.1)
    raise StateError(f"run {run_id}'s executor did not answer within {wait:.0f}s; the request stays for it")


def drain_node(store: Store, node: str, *, wait: float = 600) -> list[tuple[str, str, str, bool]]:
    """``hetflow drain NODE``: every running step on ``node`` (of every running run) with a
    CRIU checkpoint migrated off it; (run, step, what happened, whether it moved off) for
    every step found there.  A run on this machine only (a local run) has nowhere to move a
    step to: its checkpoint would be restored on the same node, so it is left and said so."""
    found = []
    for run in store.runs(include_ended=False):
        here = Settings.from_json(run.backend_json).leases_here
        for s in store.steps(run.id):
            if s.node != node or s.state != RUNNING:
                continue
            if here:
                said = f"left to finish there: run {run.id} uses this machine only, there is no other node to move to"
                found.append((run.id, s.step, said, False))
                continue
            try:
                found.append((run.id, s.step, migrate_step(store, run.id, s.step, None, wait=wait), True))
            except StateError as exc:
                found.append((run.id, s.step, f"left to finish there: {exc}", False))
    return found

"""A CWL invocation in hetflow's store: one run, one step per CWL job (its name plus scatter
index, as cwltool names jobs), each with its attempt, states and log, so ``hetflow ps``,
``show`` and ``logs`` read it as any run.  Steps are added as cwltool makes jobs (a scatter's
items are known only then), through ``Store.amend_run``."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from hetflow.cwl.keep.storethread import StoreThread
from hetflow.execute import Settings
from hetflow.state import (
    FAILED,
    LAUNCHING,
    PENDING,
    RUN_FAILED,
    RUN_SUCCEEDED,
    RUNNING,
    SKIPPED,
    STOPPED,
    SUCCEEDED,
    AttemptRecord,
    Store,
    pid_alive,
    process_start,
)


@dataclass(frozen=True)
class Invocation:
    """What a CWL run was asked to do, kept with it (``hetflow resume`` runs it again): the
    file, the runner's arguments and folder, the settings."""

    workflow: Path
    argv: tuple[str, ...]
    cwd: str
    settings: Settings


class Recorder:
    def __init__(self, owner: StoreThread, run_id: str) -> None:
        self.owner = owner
        self.run_id = run_id
        self._attempts: dict[str, int] = {}  # step -> the attempt this invocation runs

    @classmethod
    def reopen(cls, owner: StoreThread, run_id: str) -> Recorder:
        """The run ``run_id`` again (``hetflow resume``): this process is its executor now;
        its steps are taken up as cwltool makes their jobs again (``_add_step``)."""
        pid = os.getpid()
        owner.call(lambda store: store.claim_run(run_id, pid, pid_alive, start=process_start(pid)))
        owner.call(lambda store: store.set_run(run_id, message=""))
        return cls(owner, run_id)

    def next_attempt(self, step: str) -> int:
        """The attempt a job of ``step`` runs as: 1, or one after those a resumed run recorded."""
        done = self.owner.call(lambda store: len(store.attempts(self.run_id, step)))
        self._attempts[step] = done + 1
        return done + 1

    @classmethod
    def create(
        cls, owner: StoreThread, *, run_id: str, what: Invocation, workdir: Path, uid: int, gid: int
    ) -> Recorder:
        workdir.mkdir(parents=True, exist_ok=True)
        owner.call(lambda store: _create(store, run_id, what, workdir, uid, gid))
        return cls(owner, run_id)

    def started(
        self,
        step: str,
        cwl_name: str,
        *,
        container: str,
        image: str,
        cpus: float,
        memory: int,
        node: str = "local",
        gpus: tuple[int, ...] = (),
    ) -> None:
        attempt = AttemptRecord(
            run_id=self.run_id,
            step=step,
            attempt=self._attempts.get(step, 1),
            variant="cwl",
            node=node,
            gpus=gpus,
            gpu_uuids=(),
            container=container,
            image=image,
            state=RUNNING,
            exit_code=None,
            started=time.time(),
            ended=None,
            message="",
            cpus=cpus,
            memory=memory,
        )
        self.owner.call(lambda store: self._started(store, step, cwl_name, attempt))

    def cached(self, step: str, cwl_name: str, *, image: str, source_run: str) -> None:
        """A job whose result came from the cache: a step that succeeded without a container."""
        self.owner.call(lambda store: self._cached(store, step, cwl_name, source_run))

    def ended(
        self, step: str, exit_code: int, message: str = "", *, node: str | None = None, gpus: tuple[int | str, ...] = ()
    ) -> None:
        """``node``, ``gpus``: where a cluster's scheduler ran it and what it gave (None, ():
        as recorded at the start)."""
        self.owner.call(lambda store: self._ended(store, step, exit_code, message, node, gpus))

    def finish(self, succeeded: bool) -> None:
        state = RUN_SUCCEEDED if succeeded else RUN_FAILED
        self.owner.call(lambda store: store.set_run(self.run_id, state=state, ended=time.time()))

    def _add_step(self, store: Store, step: str, why: str) -> None:
        """The step, new (added to the run) or one a resumed run had (pending again)."""
        known = {s.step: s.state for s in store.steps(self.run_id)}
        if step not in known:
            run = store.run(self.run_id)
            store.amend_run(
                self.run_id, spec_json=run.spec_json, plan_json=None, add=[step], drop=[], expansions=[], message=why
            )
        elif known[step] in (SUCCEEDED, FAILED, STOPPED, SKIPPED):
            store.set_step(self.run_id, step, state=PENDING, event=f"resumed: {why}")
        store.set_step(self.run_id, step, state=LAUNCHING, variant="cwl", node="local")

    def _started(self, store: Store, step: str, cwl_name: str, attempt: AttemptRecord) -> None:
        self._add_step(store, step, f"CWL job {cwl_name} is step {step}")
        store.add_attempt(attempt)
        store.set_step(
            self.run_id,
            step,
            state=RUNNING,
            attempts=attempt.attempt,
            started=time.time(),
            node=attempt.node,
            gpus=attempt.gpus,
        )

    def _cached(self, store: Store, step: str, cwl_name: str, source_run: str) -> None:
        why = f"CWL job {cwl_name}: cached from run {source_run}"
        self._add_step(store, step, why)
        store.set_step(self.run_id, step, state=SUCCEEDED, event=why, ended=time.time(), reason=why)

    def _ended(
        self, store: Store, step: str, exit_code: int, message: str, node: str | None, gpus: tuple[int | str, ...]
    ) -> None:
        state = SUCCEEDED if exit_code == 0 else FAILED
        now = time.time()
        where: dict[str, object] = {"node": node} if node else {}
        if gpus:
            where["gpus"] = gpus
        columns = {**where, **({"gpus": json.dumps(list(gpus))} if gpus else {})}  # the attempt's row holds JSON
        store.set_attempt(self.run_id, step, 1, state=state, exit_code=exit_code, ended=now, message=message, **columns)
        why = "exit 0" if exit_code == 0 else f"exit {exit_code}{': ' + message if message else ''}"
        store.set_step(self.run_id, step, state=state, exit_code=exit_code, ended=now, event=why, **where)


def _create(store: Store, run_id: str, what: Invocation, workdir: Path, uid: int, gid: int) -> None:
    workflow = what.workflow
    store.create_run(
        run_id=run_id,
        name=workflow.stem,
        workflow_file=str(workflow.resolve()) if workflow.exists() else str(workflow),
        spec_json=json.dumps({"cwl": str(workflow), "steps": {}, "argv": list(what.argv), "cwd": what.cwd}),
        params_json="{}",
        uid=uid,
        gid=gid,
        workdir=str(workdir),
        steps=[],
        backend=what.settings.backend,
        backend_json=what.settings.to_json(),
    )
    pid = os.getpid()
    store.claim_run(run_id, pid, pid_alive, start=process_start(pid))

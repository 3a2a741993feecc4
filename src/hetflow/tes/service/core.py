"""The service: tasks accepted into the store, started by the scheduler thread in fair-share
order (``queue.decide``), each run by a ``worker.TaskWork`` on a thread of its own; canceled;
and, when the service starts, what a killed server left taken back.

Every state lives in the store (SQLite), so a server killed with SIGKILL and started again
loses no task and starts none twice: a task QUEUED stays queued; one that was INITIALIZING
or RUNNING has its containers removed and runs again as a new attempt (its system log says
so); one CANCELING ends CANCELED."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import HetflowError
from hetflow.execute import Backend, SettlesLaunches, container_name, make_backend, new_run_id
from hetflow.inventory import Gpu, Node
from hetflow.state import Store, TesTaskRow
from hetflow.tes.messages import ACTIVE, State, Task, TaskLog
from hetflow.tes.service import gpus as gpu_leases
from hetflow.tes.service.accept import Refused, accept
from hetflow.tes.service.config import TesConfig
from hetflow.tes.service.queue import Decision, Queued, decide
from hetflow.tes.service.worker import TaskWork, requeued, stamp

BackendFactory = Callable[[], Backend]
CLUSTER_GPUS = 1 << 20  # no count of its own: a cluster backend's GPU tasks wait in its queue


@dataclass(frozen=True)
class Caller:
    user: str
    admin: bool


@dataclass(frozen=True)
class Page:
    tasks: list[TesTaskRow]
    next_token: str | None


class TesService:
    def __init__(
        self, config: TesConfig, home: Path, *, backend: BackendFactory = make_backend, node: Node | None = None
    ) -> None:
        """``node``: this machine's inventory, whose GPUs tasks lease (None: a machine without
        GPUs, or a cluster backend, whose engine assigns them)."""
        self.config, self.home, self.make_backend, self.node = config, home, backend, node
        # GPUs the scheduler counts: this machine's; a cluster's engine queues GPU jobs itself
        self.gpus = len(node.gpus) if node is not None else (0 if config.backend == "local" else CLUSTER_GPUS)
        self.store_path = home / "state.db"
        self._local = threading.local()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._workers: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def store(self) -> Store:
        """This thread's connection (sqlite3 connections stay on the thread that made them)."""
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.store_path)
        return store

    # --- the scheduler -----------------------------------------------------------------------

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="tes-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Start nothing more; end every running attempt's container and queue its task to
        run again at the next start (a server stopped by SIGTERM leaves no container behind,
        nor a `podman run` still making one); CANCELING tasks end as they would."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            workers = list(self._workers.values())
        for _, wake in workers:
            wake.set()
        for thread, _ in workers:
            thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            for d in self.explain():
                if d.start:
                    self._start(d.task_id)

    def explain(self) -> list[Decision]:
        store = self.store
        running = store.tes_counts(s.value for s in ACTIVE)
        queue = [
            Queued(r.id, r.owner, r.gpus, r.seq) for r in store.tes_tasks(states=[State.QUEUED.value], ascending=True)
        ]
        free = self.config.max_running - sum(n for n, _ in running.values())
        free_gpus = self.gpus - sum(g for _, g in running.values())
        return decide(queue, running, self.config, free=free, free_gpus=free_gpus)

    def _start(self, task_id: str) -> None:
        """Lease the task's GPUs (if it asks any and none are free it stays queued), then claim it."""
        row = self.store.tes_task(task_id)
        if row is None or row.state != State.QUEUED:
            return
        run_id = new_run_id()
        held: tuple[Gpu, ...] = ()
        ask = gpu_leases.parse_ask(_parameters(row))
        if ask is not None and self.node is not None:
            got = gpu_leases.lease(self.store, self.make_backend(), self.node, ask, run_id)
            if got is None:  # another task or hetflow run holds the GPUs it needs: it waits its turn
                return
            held = got
        if not self.store.claim_tes_task(
            task_id, State.QUEUED, State.INITIALIZING, attempt=row.attempt + 1, run_id=run_id
        ):
            gpu_leases.release(self.store, run_id)
            return
        claimed = self.store.tes_task(task_id)
        assert claimed is not None
        wake = threading.Event()
        args = (claimed, wake, held)
        thread = threading.Thread(target=self._work, args=args, name=f"tes-{task_id}", daemon=True)
        with self._lock:
            self._workers[task_id] = (thread, wake)
        thread.start()

    def _work(self, row: TesTaskRow, wake: threading.Event, held: tuple[Gpu, ...]) -> None:
        try:
            work = TaskWork(
                self.store, self.home, row, self.make_backend(), wake, self.config.s3, network=self.config.task_network
            )
            work.gpus, work.node = held, self.node
            work.stopping = self._stop.is_set
            work.run()
        except Exception as exc:  # a bug must not leave the task RUNNING for ever
            self.store.set_tes_task(row.id, state=State.SYSTEM_ERROR.value)
            self._append_system_log(row.id, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            if held and row.run_id:
                gpu_leases.release(self.store, row.run_id)
            with self._lock:
                self._workers.pop(row.id, None)
            self._wake.set()

    def recover(self) -> None:
        """Take back what a stopped or killed server left: see the module docstring."""
        store = self.store
        for row in list(store.tes_tasks(states=[s.value for s in ACTIVE])):
            if row.run_id:
                backend = self.make_backend()
                if isinstance(backend, SettlesLaunches):
                    # a `podman run` the killed server started may still be making its container:
                    # listed now it would be missed, and run (or wait in `runc init`) on its own
                    count = len(Task.model_validate_json(row.task_json).executors)
                    backend.settle_launches([container_name(row.run_id, f"exec-{i}", 1) for i in range(count)])
                # watched as a resumed run's are: the monitor of a container its killed `podman
                # run` made but never started is ended (`podman rm` would leave it waiting)
                unwatch = backend.watch(row.run_id, lambda: None) if isinstance(backend, SettlesLaunches) else None
                try:
                    names = list(backend.poll(row.run_id))
                    if names:
                        backend.cancel(names, grace=0)
                        backend.release(names)
                finally:
                    if unwatch is not None:
                        unwatch()
                with contextlib.suppress(HetflowError):  # killed before the run was recorded
                    store.set_run(row.run_id, state="failed", message="the TES server stopped while it ran")
                gpu_leases.release(store, row.run_id)
            if row.state == State.CANCELING:
                store.set_tes_task(row.id, state=State.CANCELED.value)
                continue
            store.set_tes_task(row.id, state=State.QUEUED.value)
            self._append_system_log(row.id, requeued(row.attempt))

    def _append_system_log(self, task_id: str, line: str) -> None:
        row = self.store.tes_task(task_id)
        if row is None:
            return
        logs = json.loads(row.logs_json) or [{"logs": [], "outputs": []}]
        logs[-1].setdefault("system_logs", []).append(line)
        self.store.set_tes_task(task_id, logs_json=json.dumps(logs))

    # --- the API's operations -------------------------------------------------------------------

    def create(self, task: Task, caller: Caller) -> str:
        """Accept ``task`` for ``caller`` (``accept.Refused`` when it cannot be); its id."""
        accepted = accept(task, self.config)
        never = ""
        if accepted.ask is not None and self.node is not None:
            never = gpu_leases.unservable(self.node, accepted.ask)
            if never and accepted.strict:
                raise Refused(f"resources.backend_parameters: {never} (backend_parameters_strict is true)")
        task_id = secrets.token_hex(10)
        stored = accepted.task.model_copy(update={"id": None, "state": None, "logs": None, "creation_time": stamp()})
        self.store.add_tes_task(
            task_id=task_id,
            owner=caller.user,
            name=task.name or "",
            task_json=stored.model_dump_json(exclude_none=True),
            tags=dict(task.tags or {}),
            gpus=accepted.gpus,
        )
        lines = [*accepted.warnings, *([never] if never else [])]
        if lines:
            log = TaskLog(system_logs=lines)
            self.store.set_tes_task(task_id, logs_json=json.dumps([log.model_dump(mode="json", exclude_none=True)]))
        if never:  # not strict: accepted, as TES 1.1 says, and ended at once with the reason
            self.store.claim_tes_task(task_id, State.QUEUED, State.SYSTEM_ERROR)
        self._wake.set()
        return task_id

    def get(self, task_id: str, caller: Caller) -> TesTaskRow | None:
        row = self.store.tes_task(task_id)
        if row is None or not (caller.admin or row.owner == caller.user):
            return None  # another user's task is not found, as one that does not exist
        return row

    def cancel(self, task_id: str, caller: Caller) -> bool:
        """False when the caller has no such task; a finished task stays as it is (TES 1.1)."""
        row = self.get(task_id, caller)
        if row is None:
            return False
        if not self.store.claim_tes_task(task_id, State.QUEUED, State.CANCELED):
            for state in (State.INITIALIZING, State.RUNNING):
                if self.store.claim_tes_task(task_id, state, State.CANCELING):
                    with self._lock:
                        worker = self._workers.get(task_id)
                    if worker is not None:
                        worker[1].set()
        return True

    def page(
        self,
        caller: Caller,
        *,
        page_size: int,
        token: str | None,
        name_prefix: str = "",
        state: str | None = None,
        tags: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> Page:
        before = int(token) if token else None
        rows: list[TesTaskRow] = []
        source: Iterator[TesTaskRow] = self.store.tes_tasks(
            owner=None if caller.admin else caller.user,
            states=[state] if state else [],
            name_prefix=name_prefix,
            before_seq=before,
        )
        for row in source:
            if all(row.tags.get(k) is not None and (v == "" or row.tags.get(k) == v) for k, v in tags):
                rows.append(row)
                if len(rows) > page_size:
                    break
        more = len(rows) > page_size
        rows = rows[:page_size]
        return Page(rows, str(rows[-1].seq) if more and rows else None)


def _parameters(row: TesTaskRow) -> dict[str, str]:
    resources = Task.model_validate_json(row.task_json).resources
    return dict(resources.backend_parameters or {}) if resources is not None else {}


def as_task(row: TesTaskRow) -> Task:
    """The stored task as the API shows it."""
    task = Task.model_validate_json(row.task_json)
    logs = [TaskLog.model_validate(x) for x in json.loads(row.logs_json)]
    return task.model_copy(update={"id": row.id, "state": State(row.state), "logs": logs or None})

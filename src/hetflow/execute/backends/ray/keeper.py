"""The run's keeper: one detached named actor per run that submits the run's step tasks
and gang placement groups (``gangrun.GangRun``), owns them (so they outlive the driver that
submitted them) and answers for them by name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import ray
from ray.exceptions import NodeDiedError, RayError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.ray.container import CANCELLED_CODE, ray_nodes, step_task
from hetflow.execute.backends.ray.gangrun import GangRun
from hetflow.execute.backends.ray.gangs import GangRequest
from hetflow.execute.backends.ray.restore import DUMP_TIMEOUT
from hetflow.execute.backends.ray.translate import TaskRequest, node_name
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.devices.migtable import MigInstance
from hetflow.execute.engine import ContainerSpec, Usage
from hetflow.execute.gang.replicas import replica_of
from hetflow.spec import Gang


@dataclass
class _Entry:
    ref: Any  # ObjectRef of step_task
    request: TaskRequest
    node_id: str | None = None
    gpus: tuple[int, ...] = ()
    cancelled: bool = False
    result: JobState | None = None
    started: float | None = None  # when Ray started the task (its node's clock)
    usage: Usage | None = None  # what its container used, as the task measured it
    # a CRIU dump that stops it (``dump_target``): "stopping" while it runs (its end is not
    # final until the dump's outcome is known), "stopped" once it succeeded (CHECKPOINTED)
    dump: str = ""
    dump_since: float = 0.0  # monotonic; a dump whose driver never said how it went expires


class RunKeeper:
    """Owns one run's step tasks (so they outlive the driver that submitted them) and
    answers for them by name."""

    def __init__(self, run_id: str, idle_timeout: float) -> None:
        self.run_id = run_id
        self.jobs: dict[str, _Entry] = {}
        self.gangs: dict[str, GangRun] = {}
        # guards jobs and gangs: a gang's replicas are started by a thread of their own
        # once Ray has placed its group, while the actor answers calls
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}  # Ray node id -> hetflow name
        self.touched = time.monotonic()
        threading.Thread(target=self._linger, args=(idle_timeout,), daemon=True).start()

    def _linger(self, idle_timeout: float) -> None:
        while True:
            time.sleep(min(5.0, idle_timeout))
            if not self.jobs and not self.gangs and time.monotonic() - self.touched > idle_timeout:
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                return

    def submit(
        self,
        name: str,
        spec: ContainerSpec,
        req: TaskRequest,
        device_dir: str,
        stop_timeout: int,
        migs: Mapping[str, tuple[MigInstance, ...]] | None = None,
        restore: Restore | None = None,
    ) -> None:
        self.touched = time.monotonic()
        if name in self.jobs or name in self.gangs:
            raise ValueError(f"a job named {name} was already submitted to Ray")
        options: dict[str, Any] = {"num_cpus": req.num_cpus, "num_gpus": req.num_gpus, "name": name}
        if req.memory:
            options["memory"] = req.memory
        if req.resources:
            options["resources"] = dict(req.resources)
        if req.node_id:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(req.node_id, soft=False)
        me = ray.get_runtime_context().current_actor
        ref = step_task.options(**options).remote(spec, device_dir, stop_timeout, me, migs, restore)
        with self.lock:
            self.jobs[name] = _Entry(ref, req)

    def submit_gang(
        self,
        name: str,
        ranks: tuple[ContainerSpec, ...],
        gang: Gang,
        req: GangRequest,
        device_dir: str,
        stop_timeout: int,
    ) -> None:
        """Reserve the gang's placement group now; its replicas start once Ray has placed
        every bundle (a thread waits for that: no driver needs to be connected)."""
        self.touched = time.monotonic()
        if name in self.jobs or name in self.gangs:
            raise ValueError(f"a job named {name} was already submitted to Ray")
        run = GangRun(name, ranks, gang, req, device_dir, stop_timeout)
        with self.lock:
            self.gangs[name] = run
        me = ray.get_runtime_context().current_actor
        threading.Thread(target=run.wait_and_start, args=(self.lock, me, self._name), daemon=True).start()

    def started(self, name: str, node_id: str, gpus: tuple[int, ...], at: float | None = None) -> None:
        with self.lock:
            if name in self.jobs:
                self.jobs[name].node_id, self.jobs[name].gpus = node_id, gpus
                self.jobs[name].started = at
            elif (rep := replica_of(name) or (name, 0))[0] in self.gangs:
                self.gangs[rep[0]].started(rep[1], gpus)

    def states(self) -> dict[str, JobState]:
        self.touched = time.monotonic()
        with self.lock:
            waiting = [e.ref for e in self.jobs.values() if e.result is None]
            waiting += [r for g in self.gangs.values() if g.result is None for r in g.refs]
            ready = set(ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]) if waiting else set()
            out = {}
            for name, e in self.jobs.items():
                if e.result is None and e.ref in ready and not self._dumping(e):
                    e.result = self._finished(name, e)
                out[name] = replace(e.result or self._live(name, e), native_id=task_id(e.ref))
            for name, g in self.gangs.items():
                out[name] = replace(g.state(ready, self._name), native_id=",".join(map(task_id, g.refs)))
            return out

    def dump_target(self, name: str, stopping: bool) -> tuple[str, str] | None:
        """(Ray node id, hetflow name) of the node the job's task runs on, where its container
        is dumped; None when it is not running.  ``stopping``: the dump ends it, so its end is
        held back until ``dump_ended`` says whether it was a checkpoint or its own."""
        with self.lock:
            e = self.jobs.get(name)
            if e is None or e.result is not None or e.node_id is None or e.cancelled:
                return None
            if stopping:
                e.dump, e.dump_since = "stopping", time.monotonic()
            return e.node_id, self._name(e.node_id)

    def dump_ended(self, name: str, ok: bool) -> None:
        with self.lock:
            e = self.jobs.get(name)
            if e is not None and e.dump == "stopping":
                e.dump = "stopped" if ok else ""

    def _dumping(self, e: _Entry) -> bool:
        if e.dump == "stopping" and time.monotonic() - e.dump_since > DUMP_TIMEOUT + 120:
            e.dump = ""  # the driver that asked for it went: its end counts as what it was
        return e.dump == "stopping"

    def _live(self, name: str, e: _Entry) -> JobState:
        if e.node_id is None:
            return JobState(name, True, None, "PENDING", reason=f"waiting for Ray to place it ({e.request.describe()})")
        return JobState(name, True, None, "RUNNING", self._name(e.node_id), e.gpus, started=e.started)

    def _finished(self, name: str, e: _Entry) -> JobState:
        node = self._name(e.node_id) if e.node_id else None
        try:
            code, status, reason, e.usage = ray.get(e.ref)
        except TaskCancelledError:
            code, status, reason = CANCELLED_CODE, "CANCELLED", "cancelled"
        except RayError as exc:  # the worker or its node died, Ray killed it for memory, a bug
            text = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {text[0] if text else ''}"
            # The node went (removed, its raylet died): not the step's failure, it runs again
            # on another node (JobState.node_failed).  A worker that died on a live node is.
            if isinstance(exc, NodeDiedError) or (e.node_id is not None and not self._alive(e.node_id)):
                return JobState(name, False, None, "NODE_LOST", node, e.gpus, why, node_failed=True)
            return JobState(name, False, None, "LOST", node, e.gpus, why)
        # the task's own note of its start may not have reached the keeper yet: its container's start then
        started = e.started if e.started is not None or e.usage is None else e.usage.started
        ended = e.usage.ended if e.usage is not None else None
        if e.dump == "stopped":  # not a failure: stopped by a dump, to be restored (podman run said 127)
            code, status, reason = CANCELLED_CODE, "CHECKPOINTED", "stopped by a CRIU checkpoint, to be restored"
        return JobState(name, False, int(code), status, node, e.gpus, reason, started=started, ended=ended)

    def usage(self, name: str) -> Usage:
        """What the job's container used (unknown until it has ended); a gang's: its rank 0's,
        as the local backend measures a gang (the attempt's own container)."""
        with self.lock:
            e, g = self.jobs.get(name), self.gangs.get(name)
            found = e.usage if e is not None else (g.used.get(0) if g is not None else None)
            return found if found is not None else Usage()

    def _alive(self, node_id: str) -> bool:
        return any(n["NodeID"] == node_id and n.get("Alive") for n in ray_nodes())

    def _name(self, node_id: str) -> str:
        if node_id not in self.names:
            for n in ray_nodes():
                self.names[n["NodeID"]] = node_name(n.get("Labels") or {}, n.get("Resources") or {}, n["NodeID"])
        return self.names.get(node_id, node_id)

    def cancel(self, names: list[str]) -> None:
        self.touched = time.monotonic()
        with self.lock:
            for name in names:
                e = self.jobs.get(name)
                if e is not None and e.result is None and not e.cancelled:
                    e.cancelled = True
                    ray.cancel(e.ref)  # force=False: KeyboardInterrupt in the task, which stops the container
                g = self.gangs.get(name)
                if g is not None and g.result is None and not g.cancelled:
                    g.cancel()

    def release(self, names: list[str]) -> int:
        """Forget the jobs (cancelling any still running; a gang's placement group is
        removed); returns how many are left."""
        self.cancel(names)
        with self.lock:
            for name in names:
                self.jobs.pop(name, None)
                g = self.gangs.pop(name, None)
                if g is not None:
                    g.remove()
            return len(self.jobs) + len(self.gangs)


KeeperActor = ray.remote(num_cpus=0, max_restarts=0)(RunKeeper)


def task_id(ref: Any) -> str:
    """The Ray task's id (``ray list tasks``, the dashboard) of the ObjectRef it returns."""
    try:
        return str(ref.task_id().hex())
    except AttributeError:  # a stand-in ref (tests' fakes) has none
        return ""

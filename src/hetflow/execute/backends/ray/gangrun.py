"""One gang job inside the run's keeper: its placement group, then one task per replica.

Life of a gang (the keeper owns the group and the tasks, so both outlive the driver):

1. ``GangRun(...)`` creates the placement group (``gangs.GangRequest``); nothing runs yet.
2. ``wait_and_start`` (a thread of the keeper) waits until Ray has reserved EVERY bundle,
   then reads each bundle's node (``placement_group_table``) and address (``ray.nodes``),
   writes the MPI ssh_config's real hosts (``mpilaunch.resolve_hosts``) and starts one
   task per replica pinned to its bundle (``PlacementGroupSchedulingStrategy``, bundle i),
   each running its container in the foreground with the GPUs Ray assigned to it.
3. ``state`` folds the replicas into the gang's one state (``execute.gang.replicas.gang_state``):
   one replica failing cancels the others; under ``launcher: mpi`` replica 0 decides and
   the workers (sshd, never ending by themselves) are cancelled when it ends.  The gang is
   reported finished once every replica has ended, and its group is removed then.  A
   replica whose node died makes the gang a node fault (``node_failed``): the others are
   stopped first, and hetflow runs the whole gang again as a new attempt.

A group Ray cannot place stays PENDING, and says why: Ray's scheduling state, and whether
the alive nodes are only busy or could never hold it by their totals (``gangs.shortfall``:
nodes left, or too few of the type for STRICT_SPREAD, which Ray reports as NO_RESOURCES,
not INFEASIBLE).  It waits for resources or nodes (Ray
retries it) until hetflow cancels it; ``RayBackend.submit`` already refused a gang the
cluster's alive nodes could never hold.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import NodeDiedError, RayError, TaskCancelledError
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.ray.container import CANCELLED_CODE, ray_nodes, step_task
from hetflow.execute.backends.ray.gangs import (
    GangRequest,
    bundle_nodes,
    hosts_of,
    mpi_ssh_config,
    node_addresses,
    replica_specs,
    shortfall,
)
from hetflow.execute.backends.ray.translate import RayNode, node_name
from hetflow.execute.engine import ContainerSpec, Usage
from hetflow.execute.gang.mpilaunch import resolve_hosts
from hetflow.execute.gang.replicas import gang_state
from hetflow.spec import Gang

LOST_CODE = 255  # a replica whose worker or node died: a failure, whatever it was doing
NODE_LOST = "NODE_LOST"  # the status of a replica, and then of its gang, whose node died
START_FAILED = 125  # as podman says for a container it could not start


class GangRun:
    def __init__(
        self,
        name: str,
        ranks: Sequence[ContainerSpec],
        gang: Gang,
        req: GangRequest,
        device_dir: str,
        stop_timeout: int,
    ) -> None:
        self.name, self.ranks, self.gang, self.req = name, tuple(ranks), gang, req
        self.device_dir, self.stop_timeout = device_dir, stop_timeout
        selector = [dict(req.label_selector) for _ in ranks] if req.label_selector else None
        # default lifetime: the group belongs to the keeper (a detached actor), as its tasks do
        self.pg = placement_group(req.bundles(), strategy=req.strategy, name=name, bundle_label_selector=selector)
        self.refs: list[Any] = []  # one task per replica, once started
        self.node_ids: list[str] = []
        self.gpus: dict[int, tuple[int, ...]] = {}
        self.done: dict[int, tuple[int, str, str]] = {}
        self.used: dict[int, Usage] = {}  # what each ended replica's container used (its task measured it)
        self.cancelled = False
        self.stopping = False
        self.removed = False
        self.result: JobState | None = None

    # starting

    def wait_and_start(self, lock: threading.Lock, keeper: Any, names: Callable[[str], str]) -> None:
        """Wait for the group (all bundles or none), then start every replica.  Runs in a
        thread of the keeper; ``lock`` guards the keeper's state."""
        while not self.cancelled:
            try:
                if self.pg.wait(timeout_seconds=1):
                    break
            except Exception:  # the group was removed (release) while waiting
                return
        with lock:
            if self.cancelled or self.refs:
                return
            try:
                self._start(keeper, names)
            except Exception as exc:  # bad hosts, an unwritable MPI folder: the attempt fails
                self.result = JobState(
                    self.name, False, START_FAILED, "FAILED", reason=f"the gang could not start: {exc}"
                )
                self.remove()

    def _start(self, keeper: Any, names: Callable[[str], str]) -> None:
        table = placement_group_table(self.pg)
        self.node_ids = bundle_nodes(table["bundles_to_node_id"], len(self.ranks))
        addresses = node_addresses(ray_nodes())
        specs = replica_specs(self.ranks, self.gang, self.node_ids, addresses, {n: names(n) for n in self.node_ids})
        config = mpi_ssh_config(self.ranks[0])
        if config is not None:  # before any replica starts: the launcher reads it to reach the others
            path = Path(config)
            path.write_text(resolve_hosts(path.read_text(), hosts_of(self.node_ids, addresses)))  # keeps owner, mode
        t = self.req.task
        options: dict[str, Any] = {"num_cpus": t.num_cpus, "num_gpus": t.num_gpus}
        if t.memory:
            options["memory"] = t.memory
        if t.resources:
            options["resources"] = dict(t.resources)
        for i, spec in enumerate(specs):
            strategy = PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i)
            task = step_task.options(**options, name=spec.name, scheduling_strategy=strategy)
            self.refs.append(task.remote(spec, self.device_dir, self.stop_timeout, keeper))

    def started(self, rank: int, gpus: tuple[int, ...]) -> None:
        self.gpus[rank] = gpus

    # state

    def state(self, ready: set[Any], names: Callable[[str], str]) -> JobState:
        if self.result is not None:
            return self.result
        if not self.refs:
            if self.cancelled:
                self.result = JobState(
                    self.name, False, CANCELLED_CODE, "CANCELLED", reason="cancelled before Ray placed it"
                )
                return self.result
            return JobState(self.name, True, None, "PENDING", reason=self._pending_reason())
        for i, ref in enumerate(self.refs):
            if i not in self.done and ref in ready:
                code, status, reason, self.used[i] = _finished(
                    ref, self.node_ids[i] if i < len(self.node_ids) else None
                )
                self.done[i] = (code, status, reason)
        replicas = {
            i: (False, *self.done[i][:2]) if i in self.done else (True, None, "RUNNING") for i in range(len(self.refs))
        }
        g = gang_state(replicas, len(self.refs), lead=self.gang.launcher == "mpi")
        where = ",".join(dict.fromkeys(names(n) for n in self.node_ids))
        gpus = self.gpus.get(0, ())
        if not g.running and len(self.done) < len(self.refs):
            # one replica ended the gang: the others are stopped, and the gang is reported
            # when they have gone (no replica keeps its GPUs after the gang ended)
            self.stop()
            return JobState(self.name, True, None, f"stopping: {g.status}", where, gpus)
        if g.running:
            return JobState(self.name, True, None, "RUNNING", where, gpus)
        lost = [r for r in sorted(self.done) if self.done[r][1] == NODE_LOST]
        if lost and not self.cancelled:
            # a node died under a replica: every other one was stopped above, and the gang is a
            # node fault (JobState.node_failed), run again whole as a new attempt, not a failure
            node = names(self.node_ids[lost[0]]) if lost[0] < len(self.node_ids) else "?"
            why = f"replica {lost[0]} lost with its node {node} ({self.done[lost[0]][2]}); the others were stopped"
            self.result = JobState(self.name, False, None, NODE_LOST, where, gpus, why, node_failed=True)
            self.remove()
            return self.result
        reasons = [self.done[r][2] for r in sorted(self.done) if self.done[r][2]]
        why = f"replica {g.failed_rank} failed ({g.status})" if g.failed_rank is not None else ""
        reason = "; ".join([why, *reasons]) if why else ""
        status = "CANCELLED" if self.cancelled else g.status
        self.result = JobState(self.name, False, g.exit_code, status, where, gpus, reason)
        self.remove()
        return self.result

    def _pending_reason(self) -> str:
        try:
            scheduling = str(placement_group_table(self.pg).get("stats", {}).get("scheduling_state", ""))
        except Exception:
            scheduling = ""
        alive = [
            RayNode(n["NodeID"], node_name(n.get("Labels") or {}, n["Resources"], n["NodeID"]), n["Resources"])
            for n in ray_nodes()
            if n.get("Alive")
        ]
        short = shortfall(self.req, alive)
        why = f"it {short}: it waits for nodes to join" if short else "the nodes that can hold it are busy"
        # no clock in the text: the runner records each change of it as an event
        head = f"waiting for Ray to reserve every replica at once ({self.req.describe()})"
        return f"{head}: {scheduling + ', ' if scheduling else ''}{why}"

    # stopping

    def stop(self) -> None:
        """Cancel the replicas still running (once): the task stops its container."""
        if self.stopping:
            return
        self.stopping = True
        for i, ref in enumerate(self.refs):
            if i not in self.done:
                ray.cancel(ref)  # force=False: KeyboardInterrupt in the task, which stops the container

    def cancel(self) -> None:
        self.cancelled = True
        if self.refs:
            self.stop()
        else:
            self.remove()  # nothing started: give the reservation back now

    def remove(self) -> None:
        if not self.removed:
            self.removed = True
            with contextlib.suppress(Exception):  # already gone (its creator or node died)
                remove_placement_group(self.pg)


def _finished(ref: Any, node_id: str | None) -> tuple[int, str, str, Usage]:
    try:
        code, status, reason, used = ray.get(ref)
        return int(code), str(status), str(reason), used
    except TaskCancelledError:
        return CANCELLED_CODE, "CANCELLED", "", Usage()
    except RayError as exc:  # the worker or its node died, Ray killed it for memory
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0] if text else ''}"
        # its node went (removed, its raylet died), as ``keeper`` tells for a single task
        gone = node_id is not None and not any(n["NodeID"] == node_id and n.get("Alive") for n in ray_nodes())
        return LOST_CODE, NODE_LOST if isinstance(exc, NodeDiedError) or gone else "LOST", why, Usage()

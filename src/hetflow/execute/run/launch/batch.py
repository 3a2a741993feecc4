"""Launching fan-out items as batches (``execute.batching``): the runner's pass defers each
batchable item it would start (``Batcher.defer``); at the end of the pass ``launch`` cuts
what it deferred into batches (as many items to a container as the step's ``batch:`` allows,
fewer where that would leave cores idle) and starts each as one container, every item with
its own attempt row, as ``Launcher.launch`` does for one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import Job
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.run.attempts import Active
from hetflow.execute.run.batching import Item, Policy, batch_name, batch_spec, shape, write_batch
from hetflow.execute.run.dispatching.dispatch import Decision, LocalDispatch
from hetflow.execute.run.launch.container import build_spec
from hetflow.execute.run.launch.launcher import Launch, Launcher
from hetflow.spec import Step, Workflow, fanout_parent
from hetflow.state import StepRecord


@dataclass(frozen=True)
class Deferred:
    name: str
    record: StepRecord
    decision: Decision


class Batcher:
    """The items deferred in one pass of the runner, by fan-out, and their launch."""

    def __init__(self, launcher: Launcher, workflow: Workflow) -> None:
        self.launcher = launcher
        self.policy = Policy(workflow, launcher.backend.image_entrypoint)
        self._deferred: dict[str, list[Deferred]] = {}
        self._room: dict[str, int] = {}  # items a pass may defer of each fan-out (what could start)

    def set_workflow(self, workflow: Workflow) -> None:
        self.policy.set_workflow(workflow)

    def full(self, name: str) -> bool:
        """The fan-out of ``name`` has as many items deferred this pass as can start: the
        rest need neither a decision nor a cache lookup now."""
        parent = fanout_parent(name)
        return parent is not None and parent in self._room and len(self._deferred[parent]) >= self._room[parent]

    def defer(self, name: str, s: StepRecord, step: Step, decision: Decision) -> bool:
        """Hold the item for a batch (True), or leave it to start alone (False): not a
        batched step, a retry (a failed item runs again alone), or given GPUs."""
        batch = self.policy.of(name, step)
        parent = fanout_parent(name)
        if batch is None or parent is None or s.exit_code is not None or decision.gpus or decision.slot is not None:
            return False
        if parent not in self._deferred:
            self._deferred[parent] = []
            size = batch.size(step.estimate)
            slots = self._slots(step, decision)
            self._room[parent] = size * slots if slots is not None else size * 64
        self._deferred[parent].append(Deferred(name, s, decision))
        return True

    def _slots(self, step: Step, decision: Decision) -> int | None:
        """Containers of the step that fit in what is free on this machine (None: a cluster's
        engine queues them)."""
        dispatch = self.launcher.dispatch
        if not isinstance(dispatch, LocalDispatch) or decision.variant is None:
            return None
        res = step.resolved_variants()[decision.variant].resources
        free = dispatch.free()
        fits = [math.floor(free.cpus / res.cpus + 1e-9) if res.cpus else 10**6]
        fits.append(free.memory // res.memory if res.memory else 10**6)
        return max(1, min(fits))

    def launch(self) -> None:
        """Start what this pass deferred, batch by batch, while the machine has room."""
        deferred, self._deferred, self._room = self._deferred, {}, {}
        for items in deferred.values():
            self._launch_fanout(items)

    def _launch_fanout(self, items: list[Deferred]) -> None:
        wf = self.launcher.attempts.wf
        first = wf.steps[items[0].name]
        batch = self.policy.of(items[0].name, first)
        assert batch is not None
        size = batch.size(first.estimate)
        slots = self._slots(first, items[0].decision)
        if slots is not None:
            size = min(size, max(1, math.ceil(len(items) / slots)))  # every free core busy before any batch grows
        while items:
            d = self.launcher.dispatch.decide(items[0].name, wf.steps[items[0].name])
            if d.variant != items[0].decision.variant or d.gpus or d.slot is not None:
                return  # no room now (or another choice): the rest wait for the next pass
            chunk, items = items[:size], items[size:]
            if len(chunk) == 1:
                one = chunk[0]
                self.launcher.launch(one.name, one.record, d.variant or "", d.gpus, d.why)
                continue
            left = launch_batch(self.launcher, chunk, d.variant or "", d.why)
            items = left + items


def _items(lr: Launcher, chunk: Sequence[Deferred], vname: str) -> tuple[list[Item], list[Deferred], list[Deferred]]:
    """Each deferred item's container as it would run alone; those that can share the first's
    (the items and their deferrals), and those that cannot (other inputs or limits)."""
    items: list[Item] = []
    taken: list[Deferred] = []
    left: list[Deferred] = []
    first: ContainerSpec | None = None
    for d in chunk:
        step = lr.attempts.wf.steps[d.name]
        variant = step.resolved_variants()[vname]
        attempt = d.record.attempts + 1
        spec = build_spec(
            run_id=lr.run_id,
            step_name=d.name,
            step=step,
            variant=variant,
            attempt=attempt,
            uid=lr.uid,
            gid=lr.gid,
            paths=lr.paths,
            access=lr.dispatch.access(variant, (), None),
            data=lr.mounted(step),
        )
        if first is None:
            first = shape(spec)  # what the others must match, made once
        elif shape(spec) != first:
            left.append(d)
            continue
        items.append(Item(d.name, attempt, spec))
        taken.append(d)
    return items, taken, left


def launch_batch(lr: Launcher, chunk: Sequence[Deferred], vname: str, why: str) -> list[Deferred]:
    """Start ``chunk`` as one batch container; returns the items that cannot share its
    container, to go in another."""
    items, taken, left = _items(lr, chunk, vname)
    first = taken[0]
    name = batch_name(lr.run_id, first.name, items[0].attempt)
    folder = write_batch(lr.paths, name, items, (lr.uid, lr.gid))
    parent = fanout_parent(first.name) or first.name
    where = lr.dispatch.where(first.name)
    now = lr.clock()
    acts: list[Active] = []
    with lr.store.transaction():  # the batch's intents in one commit, made before the engine is asked
        for d, it in zip(taken, items, strict=True):
            step = lr.attempts.wf.steps[d.name]
            variant = step.resolved_variants()[vname]
            go = Launch(d.name, step, vname, variant, it.attempt, name, (), None, why, "")
            lr.record_intent(go, d.record, where, now)
            res = variant.resources
            acts.append(
                Active(
                    d.name,
                    it.attempt,
                    name,
                    res.cpus,
                    res.memory,
                    (),
                    measured=True,
                    why=why,
                    variant=vname,
                    node=where.node,
                )
            )
    res = lr.attempts.wf.steps[first.name].resolved_variants()[vname].resources
    holds = lr.backend.capabilities.holds_dependencies
    parents = {p for d in taken for p in lr.attempts.wf.steps[d.name].dependencies()}
    job = Job(
        name=name,
        run_id=lr.run_id,
        step=parent,
        attempt=1,
        container=batch_spec(items[0].spec, name, folder, parent),
        cpus=res.cpus,
        memory=res.memory,
        node=where.pinned_node,
        node_class=where.node_class,
        depends_on=tuple(sorted({lr.attempts.active[p].container for p in parents if p in lr.attempts.active}))
        if holds
        else (),
    )
    for act in acts:
        lr.attempts.hold(act)
    try:
        lr.backend.submit(job)
    except HetflowError as exc:
        for act in acts:
            lr.attempts.fail(act, None, str(exc))
        return left
    with lr.store.transaction():
        for act in acts:
            lr.submitted(act, now)
    return left

"""The composition root of a run's executor: ``compose_runner`` builds every part a
``Runner`` works with, in order, from the run's records, options and backend, and hands them
to it whole (``RunParts``), as Nomad's ``NewGenericStack`` wires its pipeline.  Nothing
sets another part's fields after construction: what must change the run's state (attempts in
flight, next attempts, the workflow as fan-outs expand) asks ``Attempts``, which owns it.

``executor.build_runner`` (the executor) and the unit tests' builders come through here."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.factory import make_backend
from hetflow.execute.checkpoint import CheckpointImages
from hetflow.execute.checkpoint.app import SaveRequests
from hetflow.execute.data.inputs import DataManifest
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.data.watch import DataWatch
from hetflow.execute.engine import ContainerEngine
from hetflow.execute.run.attempts import Attempts
from hetflow.execute.run.control.moves import Moves
from hetflow.execute.run.dispatching.cachepass import CachePass
from hetflow.execute.run.dispatching.decisions import Decisions
from hetflow.execute.run.dispatching.growth import ElasticGangs
from hetflow.execute.run.launch.batch import Batcher
from hetflow.execute.run.launch.launcher import Launcher
from hetflow.execute.run.options import NullReporter, ProcessSeams, RunOptions, make_dispatch
from hetflow.execute.run.retries import Limits
from hetflow.execute.run.runner import Runner, RunParts, ordered, waiter
from hetflow.execute.settings import RunnerConfig
from hetflow.inventory import Node
from hetflow.spec import Workflow
from hetflow.state import LAUNCHING, RUNNING, OutputRecord, RunRecord, Store

__all__ = ["compose_runner"]


def compose_runner(
    *,
    store: Store,
    node: Node,
    workflow: Workflow,
    run: RunRecord,
    backend: Backend | None = None,
    engine: ContainerEngine | None = None,
    options: RunOptions = RunOptions(),
    seams: ProcessSeams = ProcessSeams(),
) -> Runner:
    """The Runner of ``run``, every part built.  ``backend``: the run's (None: the local one, on
    ``engine``); local runs pass ``options.chooser``, cluster runs ``options.placements``."""
    backend = backend or make_backend(engine=engine)
    cached: CachePass | None = None  # built below: the attempts' results are kept through it

    def keep_result(name: str, records: Sequence[OutputRecord]) -> None:
        """A step succeeded: keep its result under its key for later runs (its checkpoints go)."""
        CheckpointImages(attempts.paths).drop_images(name)
        step = store.step(run.id, name)
        assert cached is not None  # built before the loop settles any attempt
        cached.keep(attempts.wf, name, step.variant or "", step.attempts, records)

    attempts = _attempts(store, node, workflow, run, backend, options, seams, keep_result)
    paths, config, clock, pid = attempts.paths, attempts.config, seams.clock, seams.own_pid()
    watch = DataWatch(options.data or DataManifest(), workflow.data, store)
    dispatch = make_dispatch(store, node, backend, attempts, options, seams)
    launcher = Launcher(
        store=store,
        run=run,
        workflow=workflow,
        backend=backend,
        dispatch=dispatch,
        attempts=attempts,
        clock=clock,
        pid=pid,
        watch=watch,
    )
    cached = CachePass(
        store=store,
        run_id=run.id,
        cache=options.cache,
        backend=backend,
        paths=paths,
        watch=watch,
        attempts=attempts,
        clock=clock,
    )
    wake, priority = threading.Event(), dict(options.priority or {})
    parts = RunParts(
        store=store,
        node=node,
        run=run,
        backend=backend,
        paths=paths,
        reporter=options.reporter or NullReporter(),
        config=config,
        clock=clock,
        alive=seams.alive,
        sleep=seams.sleep or waiter(wake),
        wake=wake,
        pid=pid,
        priority=priority,
        order=ordered(workflow, priority),
        watch=watch,
        grace=options.grace,
        attempts=attempts,
        dispatch=dispatch,
        launcher=launcher,
        moves=Moves(attempts, lambda: attempts.wf),
        batcher=Batcher(launcher, workflow),
        decisions=Decisions(dispatch),
        elastic=ElasticGangs(
            dispatch=dispatch, attempts=attempts, backend=backend, clock=clock, every=config.grow_every
        ),
        cached=cached,
        saves=SaveRequests(backend, clock),
    )
    return Runner(parts)


def _attempts(
    store: Store,
    node: Node,
    workflow: Workflow,
    run: RunRecord,
    backend: Backend,
    options: RunOptions,
    seams: ProcessSeams,
    on_success: Callable[[str, Sequence[OutputRecord]], None],
) -> Attempts:
    """The owner of the run's mutable state: its workflow, attempts in flight, next attempts."""
    cluster = backend.capabilities.places_steps
    return Attempts(
        store=store,
        run_id=run.id,
        workflow=workflow,
        paths=RunPaths(Path(run.workdir)),
        backend=backend,
        config=options.config or RunnerConfig(),
        clock=seams.clock,
        budget_start=_budget(store, run.id),
        owner=(run.uid, run.gid),
        on_success=on_success,
        cluster=cluster,
        limits=_limits(node, options, cluster=cluster),
    )


def _budget(store: Store, run_id: str) -> dict[str, int]:
    """Each step's attempts before this executor session: its retry budget counts from there
    (an attempt in flight when the last executor died belongs to this session's budget)."""
    return {s.step: s.attempts - (1 if s.state in (LAUNCHING, RUNNING) else 0) for s in store.steps(run_id)}


def _limits(node: Node, options: RunOptions, *, cluster: bool) -> Callable[[str], Limits]:
    """What one node holds, for a retry's growth to stop at (``retries.after_failure``): the
    planned machine class's size on a cluster, this machine's here."""
    if cluster:
        sizes = {c.name: (float(c.cores), c.memory) for c in options.classes}
        return sizes.get
    return lambda _: (float(node.cpu.cores), node.memory_bytes)

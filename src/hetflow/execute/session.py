"""Submit, execute and resume a run: what ``hetflow run``, ``resume`` and the detached
executor do, as library calls (the CLI only parses options and prints).

    submit_run    load -> pin (local) -> preflight -> plan -> record the run with its plan
    open_run      a recorded run, ready to execute: its pinned workflow and stored plan
    resume_run    reset what must run again, then open_run
    drive         build the one Runner, run it to the end; SIGINT or SIGTERM stops the run

Only ``submit_run`` pins and plans.  Every later executor follows the plan stored with the
run; a run recorded by a hetflow that stored no plan is planned when it is opened, as that
hetflow did.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetflow.errors import Problem, SpecError
from hetflow.execute.attempts import RunnerConfig
from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.factory import make_backend
from hetflow.execute.backends.local import LocalBackend
from hetflow.execute.cache import ResultCache
from hetflow.execute.data import ObjectStore, resolve_data, s3_filesystem
from hetflow.execute.engine import ContainerEngine, make_engine
from hetflow.execute.fanout import expand_at_submit, replay
from hetflow.execute.images import Resolver, default_resolver
from hetflow.execute.lifecycle import reset_for_resume
from hetflow.execute.outputs import damaged_outputs
from hetflow.execute.paths import RunPaths
from hetflow.execute.prepare import Puller, Say, ensure_pulled, pin, plan_on_cluster, plan_on_node
from hetflow.execute.runner import Reporter, Runner
from hetflow.execute.runplan import GREEDY, LOCAL, RunPlan, apply_images
from hetflow.execute.settings import Settings
from hetflow.execute.submit import create_run, new_run_id, preflight
from hetflow.inventory import Node
from hetflow.plan import GreedyChooser, PlanChooser, VariantChooser
from hetflow.spec import LoadedWorkflow, Workflow, edges_of, load_workflow
from hetflow.state import RUN_STOPPED, RUN_SUCCEEDED, RunRecord, Store


class LocalEngine(ContainerEngine, Puller, Protocol):
    """A container engine that can also pull (what a local run needs)."""


@dataclass
class OpenRun:
    """A recorded run ready to execute: the workflow as pinned, the plan it follows, and the
    engine or backend that runs it (made once, shared by the runner and the stopper)."""

    store: Store
    run: RunRecord
    workflow: Workflow
    plan: RunPlan
    settings: Settings
    node: Node
    backend: Backend
    engine: ContainerEngine | None = None

    def banner(self) -> str:
        if self.settings.backend == LOCAL:
            node = self.node
            gpus = f"{len(node.gpus)} GPU(s){', fake' if node.gpu_source == 'fake' else ''}"
            return f"run {self.run.id} of {self.workflow.name} on {node.name} ({node.cpu.cores} CPUs, {gpus})"
        makespan = self.plan.plan.makespan if self.plan.plan is not None else 0.0
        return (
            f"run {self.run.id} of {self.workflow.name} on {self.settings.backend} (cluster {self.settings.cluster}, "
            f"planned makespan {makespan:.1f}s)"
        )


def submit_run(
    store: Store,
    loaded: LoadedWorkflow,
    settings: Settings,
    node: Node,
    *,
    home: Path,
    uid: int,
    gid: int,
    say: Say,
    problems: Callable[[Iterable[Problem]], None],
    engine: LocalEngine | None = None,
    backend: Backend | None = None,
    resolver: Resolver = default_resolver,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
) -> OpenRun:
    """Check, pin and plan ``loaded`` once, then record the run with its plan.  Whatever can
    be refused is refused here, before the run is recorded.  ``engine``, ``backend`` and
    ``resolver`` default to the real ones (tests pass fakes).

    Workflow data is resolved first (host files hashed, S3 listed, then downloaded into the
    run's directory) and fan-outs over it expanded, so the plan sees every item."""
    data = resolve_data(loaded, memo=store, s3=s3)
    run_id = new_run_id()
    workdir = (Path(settings.workdir) if settings.workdir else home / "runs") / run_id
    try:
        manifest = data.fetch(loaded, workdir / "data")
        loaded, expansions = expand_at_submit(loaded, manifest)
        opened = _check_and_plan(store, loaded, settings, node, say, problems, engine, backend, resolver)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    loaded, plan, backend, engine = opened
    plan = dataclasses.replace(plan, data=manifest)
    record = create_run(
        store,
        loaded,
        home,
        uid,
        gid,
        backend=settings.backend,
        backend_json=settings.to_json(),
        workdir=workdir,
        plan_json=plan.to_json(),
        expansions=expansions,
    )
    return OpenRun(store, record, loaded.workflow, plan, settings, node, backend, engine)


def _check_and_plan(
    store: Store,
    loaded: LoadedWorkflow,
    settings: Settings,
    node: Node,
    say: Say,
    problems: Callable[[Iterable[Problem]], None],
    engine: LocalEngine | None,
    backend: Backend | None,
    resolver: Resolver,
) -> tuple[LoadedWorkflow, RunPlan, Backend, LocalEngine | None]:
    if settings.backend == LOCAL:
        engine = engine or make_engine()
        loaded, pulls = pin(loaded, node, engine, say, resolver)
        found = list(loaded.notes) + preflight(loaded, node, engine)
        if any(p.severity == "error" for p in found):
            raise SpecError(found)
        problems(found)
        plan = plan_on_node(store, loaded, node, pulls)
        backend = LocalBackend(engine)
    else:
        backend = backend or make_backend(settings)
        backend.check()
        plan = plan_on_cluster(store, loaded, settings, resolver)  # refuses before anything is recorded
    return loaded, plan, backend, engine


def load_recorded(store: Store, run_id: str) -> LoadedWorkflow:
    """The run's workflow as written (its copy in the run's work directory) with its params,
    relative paths read from the original file's directory, and the fan-outs expanded as
    they were when it ran."""
    record = store.run(run_id)
    paths = RunPaths(Path(record.workdir))
    loaded = load_workflow(paths.workflow, json.loads(record.params_json), base=Path(record.workflow_file).parent)
    return replay(loaded, store.expansions(run_id))


def open_run(
    store: Store,
    run_id: str,
    node: Node,
    loaded: LoadedWorkflow | None = None,
    *,
    engine: LocalEngine | None = None,
    backend: Backend | None = None,
) -> OpenRun:
    """A recorded run, to execute in this process (a detached executor, a resume): it
    follows its stored plan; the images it pinned are pulled again only if gone."""
    record = store.run(run_id)
    settings = Settings.from_json(record.backend_json)
    loaded = loaded or load_recorded(store, run_id)
    text = store.plan_json(run_id)
    if settings.backend == LOCAL:
        engine = engine or make_engine()
        if text is None:  # recorded without a plan: pin and plan now, as the hetflow that recorded it did
            loaded, pulls = pin(loaded, node, engine)
            plan = plan_on_node(store, loaded, node, pulls)
        else:
            plan = RunPlan.from_json(text)
            ensure_pulled(plan.pulls, engine)
        backend = LocalBackend(engine)
    else:
        backend = backend or make_backend(settings)
        backend.check()
        plan = RunPlan.from_json(text) if text is not None else plan_on_cluster(store, loaded, settings)
    workflow = apply_images(loaded.workflow, plan.images)
    return OpenRun(store, record, workflow, plan, settings, node, backend, engine)


def resume_run(
    store: Store,
    run_id: str,
    node: Node,
    *,
    engine: LocalEngine | None = None,
    backend: Backend | None = None,
    only: str | None = None,
) -> tuple[OpenRun, list[str]]:
    """Make a stopped, failed or crashed run runnable again: the steps to run again (failed,
    stopped, skipped, and succeeded ones whose outputs are damaged, with what follows) go
    back to pending; ``only``: just that failed step and what it skipped.  Returns the
    run, opened, and the steps reset."""
    loaded = load_recorded(store, run_id)
    reset = reset_for_resume(
        store, run_id, lambda step: damaged_outputs(store.outputs(run_id, step)), edges_of(loaded.workflow), only=only
    )
    return open_run(store, run_id, node, loaded, engine=engine, backend=backend), reset


def chooser_of(plan: RunPlan) -> VariantChooser:
    """The local runner's variant rule: the plan's variants, or greedy."""
    return GreedyChooser() if plan.planner == GREEDY else PlanChooser(plan.variants, plan.reasons)


def build_runner(
    opened: OpenRun, reporter: Reporter | None, config: RunnerConfig | None = None, *, grace: int | None = None
) -> Runner:
    """The one Runner of this executor, following the stored plan: on this machine the plan's
    variants and order; on a cluster its placements on its machine classes."""
    plan = opened.plan
    return Runner(
        store=opened.store,
        node=opened.node,
        workflow=opened.workflow,
        run=opened.store.run(opened.run.id),
        reporter=reporter,
        config=config or RunnerConfig.from_env(),
        backend=opened.backend,
        chooser=chooser_of(plan),
        priority=dict(plan.priority) or None,
        placements=plan.plan.placements if plan.plan is not None and plan.kind != LOCAL else None,
        classes=plan.classes,
        data=plan.data,
        cache=ResultCache(opened.store, opened.store.path.parent / "cache") if opened.settings.cache else None,
        grace=grace,
    )


@dataclass(frozen=True)
class Ended:
    state: str
    interrupted: bool = False  # a signal stopped the run (no summary follows)
    signal: int | None = None  # which: the command exits 128 + it, as a shell's does

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal  # 130 for SIGINT, 143 for SIGTERM
        return 0 if self.state == RUN_SUCCEEDED else 1


def drive(
    opened: OpenRun, reporter: Reporter | None, say: Say, *, banner: bool = True, grace: int | None = None
) -> Ended:
    """Run to the end.  SIGINT (Ctrl-C) or SIGTERM stops the run (its containers or jobs,
    each given ``grace`` seconds to save its work, None: the engine's default; a second signal kills them at once) so
    that it can be resumed."""
    runner = build_runner(opened, reporter, grace=grace)
    runner.install_signal_handlers()
    if banner:
        say(opened.banner())
    state = runner.execute()
    if runner.signalled is None or state != RUN_STOPPED:
        return Ended(state)  # no signal, or one that came as the run ended by itself
    rid = opened.run.id
    by = "hetflow stop" if runner.handed_off else signal.Signals(runner.signalled).name
    say(f"run {rid} stopped by {by}; 'hetflow resume {rid}' continues it")
    return Ended(RUN_STOPPED, interrupted=True, signal=runner.signalled)

"""Submit, execute and resume a run: what ``hetflow run``, ``resume`` and the detached
executor do, as library calls (the CLI only parses options and prints).

    submit_run    load -> pin (local) -> preflight -> plan -> record the run with its plan
    open_run      a recorded run, ready to execute: its pinned workflow and stored plan
    resume_run    apply an edited workflow file (amend), reset what must run again, then open_run
    drive         build the one Runner, run it to the end; SIGINT or SIGTERM stops the run

Only ``submit_run`` pins and plans, and ``resume_run`` when it applies an edited workflow
(it pins the images written differently, and plans the run again).  Every other executor
follows the plan stored with the run; a run recorded by a hetflow that stored no plan is
planned when it is opened, as that hetflow did.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetflow.errors import HetflowError, Problem, SpecError, StateError, UsageError
from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.factory import make_backend
from hetflow.execute.backends.local.engines import make_engine
from hetflow.execute.backends.registry import DEFAULT_BACKEND
from hetflow.execute.data.cachekey import StepKeys
from hetflow.execute.data.fanout import expand_at_submit, replay
from hetflow.execute.data.inputs import ObjectStore, resolve_data, s3_filesystem
from hetflow.execute.data.outputs import damaged_outputs
from hetflow.execute.data.paths import RunPaths, make_run_dir
from hetflow.execute.data.publishing.journal import settle_run
from hetflow.execute.engine import ContainerEngine
from hetflow.execute.layers import apply_resources
from hetflow.execute.secrets import activate, gather
from hetflow.execute.settings import Settings
from hetflow.execute.submit.amend import Amendment, compare
from hetflow.execute.submit.pin import Resolver, default_resolver
from hetflow.execute.submit.prepare import Puller, Say, ensure_pulled, pin, plan_on_cluster, plan_on_node
from hetflow.execute.submit.record import cluster_checkpoint_problems, create_run, new_run_id, preflight
from hetflow.execute.submit.rehash import rehash_for_resume
from hetflow.execute.submit.reset import reset_for_resume
from hetflow.execute.submit.runplan import RunPlan, apply_images, images_of
from hetflow.inventory import Node
from hetflow.spec import LoadedWorkflow, Workflow, edges_of, fanout_parent
from hetflow.state import (
    LAUNCHING,
    PENDING,
    RUN_RUNNING,
    RUNNING,
    RunRecord,
    Store,
    executor_gone,
    load_workflow_cached,
)


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
        if self.settings.leases_here:
            node = self.node
            gpus = f"{len(node.gpus)} GPU(s){', fake' if node.gpu_source == 'fake' else ''}"
            return f"run {self.run.id} of {self.workflow.name} on {node.name} ({node.cpu.cores} CPUs, {gpus})"
        makespan = self.plan.plan.makespan if self.plan.plan is not None else 0.0
        return (
            f"run {self.run.id} of {self.workflow.name} on {self.settings.backend} "
            f"(cluster {self.settings.cluster or 'as its API server lists it'}, "
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
    param_sources: Mapping[str, str] | None = None,
) -> OpenRun:
    """Check, pin and plan ``loaded`` once, then record the run with its plan.  Whatever can
    be refused is refused here, before the run is recorded.  ``engine``, ``backend`` and
    ``resolver`` default to the real ones (tests pass fakes).

    Workflow data is resolved first (host files hashed, S3 listed, then downloaded into the
    run's directory) and fan-outs over it expanded, so the plan sees every item.  A step's
    secrets are looked up first (``execute.secrets``): a missing one is refused here."""
    use_secrets(loaded.workflow, settings)
    data = resolve_data(loaded, memo=store, s3=s3)
    run_id = new_run_id()
    workdir = (Path(settings.workdir) if settings.workdir else home / "runs") / run_id
    try:
        make_run_dir(workdir)  # before the data lands in it
        manifest = data.fetch(loaded, workdir / "data")
        loaded, expansions = expand_at_submit(loaded, manifest)
        # the items known when the file was read too, so that each item's values are shown
        expansions = [(n, json.dumps(list(items))) for n, items in loaded.fanouts.items()] + expansions
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
        param_sources=param_sources,
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
    if settings.leases_here:
        engine = engine or make_engine()
        loaded, pulls = pin(loaded, node, engine, say, resolver)
        found = list(loaded.notes) + preflight(loaded, node, engine)
        if any(p.severity == "error" for p in found):
            raise SpecError(found)
        problems(found)
        plan = plan_on_node(store, loaded, node, pulls, steer=settings.steer)
        backend = make_backend(settings, engine=engine)
    else:
        if refused := cluster_checkpoint_problems(loaded, settings.backend):
            raise SpecError(refused)
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
    params = json.loads(record.params_json)
    # the include: files as they were read when the run was recorded (none before they were kept)
    includes = json.loads(paths.includes.read_text(encoding="utf-8")) if paths.includes.exists() else None
    loaded = load_workflow_cached(paths.workflow, params, base=Path(record.workflow_file).parent, includes=includes)
    return replay(_recorded_resources(loaded, record), store.expansions(run_id))


def _recorded_resources(loaded: LoadedWorkflow, record: RunRecord) -> LoadedWorkflow:
    """The resource overrides the run was started with (a profile's; ``profiles``), again."""
    return apply_resources(loaded, Settings.from_json(record.backend_json).resources, strict=False)


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
    if settings.leases_here:
        engine = engine or make_engine()
        if text is None:  # recorded without a plan: pin and plan now, as the hetflow that recorded it did
            loaded, pulls = pin(loaded, node, engine)
            plan = plan_on_node(store, loaded, node, pulls)
        else:
            plan = RunPlan.from_json(text)
            ensure_pulled(plan.pulls, engine)
        backend = make_backend(settings, engine=engine)
    else:
        backend = backend or make_backend(settings)
        backend.check()
        plan = RunPlan.from_json(text) if text is not None else plan_on_cluster(store, loaded, settings)
    workflow = apply_images(loaded.workflow, plan.images)
    use_secrets(workflow, settings, resume=True)
    return OpenRun(store, record, workflow, plan, settings, node, backend, engine)


def use_secrets(workflow: Workflow, settings: Settings, *, resume: bool = False) -> None:
    """This process's values of the workflow's secrets (from its environment and secrets
    file), or UsageError naming each one missing.  They are never recorded, so every process
    that executes the run (a detached executor, a resume) looks them up again."""
    named = sorted({n for s in workflow.steps.values() for n in s.secrets})
    if named and not settings.leases_here:
        raise UsageError(
            f"secrets ({', '.join(named)}) reach containers on this machine only; the {settings.backend} backend "
            f"would have to write them into its job files: run with --backend {DEFAULT_BACKEND}, or give the job"
            " its secret through the cluster's own means"
        )
    activate(gather(workflow, os.environ, resume=resume))


def resume_run(
    store: Store,
    run_id: str,
    node: Node,
    *,
    engine: LocalEngine | None = None,
    backend: Backend | None = None,
    only: str | None = None,
    as_recorded: bool = False,
    say: Say | None = None,
) -> tuple[OpenRun, list[str], Amendment]:
    """Make a stopped, failed or crashed run runnable again: the steps to run again (failed,
    stopped, skipped, and succeeded ones whose outputs are damaged, with what follows) go
    back to pending; ``only``: just that failed step and what it skipped.

    The workflow is read again from its original file (Nextflow's -resume) and an edit is
    applied (``amend``): succeeded steps whose cache key changed run again with what follows
    them, new steps run, removed ones are dropped, and the steps that run again follow the new
    definition.  ``as_recorded``: follow the copy recorded with the run, as it is.  Returns
    the run, opened, the steps reset and what the edit changed."""
    record = store.run(run_id)
    if record.state == RUN_RUNNING and not executor_gone(record):
        # a live process holds the run: its executor, or a `hetflow stop` still recording
        # (lifecycle.stop_run): resetting steps now would be undone by it
        doing = "stopped" if record.message.startswith("stopping") else "executed"
        raise StateError(
            f"run {run_id} is being {doing} by process {record.pid}; wait for it to end"
            + ("" if doing == "stopped" else f", or 'hetflow stop {run_id}' stops it")
        )
    # before anything is reset: a resume without its secrets changes nothing
    use_secrets(load_recorded(store, run_id).workflow, Settings.from_json(record.backend_json), resume=True)
    settle_run(store, run_id)  # a publish the killed executor cut short: finished or undone first
    amendment = Amendment()
    if Settings.from_json(record.backend_json).leases_here:
        engine = engine or make_engine()
    if as_recorded:
        loaded = load_recorded(store, run_id)
    else:
        loaded, amendment = _apply_edits(store, record, node, engine, say or (lambda _text: None))
    amendment = amendment.with_data(rehash_for_resume(store, run_id, loaded.workflow))  # data edited since
    for name in amendment.rerun:
        change = next(c for c in amendment.changes if c.step == name)
        store.set_step(
            run_id, name, state=PENDING, exit_code=None, ended=None, reason="", not_before=None, event=change.text()
        )
    reset = reset_for_resume(
        store, run_id, lambda step: damaged_outputs(store.outputs(run_id, step)), edges_of(loaded.workflow), only=only
    )
    reset = sorted(set(reset) | set(amendment.rerun) | set(amendment.added))
    return open_run(store, run_id, node, loaded, engine=engine, backend=backend), reset, amendment


def edited_since(store: Store, run_id: str) -> bool:
    """Whether the run's workflow file, read now, defines something other than the run
    recorded (False when it cannot be read: resume says why)."""
    try:
        current = replay(_load_current(store.run(run_id)), store.expansions(run_id))
        return current.workflow != load_recorded(store, run_id).workflow
    except HetflowError:
        return False


def _load_current(record: RunRecord) -> LoadedWorkflow:
    """The run's workflow as its original file says now, with the params recorded with it."""
    hint = (
        f"resume applies the workflow as this file says now; fix it, or resume with the copy recorded with"
        f" the run as it is: hetflow resume {record.id} --as-recorded"
    )
    try:
        loaded = load_workflow_cached(record.workflow_file, json.loads(record.params_json))
        return _recorded_resources(loaded, record)
    except SpecError as exc:
        raise SpecError([*exc.problems, Problem(record.workflow_file, 1, hint, "note")]) from None


def _refuse_edit(
    store: Store, record: RunRecord, settings: Settings, engine: LocalEngine | None, *, changed: str, data_changed: bool
) -> LocalEngine:
    """StateError, saying what to do instead, when an edit of the run's workflow cannot be
    applied: a cluster run, changed data, an executor still running it, or steps in flight;
    else the local run's engine."""
    run_id = record.id
    if not settings.leases_here or engine is None:
        raise StateError(
            f"{changed}; applying an edit to a run on {settings.backend} is not supported: resume it as recorded"
            f" (hetflow resume {run_id} --as-recorded) or start a new run (hetflow run; the cache keeps its results)"
        )
    if data_changed:
        raise StateError(
            f"{changed} and its 'data' differs; resume does not fetch data again: resume it as recorded"
            f" (hetflow resume {run_id} --as-recorded) or start a new run (hetflow run; the cache keeps its results)"
        )
    busy = [s.step for s in store.steps(run_id) if s.state in (LAUNCHING, RUNNING)]
    if busy:
        raise StateError(
            f"{changed}, and step(s) {', '.join(busy)} of it are still in flight: stop the run first"
            f" (hetflow stop {run_id}), then resume it to apply the edit"
        )
    return engine


def _apply_edits(
    store: Store, record: RunRecord, node: Node, engine: LocalEngine | None, say: Say
) -> tuple[LoadedWorkflow, Amendment]:
    """Compare the run's recorded workflow with its file now; when they differ, record the new
    version (the old copy kept as workflow.vN.yaml), pin and plan it, and say what changes.
    Everything that can be refused is refused before anything is written."""
    run_id = record.id
    old = load_recorded(store, run_id)
    current = replay(_load_current(record), store.expansions(run_id))
    if current.workflow == old.workflow:
        return old, Amendment()
    where = f"{record.workflow_file} changed since run {run_id} was recorded"
    settings = Settings.from_json(record.backend_json)
    data_changed = current.workflow.data != old.workflow.data
    engine = _refuse_edit(store, record, settings, engine, changed=where, data_changed=data_changed)
    text = store.plan_json(run_id)
    recorded = RunPlan.from_json(text) if text is not None else RunPlan()
    try:
        current, more = expand_at_submit(current, recorded.data)  # new fan-outs over the run's data
    except HetflowError as exc:
        raise StateError(f"{where}: {exc}") from None
    pinned, pulls = pin(current, node, engine, say)
    images = _merged_images(old.workflow, current.workflow, pinned.workflow, recorded.images)
    pinned = dataclasses.replace(current, workflow=apply_images(current.workflow, images))
    found = list(pinned.notes) + preflight(pinned, node, engine)
    if any(p.severity == "error" for p in found):
        raise SpecError(found)
    paths = RunPaths(Path(record.workdir))
    backend = make_backend(settings, engine=engine)
    identities: dict[str, str] = {}

    def identity(image: str) -> str:
        """As the runner keys a step (``CachePass.image_identity``): a pinned digest, else the engine's image ID."""
        if "@sha256:" in image:
            return image.rsplit("@", 1)[1]
        if image not in identities:
            identities[image] = backend.image_id(image) or image
        return identities[image]

    key_of = StepKeys(
        identity=identity,
        outputs_of=lambda p: store.outputs(run_id, p),
        out_dir=paths.step_out,
        data=recorded.data,
        secrets_root=store.path.parent,
        refs_when_unknown=True,  # unknown content: the references
    )
    amendment = compare(apply_images(old.workflow, recorded.images), pinned.workflow, store.steps(run_id), key_of)
    plan = plan_on_node(store, pinned, node, sorted({*recorded.pulls, *pulls}), steer=settings.steer)
    plan = dataclasses.replace(plan, data=recorded.data)
    version = paths.workflow_version() + 1
    message = f"workflow version {version} applied from {record.workflow_file}" + "".join(
        f"; {c.text()}" for c in amendment.changes
    )
    kept = paths.workflow_at(version - 1)
    os.replace(paths.workflow, kept)
    try:
        paths.record_workflow(current.text, current.includes)
        store.amend_run(
            run_id,
            spec_json=pinned.workflow.model_dump_json(by_alias=True),
            plan_json=plan.to_json(),
            add=amendment.added,
            drop=amendment.removed,
            expansions=more,
            message=message,
        )
    except BaseException:
        os.replace(kept, paths.workflow)  # nothing applied: the run stays as recorded
        raise
    return current, amendment


def _merged_images(
    old: Workflow, new: Workflow, pinned: Workflow, recorded: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """step -> variant -> image: a variant whose image is written as it was keeps the image the
    run pinned (so an unchanged step is not moved to a newer build); others get the new pin."""
    written_old, written_new, now = images_of(old), images_of(new), images_of(pinned)
    images: dict[str, dict[str, str]] = {}
    for s, variants in now.items():
        key = s if s in recorded else fanout_parent(s)
        before = recorded.get(key, {}) if key is not None else {}
        images[s] = {
            v: before[v] if v in before and written_old.get(s, {}).get(v) == written_new[s].get(v) else image
            for v, image in variants.items()
        }
    return images

"""From a loaded workflow to a recorded run: pre-flight checks, then the run record.

Everything that can be refused is refused here, before any container starts."""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from hetflow.errors import Problem, SpecError
from hetflow.execute.backends.registry import DEFAULT_BACKEND
from hetflow.execute.checkpoint import GpuCheckpointSupport, criu_support, gpu_checkpoint_support, gpu_step_problem
from hetflow.execute.data.paths import RunPaths, make_run_dir
from hetflow.execute.engine import ContainerEngine
from hetflow.inventory import Node
from hetflow.plan import Capacity, check, feasibility_problems
from hetflow.spec import LoadedWorkflow
from hetflow.state import RunRecord, Store


def preflight(
    loaded: LoadedWorkflow, node: Node, engine: ContainerEngine | None, *, pulled: Collection[str] = ()
) -> list[Problem]:
    """Feasibility on this node, then the images of every variant that could run here;
    ``pulled``: images a run pulls first (a dry run has not pulled them)."""
    problems = feasibility_problems(loaded, node)
    if engine is None:
        return problems
    problems += checkpoint_problems(loaded, engine.name, node)
    total = Capacity.of(node)
    seen: dict[str, bool] = {}
    missing: dict[str, list[tuple[str, int]]] = {}  # image -> (who, line), in file order
    for sname, step in loaded.workflow.steps.items():
        for vname, v in step.resolved_variants().items():
            if seen.get(v.image):
                continue  # the image is there: nothing to say, whether the variant fits or not
            if not check(v, total, where="this machine", now=False, labels=node.labels).ok:
                continue
            if v.image not in seen:
                seen[v.image] = v.image in pulled or engine.image_exists(v.image)
            if not seen[v.image]:
                loc = ("steps", sname, "variants", vname, "image") if step.variants else ("steps", sname, "image")
                label = f"step {sname!r}" + (f" variant {vname!r}" if step.variants else "")
                missing.setdefault(v.image, []).append((label, loaded.line(*loc)))
    for image, users in missing.items():
        label, line = users[0]
        more = f" (and {len(users) - 1} more step(s) use it)" if len(users) > 1 else ""
        problems.append(
            Problem(
                loaded.file,
                line,
                f"{label}: image {image!r} is not in {engine.name}'s image store{more}; build it "
                f"('make images' for the examples) or pull it ({engine.name} pull {image})",
            )
        )
    return problems


def checkpoint_problems(loaded: LoadedWorkflow, engine: str, node: Node | None = None) -> list[Problem]:
    """``checkpoint:`` (CRIU) on a machine where podman cannot checkpoint, or on a GPU step
    whose CUDA state cannot be checkpointed on ``node``: refused before anything runs, with
    the reason (``hetflow nodes`` says it too) and the alternative."""
    steps = [n for n, s in loaded.workflow.steps.items() if s.checkpoint is not None and s.checkpoint.transparent]
    if not steps:
        return []
    support = criu_support(engine=engine)
    if not support.ok:
        more = f" (and {len(steps) - 1} more step(s))" if len(steps) > 1 else ""
        return [
            Problem(
                loaded.file,
                loaded.line("steps", steps[0], "checkpoint"),
                f"step {steps[0]!r}{more}: checkpoint: CRIU checkpoints do not work here: {support.reason}; "
                "or write checkpoint: {mode: app} (the step saves its own state under $HETFLOW_CHECKPOINT_DIR)",
            )
        ]
    return _gpu_checkpoint_problems(loaded, steps, node) if node is not None else []


def _gpu_checkpoint_problems(loaded: LoadedWorkflow, steps: Sequence[str], node: Node) -> list[Problem]:
    """Each GPU step among ``steps`` whose CUDA state cannot be checkpointed (the driver is
    asked once, and only when a GPU step has ``checkpoint:``)."""
    problems: list[Problem] = []
    support: GpuCheckpointSupport | None = None
    for name in steps:
        step = loaded.workflow.steps[name]
        requests = [v.gpu_request for v in step.resolved_variants().values()]
        if not any(r.any for r in requests):
            continue
        support = support or gpu_checkpoint_support(node)
        why = gpu_step_problem(requests, node, support, gang=step.gang is not None)
        if why:
            problems.append(Problem(loaded.file, loaded.line("steps", name, "checkpoint"), f"step {name!r}: {why}"))
    return problems


def cluster_checkpoint_problems(loaded: LoadedWorkflow, backend: str) -> list[Problem]:
    """GPU steps with ``checkpoint:`` (CRIU) on a cluster backend: their CUDA state is
    checkpointed by the local backend only, and CRIU alone cannot dump a process holding a GPU."""
    problems = []
    for name, step in loaded.workflow.steps.items():
        c = step.checkpoint
        if c is not None and c.transparent and any(v.gpu_request.any for v in step.resolved_variants().values()):
            problems.append(
                Problem(
                    loaded.file,
                    loaded.line("steps", name, "checkpoint"),
                    f"step {name!r}: GPU checkpoints are taken by the local backend only, not by {backend}; "
                    "write checkpoint: {mode: app} (the step saves its own state under $HETFLOW_CHECKPOINT_DIR)",
                )
            )
    return problems


def new_run_id() -> str:
    """8 hex digits, like a short docker id; runs are also found by unique prefix."""
    return secrets.token_hex(4)


def create_run(
    store: Store,
    loaded: LoadedWorkflow,
    home: Path,
    uid: int,
    gid: int,
    *,
    backend: str = DEFAULT_BACKEND,
    backend_json: str = "{}",
    runs_dir: Path | None = None,
    plan_json: str | None = None,
    workdir: Path | None = None,
    expansions: Sequence[tuple[str, str]] = (),
    param_sources: Mapping[str, str] | None = None,
) -> RunRecord:
    """Record a new run (with the plan it follows, ``runplan.RunPlan`` as JSON, and the
    fan-outs expanded at submit); its work directory is ``workdir`` (its last part is the run
    id), or a new one under ``runs_dir`` (a shared directory for multi-node backends) or
    ``home/runs``.  ``param_sources``: where each param given over the workflow's default was
    written (``execute.layers.param_sources``); the others are the workflow file's."""
    errors = [p for p in loaded.notes if p.severity == "error"]
    if errors:
        raise SpecError(errors)
    if workdir is None:
        workdir = (runs_dir or home / "runs") / new_run_id()
    run_id = workdir.name
    paths = RunPaths(workdir)
    make_run_dir(workdir)
    paths.record_workflow(loaded.text, loaded.includes)
    store.create_run(
        run_id=run_id,
        name=loaded.workflow.name,
        workflow_file=str(Path(loaded.file).resolve()),
        spec_json=loaded.workflow.model_dump_json(by_alias=True),
        params_json=json.dumps(dict(loaded.params)),
        uid=uid,
        gid=gid,
        workdir=str(workdir),
        steps=list(loaded.workflow.steps),
        backend=backend,
        backend_json=backend_json,
        plan_json=plan_json,
        expansions=expansions,
    )
    given = param_sources or {}
    sources = {n: given.get(n) or f"workflow {loaded.file}:{loaded.line('params', n)}" for n in loaded.params}
    store.record_params(run_id, loaded.params, sources)
    return store.run(run_id)

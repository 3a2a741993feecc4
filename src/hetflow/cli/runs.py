"""Run commands: run, resume, ps, show, logs, stop (and the hidden executor entry)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from hetflow.cli.common import console, err, open_store, parse_params, print_json, print_problems
from hetflow.config import hetflow_home, submitter
from hetflow.errors import SpecError, UsageError
from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.factory import make_backend
from hetflow.execute.engine import CliEngine, make_engine
from hetflow.execute.images import default_resolver, pin_images
from hetflow.execute.logs import read_lines
from hetflow.execute.outputs import damaged_outputs
from hetflow.execute.paths import RunPaths
from hetflow.execute.runner import Runner, RunnerConfig, reset_for_resume, stop_run
from hetflow.execute.settings import Settings, load_settings
from hetflow.execute.submit import create_run, preflight
from hetflow.images.reference import parse_reference
from hetflow.inventory import Node, discover
from hetflow.plan.build import build_instance
from hetflow.plan.choose import GreedyChooser, PlanChooser, VariantChooser
from hetflow.plan.cluster import load_cluster
from hetflow.plan.heuristic import plan_heuristic
from hetflow.plan.images import image_check
from hetflow.plan.instance import MachineClass, Plan
from hetflow.plan.local import plan_local
from hetflow.plan.profile import learn, profile_for
from hetflow.report.progress import make_reporter
from hetflow.report.runs import ps_table, run_json, steps_table
from hetflow.spec.checks import edges_of
from hetflow.spec.loader import LoadedWorkflow, load_workflow
from hetflow.state.models import RUN_RUNNING, RUN_SUCCEEDED, RUN_TERMINAL
from hetflow.state.store import Store


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(resume)
    app.command()(ps)
    app.command()(show)
    app.command()(logs)
    app.command()(stop)
    app.command("_execute", hidden=True)(execute_detached)


def run(
    file: Path = typer.Argument(..., help="Workflow YAML."),
    param: list[str] = typer.Option([], "-p", "--param", help="Override a param: -p NAME=VALUE."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Print the run id and run in the background."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    backend: str | None = typer.Option(None, "--backend", help="local (default), slurm or ray."),
    cluster: Path | None = typer.Option(None, "--cluster", help="Cluster file to plan on (slurm, ray)."),
    config: Path | None = typer.Option(None, "--config", help="Settings file (default $HETFLOW_HOME/config.yaml)."),
) -> None:
    """Run a workflow: on this machine, or planned on a cluster and handed to Slurm or Ray."""
    settings = load_settings(config, hetflow_home(), os.environ, backend=backend, cluster=cluster)
    loaded = load_workflow(file, parse_params(param))
    store, node = open_store(), discover(hetflow_home())
    uid, gid = submitter()
    if settings.backend == "local":
        engine = make_engine()
        loaded = _pin(loaded, node, engine)
        problems = list(loaded.notes) + preflight(loaded, node, engine)
        if any(p.severity == "error" for p in problems):
            raise SpecError(problems)
        print_problems(problems)
    else:
        make_backend(settings).check()
        _cluster_plan(store, loaded, settings)  # refuse before recording anything if it cannot be planned
    runs_dir = Path(settings.workdir) if settings.workdir else None
    record = create_run(
        store,
        loaded,
        hetflow_home(),
        uid,
        gid,
        backend=settings.backend,
        backend_json=settings.to_json(),
        runs_dir=runs_dir,
    )
    _go(store, record.id, loaded, detach=detach, quiet=quiet)


def resume(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Resume in the background."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Resume a stopped, failed or crashed run: keep intact outputs, adopt running containers."""
    store = open_store()
    record = store.run(store.resolve_run_id(run_id))
    if record.state == RUN_SUCCEEDED:
        console.print(f"run {record.id} already succeeded; nothing to resume")
        return
    loaded = _load_recorded(store, record.id)
    reset = reset_for_resume(
        store,
        record.id,
        lambda step: damaged_outputs(store.outputs(record.id, step)),
        edges_of(loaded.workflow),
    )
    if reset:
        err.print(f"resuming {record.id}: re-running {', '.join(reset)}", highlight=False)
    _go(store, record.id, loaded, detach=detach, quiet=quiet)


def _load_recorded(store: Store, run_id: str) -> LoadedWorkflow:
    record = store.run(run_id)
    paths = RunPaths(Path(record.workdir))
    return load_workflow(paths.workflow, json.loads(record.params_json))


def _go(store: Store, run_id: str, loaded: LoadedWorkflow, *, detach: bool, quiet: bool) -> None:
    if detach:
        paths = RunPaths(Path(store.run(run_id).workdir))
        with paths.executor_log.open("ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "hetflow.cli.main", "_execute", run_id],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=os.environ.copy(),
            )
        print(run_id)
        return
    state = _execute(store, run_id, loaded, quiet=quiet, out=console)
    raise typer.Exit(0 if state == RUN_SUCCEEDED else 1)


def _cluster_plan(store: Store, loaded: LoadedWorkflow, settings: Settings) -> tuple[Plan, tuple[MachineClass, ...]]:
    """Plan the workflow on the settings' cluster file (history wins over estimates)."""
    assert settings.cluster is not None
    cluster = load_cluster(settings.cluster)
    name = loaded.workflow.name
    instance = build_instance(
        loaded.workflow,
        cluster.classes(),
        bandwidth=cluster.bandwidth_bytes,
        profile=profile_for(learn(store.history(name)), name),
        image_check=image_check(default_resolver),
    )
    return plan_heuristic(instance), cluster.classes()


def _execute(store: Store, run_id: str, loaded: LoadedWorkflow, *, quiet: bool, out: Console) -> str:
    record = store.run(run_id)
    settings = Settings.from_json(record.backend_json)
    node = discover(hetflow_home())
    if settings.backend != "local":
        return _execute_cluster(store, run_id, loaded, settings, node, quiet=quiet, out=out)
    engine = make_engine()
    loaded = _pin(loaded, node, engine, quiet=True)
    chooser, priority = _local_plan(store, loaded, node)
    runner = Runner(
        store=store,
        engine=engine,
        node=node,
        workflow=loaded.workflow,
        run=store.run(run_id),
        reporter=make_reporter(out, quiet),
        config=RunnerConfig.from_env(),
        chooser=chooser,
        priority=priority,
    )
    gpus = f"{len(node.gpus)} GPU(s){', fake' if node.gpu_source == 'fake' else ''}"
    banner = f"run {run_id} of {loaded.workflow.name} on {node.name} ({node.cpu.cores} CPUs, {gpus})"
    return _drive(store, run_id, runner, runner.backend, None if quiet else banner, out)


def _execute_cluster(
    store: Store, run_id: str, loaded: LoadedWorkflow, settings: Settings, node: Node, *, quiet: bool, out: Console
) -> str:
    backend = make_backend(settings)
    backend.check()
    plan, classes = _cluster_plan(store, loaded, settings)
    runner = Runner(
        store=store,
        node=node,
        workflow=loaded.workflow,
        run=store.run(run_id),
        reporter=make_reporter(out, quiet),
        config=RunnerConfig.from_env(),
        backend=backend,
        placements=plan.placements,
        classes=classes,
        priority={s: p.start for s, p in plan.placements.items()},
    )
    banner = (
        f"run {run_id} of {loaded.workflow.name} on {settings.backend} (cluster {settings.cluster}, "
        f"planned makespan {plan.makespan:.1f}s)"
    )
    return _drive(store, run_id, runner, backend, None if quiet else banner, out)


def _drive(store: Store, run_id: str, runner: Runner, backend: Backend, banner: str | None, out: Console) -> str:
    """Run to the end; Ctrl-C stops the run (its containers or jobs) so it can be resumed."""
    runner.install_signal_handlers()
    if banner:
        err.print(banner, highlight=False)
    try:
        state = runner.execute()
    except KeyboardInterrupt:
        stop_run(store, backend, run_id)
        err.print(f"run {run_id} stopped; 'hetflow resume {run_id}' continues it", highlight=False)
        return "stopped"
    _summary(store, run_id, out)
    return state


def _pin(loaded: LoadedWorkflow, node: Node, engine: CliEngine, *, quiet: bool = False) -> LoadedWorkflow:
    """Resolve each image index to the build for this node and pull it by digest."""
    pin = pin_images(loaded.workflow, node)
    for note in pin.notes:
        if not quiet:
            err.print(f"note: {note}", highlight=False)
    for ref in pin.pulls:
        if not engine.image_exists(ref):
            engine.pull(ref, insecure=parse_reference(ref).is_loopback)
    for image, pinned in sorted(pin.pinned.items()):
        if not quiet:
            err.print(f"image {image} -> {pinned}", highlight=False)
    return dataclasses.replace(loaded, workflow=pin.workflow)


def _local_plan(store: Store, loaded: LoadedWorkflow, node: Node) -> tuple[VariantChooser, dict[str, float] | None]:
    """Follow the planner on this machine (HETFLOW_PLANNER=greedy: the plain rule of
    "GPU variant when a qualifying GPU is free, else CPU")."""
    if os.environ.get("HETFLOW_PLANNER", "plan") == "greedy":
        return GreedyChooser(), None
    name = loaded.workflow.name
    local = plan_local(loaded.workflow, node, profile_for(learn(store.history(name)), name))
    return PlanChooser(local.variants, local.reasons), local.priority


def _summary(store: Store, run_id: str, out: Console) -> None:
    record = store.run(run_id)
    steps = store.steps(run_id)
    out.print(steps_table(steps))
    took = (record.ended or time.time()) - (record.started or record.created)
    color = "green" if record.state == RUN_SUCCEEDED else "red"
    out.print(f"run {record.id} [{color}]{record.state}[/] in {took:.1f}s: {record.message}")
    if record.state != RUN_SUCCEEDED:
        out.print(
            f"  'hetflow logs {record.id} STEP' shows a step's output; 'hetflow resume {record.id}' retries what failed"
        )


def execute_detached(run_id: str) -> None:
    """(internal) The executor of a detached run."""
    store = open_store()
    loaded = _load_recorded(store, run_id)
    state = _execute(store, run_id, loaded, quiet=False, out=Console(force_terminal=False))
    raise typer.Exit(0 if state == RUN_SUCCEEDED else 1)


def ps(
    all_runs: bool = typer.Option(False, "--all", "-a", help="Also runs that ended."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List runs (running ones; --all for every run)."""
    store = open_store()
    records = store.runs(include_ended=all_runs)
    rows = [(r, store.steps(r.id)) for r in records]
    if json_out:
        print_json([run_json(r, s) for r, s in rows])
    elif rows:
        console.print(ps_table(rows))
    else:
        console.print("no runs" + ("" if all_runs else " running; 'hetflow ps --all' lists every run"))


def show(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    gantt: Path | None = typer.Option(None, "--gantt", help="Draw the actual schedule: FILE.svg, .html or .png."),
) -> None:
    """Every step of a run: state, variant, node, GPUs, attempts, exit code, times, why."""
    store = open_store()
    rid = store.resolve_run_id(run_id)
    record, steps = store.run(rid), store.steps(rid)
    if gantt is not None:
        from hetflow.report.actual import actual_schedule
        from hetflow.report.gantt import write_gantt

        write_gantt(*actual_schedule(record, store.attempts(rid)), gantt)
        err.print(f"schedule of run {rid} drawn to {gantt}", highlight=False)
    if json_out:
        data = run_json(record, steps, store.attempts(rid))
        data["outputs"] = [o.__dict__ for o in store.outputs(rid)]
        print_json(data)
        return
    console.print(
        f"run {record.id}  {record.name}  [bold]{record.state}[/]  user {record.uid}:{record.gid}",
        highlight=False,
    )
    console.print(f"workflow {record.workflow_file}\nworkdir  {record.workdir}", highlight=False)
    if record.message:
        console.print(record.message, highlight=False)
    images = {a.step: a.image for a in store.attempts(rid)}  # the last attempt's image, pinned by digest
    console.print(steps_table(steps, images=images))


def logs(
    run_id: str = typer.Argument(..., help="Run id."),
    step: str | None = typer.Argument(None, help="One step (default: all)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    attempt: int | None = typer.Option(None, "--attempt", help="One attempt (default: all)."),
) -> None:
    """Print the output of a run's containers."""
    store = open_store()
    rid = store.resolve_run_id(run_id)
    record = store.run(rid)
    names = [s.step for s in store.steps(rid)]
    if step is not None and step not in names:
        raise UsageError(f"run {rid} has no step {step!r}; its steps: {', '.join(names)}")
    paths = RunPaths(Path(record.workdir))
    offsets: dict[Path, int] = {}
    while True:
        for a in store.attempts(rid, step):
            if attempt is not None and a.attempt != attempt:
                continue
            path = paths.log(a.step, a.attempt)
            lines, offsets[path] = read_lines(path, offsets.get(path, 0))
            prefix = f"{a.step}.{a.attempt} | " if step is None or attempt is None else ""
            for stream, text in lines:
                print(prefix + text, file=sys.stderr if stream == "stderr" else sys.stdout, flush=True)
        if not follow or store.run(rid).state in RUN_TERMINAL:
            break
        time.sleep(0.5)


def stop(run_id: str = typer.Argument(..., help="Run id.")) -> None:
    """Stop a run: end its executor, stop its containers, mark it stopped."""
    store = open_store()
    rid = store.resolve_run_id(run_id)
    record = store.run(rid)
    if record.state in RUN_TERMINAL and record.state != RUN_RUNNING:
        console.print(f"run {rid} is already {record.state}")
        return
    names = stop_run(store, make_backend(Settings.from_json(record.backend_json)), rid)
    console.print(f"run {rid} stopped ({len(names)} container(s)); 'hetflow resume {rid}' continues it")

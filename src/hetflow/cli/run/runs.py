"""Run commands: run, resume, ps, show, stop (and the hidden executor entry); logs: ``cli.run.logs``."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hetflow.cli.common import (
    PARAMS_FILE_HELP,
    console,
    err,
    gather_params,
    known_secrets,
    open_store,
    print_json,
    print_problems,
)
from hetflow.cli.run.cwlrun import refuse_for_cwl, run_cwl
from hetflow.cli.run.options import grace_option, secrets_file_option
from hetflow.cli.shell import complete_runs
from hetflow.config import hetflow_home, submitter
from hetflow.errors import UsageError
from hetflow.execute import backend_help, backend_plugins

if TYPE_CHECKING:
    from rich.console import Console

    from hetflow.execute import Ended, OpenRun, Settings
    from hetflow.inventory import Node
    from hetflow.spec import LoadedWorkflow
    from hetflow.state import Store

# The execute stage, the hardware probes and the loader are imported where a command needs
# them: `hetflow ps`, `show` and `logs` read the store only and should answer at once.


SECRETS_HELP = (
    "NAME=VALUE lines: values of the steps' secrets (else read from the environment; never stored)."
    " A detached run and a resume read it again."
)
GRACE_HELP = (
    "On SIGINT or SIGTERM, how long each step has to save its work before SIGKILL: 30s, 2m, 0"
    " (default $HETFLOW_STOP_GRACE, else each step's stop_grace, else the engine's: podman 10s, Slurm KillWait)."
)


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(resume)
    app.command()(ps)
    app.command()(show)
    app.command()(stop)
    app.command("_execute", hidden=True)(execute_detached)


# from the registry (``execute.backends.registry``): each backend declares its line
BACKEND_HELP = backend_help()
CLUSTER_HELP = f"Cluster file to plan on ({', '.join(p.name for p in backend_plugins() if p.cluster_file)})."


def run(
    file: Path = typer.Argument(..., help="Workflow YAML, or a CWL workflow or tool (FILE.cwl)."),
    inputs: Path | None = typer.Argument(None, help="A CWL file's inputs (YAML or JSON)."),
    param: list[str] = typer.Option([], "-p", "--param", help="Override a param: -p NAME=VALUE."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Print the run id and run in the background."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    backend: str | None = typer.Option(None, "--backend", help=BACKEND_HELP),
    cluster: Path | None = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    config: Path | None = typer.Option(None, "--config", help="Settings file (default $HETFLOW_HOME/config.yaml)."),
    profile: list[str] = typer.Option(
        [],
        "--profile",
        metavar="NAME,...",
        help="Apply the settings file's profiles, in order (later wins): --profile slurm,gpu.",
    ),
    params_file: Path | None = typer.Option(None, "--params-file", metavar="FILE", help=PARAMS_FILE_HELP),
    no_cache: bool = typer.Option(False, "--no-cache", help="Run every step: reuse no cached result, keep none."),
    variant: list[str] = typer.Option([], "--variant", help="Force a variant: --variant STEP=NAME (repeatable)."),
    prefer: str | None = typer.Option(None, "--prefer", help="gpu or cpu: the kind to choose where both run."),
    grace: str | None = typer.Option(None, "--grace", help=GRACE_HELP),
    dry_run: bool = typer.Option(
        False, "--dry-run", "-n", help="Say what would run, what is cached and what is skipped; start nothing."
    ),
    json_out: bool = typer.Option(False, "--json", help="With --dry-run: machine-readable output."),
    secrets_file: Path | None = typer.Option(None, "--secrets-file", metavar="FILE", help=SECRETS_HELP),
    notify: list[str] = typer.Option(
        [], "--notify", metavar="URL", help="POST JSON here on each step failure and at the run's end (repeatable)."
    ),
) -> None:
    """Run a workflow: on this machine, or planned on a cluster and handed to Slurm or Ray."""
    if file.suffix == ".cwl":
        refuse_for_cwl(
            file, detach=detach, param=param, profile=profile, params_file=params_file, variant=variant, prefer=prefer,
            grace=grace, dry_run=dry_run, json=json_out, secrets_file=secrets_file, notify=notify,
        )  # fmt: skip
        raise typer.Exit(
            run_cwl(file, inputs, quiet, backend=backend, config=config, no_cache=no_cache, cluster=cluster)
        )
    if inputs is not None:
        raise UsageError(f"{inputs}: an inputs file goes with a CWL workflow (FILE.cwl), not with {file}")
    from hetflow.execute import apply_resources, load_settings, param_sources, split_profiles, submit_run
    from hetflow.inventory import discover
    from hetflow.plan import parse_steer
    from hetflow.state import load_workflow_cached

    steer = parse_steer(variant, prefer)
    seconds = grace_option(grace)  # a bad one is refused before the run is recorded
    settings = load_settings(
        config, hetflow_home(), os.environ, backend=backend, cluster=cluster, profiles=split_profiles(profile)
    )
    settings = dataclasses.replace(settings, variants=dict(steer.variants), prefer=steer.prefer)
    if no_cache:
        settings = dataclasses.replace(settings, cache=False)
    settings = dataclasses.replace(settings, notify=_notify_urls(settings, notify))
    if json_out and not dry_run:
        raise UsageError("--json goes with --dry-run (a run's progress as JSON: hetflow show RUN --json)")
    params, origins = gather_params(param, params_file, settings.params, settings.param_origins)
    loaded = load_workflow_cached(file, params, origins=origins)
    loaded = apply_resources(loaded, settings.resources, settings.resource_origins, strict=True)
    secrets_file_option(secrets_file)
    store, node = open_store(), discover(hetflow_home())
    if dry_run:
        known_secrets(loaded.workflow)  # a step with secrets is looked up in the cache by their digests
        _dry_run(store, loaded, settings, node, json_out=json_out)
        return
    uid, gid = submitter()
    opened = submit_run(
        store,
        loaded,
        settings,
        node,
        home=hetflow_home(),
        uid=uid,
        gid=gid,
        say=_say,
        problems=print_problems,
        param_sources=param_sources(params, origins),
    )
    _go(opened, detach=detach, quiet=quiet, grace=seconds)


def resume(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough).", autocompletion=complete_runs),
    detach: bool = typer.Option(False, "--detach", "-d", help="Resume in the background."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    step: str | None = typer.Option(None, "--step", help="Retry only this failed step (and what it skipped)."),
    as_recorded: bool = typer.Option(
        False, "--as-recorded", help="Follow the workflow recorded with the run, not its file as it is now."
    ),
    grace: str | None = typer.Option(None, "--grace", help=GRACE_HELP),
    secrets_file: Path | None = typer.Option(None, "--secrets-file", metavar="FILE", help=SECRETS_HELP),
) -> None:
    """Resume a stopped, failed or crashed run: keep intact outputs, adopt running containers.

    The workflow is read again from its file: an edit is applied (steps whose cache key
    changed run again with what follows them; publish, resources or retries edits take effect
    for the steps that run again)."""
    from hetflow.execute import edited_since, load_recorded, rehash_for_resume, resume_run
    from hetflow.inventory import discover
    from hetflow.state import RUN_SUCCEEDED

    seconds = grace_option(grace)
    secrets_file_option(secrets_file)
    store = open_store()
    record = store.run(store.resolve_run_id(run_id))
    from hetflow.cwl import cwl_invocation, resume_cwl_run

    if cwl_invocation(record) is not None:  # the cwl-runner again, as the same run (``hetflow.cwl.control``)
        flags = [f for f, given in (("--detach", detach), ("--step", step), ("--grace", grace)) if given]
        raise typer.Exit(resume_cwl_run(store, record, quiet=quiet, refused=flags))
    if record.state == RUN_SUCCEEDED:
        console.print(f"run {record.id} already succeeded; nothing to resume", highlight=False)
        _tidy(store, record.id)
        touched = rehash_for_resume(store, record.id, load_recorded(store, record.id).workflow)
        if touched.rerun:
            console.print(
                f"its data changed since ({'; '.join(c.text() for c in touched.changes)}): 'hetflow run"
                f" {record.workflow_file}' runs what that touches again, the rest from the cache",
                highlight=False,
            )
        if not as_recorded and edited_since(store, record.id):
            console.print(
                f"{record.workflow_file} changed since: 'hetflow run {record.workflow_file}' runs it again,"
                " taking the unchanged steps' results from the cache",
                highlight=False,
            )
        return
    opened, reset, amendment = resume_run(
        store, record.id, discover(hetflow_home()), only=step, as_recorded=as_recorded, say=_say
    )
    for line in amendment.data:
        err.print(f"resuming {record.id}: {line} since the run last looked", highlight=False)
    if amendment.changes:
        why = f"the workflow edited in {record.workflow_file}" if amendment.edited else "its data as it is now"
        err.print(f"resuming {record.id} with {why}:", highlight=False)
        for change in amendment.changes:
            err.print(f"  {change.text()}", highlight=False)
    if reset:
        err.print(f"resuming {record.id}: re-running {', '.join(reset)}", highlight=False)
    _go(opened, detach=detach, quiet=quiet, grace=seconds)


def _tidy(store: Store, run_id: str) -> None:
    """A succeeded run leaves nothing behind: what its killed executor left (exited containers,
    gang networks, orphaned monitors) is removed as ``doctor --repair`` would, and said."""
    from hetflow.execute import Settings, make_engine, tidy

    if not Settings.from_json(store.run(run_id).backend_json).leases_here:
        return
    removed = tidy(store, make_engine(), run_id)
    if removed:
        names = ", ".join(f"{f.kind} {f.name}" for f in removed)
        console.print(f"removed what its executor left behind: {names}", highlight=False)


def _dry_run(store: Store, loaded: LoadedWorkflow, settings: Settings, node: Node, *, json_out: bool) -> None:
    from hetflow.execute import preview_run
    from hetflow.report import preview_table

    preview = preview_run(store, loaded, settings, node, cache_root=hetflow_home() / "cache")
    if json_out:
        print_json(preview.to_json())
        return
    for note in preview.notes:
        err.print(note, highlight=False)
    console.print(preview_table(preview.steps))
    for ref in preview.pulls:
        console.print(f"would pull {ref}", highlight=False)
    n = preview.counts()
    span = f"; planned makespan {preview.makespan:.1f}s if every step ran" if preview.makespan is not None else ""
    console.print(
        f"dry run of {preview.workflow} ({preview.backend}): {n['runs']} step(s) would run"
        f" (~{preview.run_seconds():.1f}s of step time), {n['cached']} cached, {n['skipped']} skipped{span};"
        " nothing was started or recorded",
        highlight=False,
    )


def _notify_urls(settings: Settings, given: list[str]) -> tuple[str, ...]:
    """The settings file's ``notify:`` and then --notify's, each checked (recorded with the run,
    so its detached executor and a resume notify them too)."""
    from hetflow.execute import check_urls, urls_of

    try:
        configured = check_urls(urls_of(settings.notify), "notify: in the settings file:")
    except (TypeError, ValueError):
        raise UsageError("notify: in the settings file is a URL or a list of URLs") from None
    return tuple(dict.fromkeys([*configured, *check_urls(given)]))


def _say(text: str) -> None:
    err.print(text, highlight=False)


def _go(opened: OpenRun, *, detach: bool, quiet: bool, grace: int | None) -> None:
    from hetflow.execute import RunPaths, spawn_executor

    run_id = opened.run.id
    if detach:
        # the executor reads the grace where the user's shell would have put it
        spawn_executor(
            opened.store,
            run_id,
            [sys.executable, "-m", "hetflow.cli.main", "_execute", run_id],
            log=RunPaths(Path(opened.run.workdir)).executor_log,
            env=os.environ | ({} if grace is None else {"HETFLOW_STOP_GRACE": f"{grace}s"}),
        )
        print(run_id)
        return
    ended = _execute(opened, quiet=quiet, out=console, grace=grace)
    raise typer.Exit(ended.exit_code)


def _execute(opened: OpenRun, *, quiet: bool, out: Console, grace: int | None) -> Ended:
    """Drive the run; SIGINT or SIGTERM stops it (``drive``) and the command exits as a
    shell's does, 128 + the signal's number."""
    from hetflow.execute import drive
    from hetflow.report import make_reporter, step_items  # make_reporter: rich's live display, only a run draws it

    reporter = make_reporter(out, quiet, items=lambda rid: step_items(opened.store.expansions(rid)))
    ended = drive(opened, reporter, _say, banner=not quiet, grace=grace)
    if not ended.interrupted:
        _summary(opened.store, opened.run.id, out)
    return ended


def _summary(store: Store, run_id: str, out: Console) -> None:
    from hetflow.report import item_labels, print_table, steps_table
    from hetflow.state import RUN_SUCCEEDED

    record = store.run(run_id)
    steps = store.steps(run_id)
    print_table(out, steps_table(steps, items=item_labels(store.expansions(run_id)) or None))
    took = (record.ended or time.time()) - (record.started or record.created)
    color = "green" if record.state == RUN_SUCCEEDED else "red"
    out.print(f"run {record.id} [{color}]{record.state}[/] in {took:.1f}s: {record.message}")
    if record.state != RUN_SUCCEEDED:
        out.print(
            f"  'hetflow logs {record.id} STEP' shows a step's output; 'hetflow resume {record.id}' retries what failed"
        )
    for line in _data_notes(store, run_id):
        out.print(f"  {line}", highlight=False)


def _data_notes(store: Store, run_id: str) -> list[str]:
    """What the run found changed in its data while it ran (``execute.data.watch``)."""
    from hetflow.state import DATA_CHANGED

    return [e.message for e in store.events(run_id) if e.kind == DATA_CHANGED]


def execute_detached(run_id: str) -> None:
    """(internal) The executor of a detached run."""
    from rich.console import Console

    from hetflow.execute import grace_from_env, open_run
    from hetflow.inventory import discover

    grace = grace_from_env(os.environ)  # the submitter's, checked there (its environment is passed on)
    store = open_store()
    opened = open_run(store, run_id, discover(hetflow_home()))
    ended = _execute(opened, quiet=False, out=Console(force_terminal=False), grace=grace)
    raise typer.Exit(ended.exit_code)


def ps(
    all_runs: bool = typer.Option(False, "--all", "-a", help="Also runs that ended."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List runs (running ones; --all for every run)."""
    from hetflow.report import ps_table, run_json
    from hetflow.state import executor_gone

    store = open_store()
    records = store.runs(include_ended=all_runs)
    rows = [(r, store.steps(r.id)) for r in records]
    gone = frozenset(r.id for r in records if executor_gone(r))
    if json_out:
        print_json([run_json(r, s, executor_gone=r.id in gone) for r, s in rows])
    elif rows:
        console.print(ps_table(rows, gone))
    else:
        console.print("no runs" + ("" if all_runs else " running; 'hetflow ps --all' lists every run"))


def show(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough).", autocompletion=complete_runs),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    gantt: Path | None = typer.Option(None, "--gantt", help="Draw the actual schedule: FILE.svg, .html or .png."),
) -> None:
    """Every step of a run: state, variant, node, GPUs, attempts, exit code, times, why."""
    from hetflow.execute import DISCARDED_WORDS, kept_checkpoints
    from hetflow.report import (
        item_labels,
        params_json,
        params_table,
        run_json,
        run_state_text,
        step_items,
        steps_table,
        user_text,
        versions_text,
    )  # fmt: skip
    from hetflow.state import executor_gone

    store = open_store()
    rid = store.resolve_run_id(run_id)
    record, steps = store.run(rid), store.steps(rid)
    if gantt is not None:
        from hetflow.report import actual_schedule, write_gantt

        write_gantt(*actual_schedule(record, store.attempts(rid)), gantt)
        err.print(f"schedule of run {rid} drawn to {gantt}", highlight=False)
    if json_out:
        items = step_items(store.expansions(rid))
        data = run_json(record, steps, store.attempts(rid), executor_gone=executor_gone(record), items=items)
        data["outputs"] = [o.__dict__ for o in store.outputs(rid)]
        data["checkpoints"] = [c.__dict__ for c in kept_checkpoints(record.workdir)]
        data["data_changes"] = _data_notes(store, rid)
        data["params"] = params_json(store.run_params(rid))
        print_json(data)
        return
    console.print(
        f"run {record.id}  {record.name}  [bold]{run_state_text(record, executor_gone(record))}[/]"
        f"  user {user_text(record)}",
        highlight=False,
    )
    console.print(f"workflow {record.workflow_file}\nworkdir  {record.workdir}", highlight=False)
    if record.message:
        console.print(record.message, highlight=False)
    params = store.run_params(rid)
    if params:
        console.print(params_table(params))
    attempts = store.attempts(rid)
    images = {a.step: a.image for a in attempts}  # the last attempt's image, pinned by digest
    console.print(steps_table(steps, images=images, items=item_labels(store.expansions(rid))))
    for a in attempts:  # lost, it ended after hetflow had accepted another (``execute.lostattempts``)
        if a.message.endswith(DISCARDED_WORDS):
            console.print(f"{a.step} attempt {a.attempt}: {a.message.rsplit('; ', 1)[-1]}", highlight=False)
    for c in kept_checkpoints(record.workdir):
        console.print(c.describe(), highlight=False)
    for line in _data_notes(store, rid):
        console.print(line, highlight=False)
    versions = versions_text(attempts)
    if versions:
        console.print(versions, highlight=False)


def stop(
    run_id: str = typer.Argument(..., help="Run id.", autocompletion=complete_runs),
    grace: str | None = typer.Option(
        None,
        "--grace",
        help="How long each step has to save its work after SIGTERM before SIGKILL: 30s, 2m, 0 (at once)."
        " Default: each step's stop_grace, else the engine's (podman: 10s; Slurm: the cluster's KillWait).",
    ),
    checkpoint: bool = typer.Option(
        False,
        "--checkpoint",
        help="Dump the steps with CRIU checkpoints (checkpoint: in the workflow) first: resume restores them.",
    ),
) -> None:
    """Stop a run: end its executor, stop its containers (SIGTERM, SIGKILL after the grace), mark it stopped."""
    from hetflow.execute import Settings, make_backend, parse_grace, stop_run
    from hetflow.state import RUN_RUNNING, RUN_TERMINAL

    seconds = parse_grace(grace) if grace is not None else None
    store = open_store()
    rid = store.resolve_run_id(run_id)
    record = store.run(rid)
    if record.state in RUN_TERMINAL and record.state != RUN_RUNNING:
        console.print(f"run {rid} is already {record.state}")
        return
    from hetflow.cwl import cwl_invocation, stop_cwl_run

    backend = make_backend(Settings.from_json(record.backend_json))
    if cwl_invocation(record) is not None:  # its runner ended, then its containers (``hetflow.cwl.control``)
        names = stop_cwl_run(store, backend, record, seconds, checkpoint=checkpoint)
    else:
        names = stop_run(store, backend, rid, grace=seconds, checkpoint=checkpoint)
    console.print(f"run {rid} stopped ({len(names)} container(s)); 'hetflow resume {rid}' continues it")

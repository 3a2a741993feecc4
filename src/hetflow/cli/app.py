"""The ``hetflow`` typer app: its callback (--version), main's own commands (validate, nodes)
and ``register_commands``, which adds the command modules a command line needs.

``hetflow.cli.main`` imports it once it knows it has a command to run: a bash completion of
the first word is answered before typer, rich or the store are imported."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hetflow.cli.commands import BAD_INPUT, COMMANDS, OWN_COMMANDS, VERSION_FLAGS
from hetflow.cli.common import (
    PARAMS_FILE_HELP,
    console,
    gather_params,
    open_store,
    print_json,
    print_problems,
)
from hetflow.cli.flags import install as flags_without_pydantic
from hetflow.cli.helptext import plain_help
from hetflow.config import hetflow_home
from hetflow.errors import EngineError, SpecError, UsageError
from hetflow.execute import DEFAULT_BACKEND, backend_plugins

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hetflow.errors import Problem
    from hetflow.execute import RuntimeChoice, Settings
    from hetflow.spec import LoadedWorkflow, Origin

plain_help()
flags_without_pydantic()
app = typer.Typer(
    name="hetflow",
    help="Containerized CPU/GPU workflows on heterogeneous machines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def register_commands(argv: list[str]) -> None:
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None and argv and argv[0] in VERSION_FLAGS:
        return  # `hetflow --version` needs no command
    if first in OWN_COMMANDS:
        return  # validate and nodes are main's own: no other module is needed
    wanted = [module for module, names in COMMANDS.items() if first in names]
    for module in wanted or COMMANDS:
        importlib.import_module(f"hetflow.cli.{module}").register(app)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import hetflow

        try:
            number = version("hetflow")  # what pip installed, as `pip show hetflow` says
        except PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
            number = hetflow.__version__
        console.print(f"hetflow {number}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _hetflow(
    version: bool = typer.Option(
        False, *VERSION_FLAGS, is_eager=True, callback=_version, help="Print hetflow's version and exit."
    ),
) -> None:
    """Containerized CPU/GPU workflows on heterogeneous machines."""


PARAM_OPT = typer.Option([], "-p", "--param", help="Override a param: -p NAME=VALUE (repeatable).")


@app.command()
def validate(
    file: Path = typer.Argument(..., help="Workflow YAML."),
    param: list[str] = PARAM_OPT,
    params_file: Path | None = typer.Option(None, "--params-file", metavar="FILE", help=PARAMS_FILE_HELP),
    config: Path | None = typer.Option(
        None, "--config", metavar="FILE", help="Settings file (default $HETFLOW_HOME/config.yaml)."
    ),
    profile: list[str] = typer.Option(
        [], "--profile", metavar="NAME,...", help="Check with the settings file's profiles, as `hetflow run` would."
    ),
    json_out: bool = typer.Option(False, "--json", help="Problems as JSON."),
    offline: bool = typer.Option(False, "--offline", help="Ask no registry and no S3 endpoint (said in a note)."),
) -> None:
    """Check a workflow: everything `hetflow run` would refuse on this machine, all at once."""
    from hetflow.execute import load_settings, split_profiles
    from hetflow.spec import pending_source

    # the params and resources a run would take from the settings file; validate checks on
    # this machine (check_run), so the file's backend (and the cluster it needs) is not asked for
    settings = load_settings(
        config, hetflow_home(), os.environ, backend=DEFAULT_BACKEND, profiles=split_profiles(profile)
    )
    pending: dict[str, str] = {}
    try:
        params, origins = gather_params(param, params_file, settings.params, settings.param_origins)
    except SpecError as exc:
        loaded, problems = None, exc.problems
    else:
        loaded, problems = _every_problem(file, params, origins, settings, offline=offline)
    steps = len(loaded.workflow.steps) if loaded is not None else 0
    for name, step in loaded.workflow.steps.items() if loaded is not None else ():
        src = pending_source(step)
        if src is not None:
            when = "when a run is submitted" if src.step is None else f"when step {src.step!r} has succeeded"
            pending[name] = f"one step per {src.kind[:-1]} of {src.ref}, known {when}"
    errors = [p for p in problems if p.severity == "error"]
    if json_out:
        print_json(
            {
                "file": str(file),
                "valid": not errors,
                "steps": steps,
                "pending_fanouts": pending,
                "problems": [p.__dict__ for p in problems],
            }
        )
    else:
        print_problems(problems)
        if not errors:
            for name, what in pending.items():
                console.print(f"fan-out {name}: {what}", highlight=False)
            notes = f", {len(problems)} note(s)" if problems else ""
            console.print(f"[green]{file}: valid[/] ({steps} step(s){notes})")
    raise typer.Exit(BAD_INPUT if errors else 0)


def _every_problem(
    file: Path, params: Mapping[str, object], origins: Mapping[str, Origin], settings: Settings, *, offline: bool
) -> tuple[LoadedWorkflow | None, list[Problem]]:
    """validate's one pass: a file that loads gets the run-time checks; one that does not is
    loaded again part by part (``salvage_workflow``), its schema and reference problems
    reported and the run-time checks run on its sound steps; all in the file's order."""
    from hetflow.execute import apply_resources, check_run
    from hetflow.inventory import discover
    from hetflow.spec import salvage_workflow
    from hetflow.state import load_workflow_cached

    problems: list[Problem] = []
    try:
        loaded: LoadedWorkflow | None = load_workflow_cached(file, params, origins=origins)
    except SpecError as exc:
        try:
            loaded, problems = salvage_workflow(file, params, origins)
        except SpecError:  # the file cannot be read again (gone, not text): what the load said
            loaded, problems = None, exc.problems
    if loaded is not None:
        try:
            loaded = apply_resources(loaded, settings.resources, settings.resource_origins, strict=True)
            problems += [p for p in check_run(open_store(), loaded, discover(hetflow_home()), offline=offline)]
        except SpecError as exc:
            problems += exc.problems
    unique = list(dict.fromkeys(problems))
    return loaded, sorted(unique, key=lambda p: (p.file != str(file), p.file, p.line))  # in the file's order


# the backends whose engine lists its nodes (``BackendPlugin.nodes``), from the registry
LISTING = tuple(p.name for p in backend_plugins() if p.nodes is not None)
NODES_BACKEND_HELP = f"{', '.join(LISTING)}: the nodes the engine lists (--json: a cluster file for --cluster)."


@app.command()
def nodes(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    topo: bool = typer.Option(
        False, "--topo", help="Also the GPU interconnect matrix, like `nvidia-smi topo -m` (--json always has it)."
    ),
    backend: str | None = typer.Option(None, "--backend", help=NODES_BACKEND_HELP),
    config: Path | None = typer.Option(None, "--config", help="Settings file (default $HETFLOW_HOME/config.yaml)."),
) -> None:
    """Describe this machine's hardware, like `docker info` plus `nvidia-smi`; with --backend
    kubernetes, the cluster's nodes as its API server lists them (what hetflow plans on)."""
    from hetflow.inventory import discover
    from hetflow.report import node_to_json, render_node

    if backend is not None and backend != DEFAULT_BACKEND:
        _cluster_nodes(backend, config, json_out=json_out)
        return
    node = discover(hetflow_home())
    runtime = _container_runtime()
    if runtime is not None:
        from hetflow.execute import criu_support, gpu_checkpoint_support

        support = criu_support(engine=node.container_engine or "podman").describe()
        gpus = gpu_checkpoint_support(node).describe() if node.gpus else None
        node = node.model_copy(
            update={"container_runtime": runtime.describe(), "checkpoints": support, "gpu_checkpoints": gpus}
        )
    if json_out:
        print_json([node_to_json(node)])
    else:
        console.print(render_node(node, topo=topo))


def _container_runtime() -> RuntimeChoice | None:
    """The OCI runtime podman starts steps with (a probe the first time: ``ociruntime``);
    None for docker or without an engine (``hetflow run`` says what is missing)."""
    from hetflow.execute import make_engine

    try:
        return make_engine().runtime()
    except EngineError as exc:
        if "HETFLOW_OCI_RUNTIME" in str(exc):
            raise
        return None


def _cluster_nodes(backend: str, config: Path | None, *, json_out: bool) -> None:
    from rich.table import Table

    from hetflow.execute import cluster_nodes, load_settings

    if backend not in LISTING:
        raise UsageError(
            f"--backend {backend}: nodes lists a cluster's nodes for {' and '.join(LISTING)} only (others: the"
            " engine's own command, such as sinfo)"
        )
    settings = load_settings(config, hetflow_home(), os.environ, backend=backend)
    inventory = cluster_nodes(settings)
    assert inventory is not None  # a backend in LISTING lists its nodes
    found = inventory.nodes()
    if json_out:
        print_json(inventory.cluster())
        return
    _, members = inventory.types()
    type_of = {m: t for t, ms in members.items() for m in ms}
    table = Table("NODE", "TYPE", "CPUS", "MEMORY", "GPUS", "MODEL", "CC", "VIA", box=None)
    for n in found:
        via = "-" if not n.gpus else ("DRA" if n.dra else "device plugin")
        gpus = str(n.gpus) if n.gpus else "-"
        table.add_row(
            n.name, type_of[n.name], str(n.cores), f"{n.memory / 2**30:.0f}Gi", gpus, n.model or "-",
            n.compute_capability or "-", via,
        )  # fmt: skip
    console.print(table)
    console.print(f"{len(found)} Ready node(s) in {len(members)} node type(s)", highlight=False)

"""Planning commands: plan, simulate, cluster plan, profile show, import wfcommons."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import typer

from hetflow.cli.common import PARAMS_FILE_HELP, console, err, gather_params, open_store, print_json
from hetflow.cli.planning.slowdown import profile_slowdown
from hetflow.config import hetflow_home
from hetflow.errors import UsageError
from hetflow.plan import (
    PROFILE_KEEP,
    SIZING_KEEP,
    Cluster,
    Instance,
    Plan,
    Suggestion,
    UsageSample,
    learn,
    suggest_sizes,
)
from hetflow.report import explain_step, plan_json, plan_table, print_table
from hetflow.spec import LoadedWorkflow, Workflow, parse_duration
from hetflow.state import load_workflow_cached

cluster_app = typer.Typer(help="Virtual clusters: which nodes to rent.", no_args_is_help=True)
profile_app = typer.Typer(help="Run times learned from finished runs.", no_args_is_help=True)


def _load(workflow: Path, param: list[str], params_file: Path | None = None) -> LoadedWorkflow:
    """The workflow with its fan-outs over host data expanded (the files are listed)."""
    from hetflow.execute import expand_for_planning

    params, origins = gather_params(param, params_file)
    if workflow.suffix == ".cwl":
        return _load_cwl(workflow)
    return expand_for_planning(load_workflow_cached(workflow, params, origins=origins))


def _load_cwl(workflow: Path) -> LoadedWorkflow:
    """A CWL file as the hetflow workflow that stands for it (``hetflow.cwl.workflow_yaml``):
    one step per CommandLineTool step, its image, cores, memory and CUDA request."""
    from hetflow.cwl import workflow_yaml
    from hetflow.spec import parse_workflow

    if not workflow.is_file():
        raise UsageError(f"{workflow}: no such CWL file")
    return parse_workflow(workflow_yaml(workflow), str(workflow))


import_app = typer.Typer(help="Convert workflows from other formats.", no_args_is_help=True)
export_app = typer.Typer(help="Write a planned run for another system.", no_args_is_help=True)

CLUSTER_OPT = typer.Option(
    ..., "--cluster", help="Cluster file (YAML, kind: Cluster), or what `hetflow nodes --json` prints."
)
HERE_OPT = typer.Option(
    None,
    "--cluster",
    help="Cluster file (YAML, kind: Cluster), or what `hetflow nodes --json` prints; default: this machine.",
)
PARAM_OPT = typer.Option([], "-p", "--param", help="Override a param: -p NAME=VALUE.")
PARAMS_FILE_OPT = typer.Option(None, "--params-file", metavar="FILE", help=PARAMS_FILE_HELP)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
    app.command("simulate")(simulate_cmd)
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(profile_app, name="profile")
    profile_app.command("slowdown")(profile_slowdown)
    app.add_typer(import_app, name="import")
    app.add_typer(export_app, name="export")


def _seconds(value: str | None, what: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"--{what} {value!r}: {exc}") from None


def _money(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        out = float(value.lstrip("$"))
    except ValueError:
        raise UsageError(f"--budget {value!r}: give dollars, e.g. --budget 12.50") from None
    if out < 0:
        raise UsageError(f"--budget {value!r} must not be negative")
    return out


def _suggestions(workflow: str | None) -> list[Suggestion]:
    """Right-sizing notes from the recorded use of past runs (notes only: requests stay)."""
    rows = open_store().usage_history(workflow, newest=SIZING_KEEP)
    return suggest_sizes(UsageSample(**r.__dict__) for r in rows)


def _suggestion_json(s: Suggestion) -> dict[str, object]:
    return {**s.__dict__, "message": s.message}


def _machines(cluster_file: Path | None) -> Cluster:
    """The cluster file's machines; without one, this machine (as `hetflow nodes` sees it)."""
    from hetflow.plan import load_cluster

    if cluster_file is not None:
        return load_cluster(cluster_file)
    from hetflow.inventory import discover

    node = discover(hetflow_home())
    return Cluster.model_validate(
        {"apiVersion": "hetflow/v1", "kind": "Cluster", "name": node.name, "nodes": [node.model_dump()]}
    )


def _instance(loaded: LoadedWorkflow, machines: Cluster, *, saga: bool = False) -> Instance:
    from hetflow.execute import cluster_instance

    return cluster_instance(open_store(), loaded, machines, saga=saga)


def _solve(
    instance: Instance,
    *,
    objective: str,
    deadline: float | None,
    budget: float | None,
    exact: bool,
    time_limit: float,
    seed: int,
    gpu_policy: str = "avoid",
) -> Plan:
    if objective not in ("makespan", "cost"):
        raise UsageError(f"--objective {objective!r}: use makespan or cost")
    if gpu_policy not in ("avoid", "allow"):
        raise UsageError(f"--gpu-policy {gpu_policy!r}: use avoid or allow")
    if exact:
        from hetflow.plan import plan_exact

        return plan_exact(instance, time_limit=time_limit, objective=objective, deadline=deadline, budget=budget)
    from hetflow.plan import plan_heuristic

    return plan_heuristic(
        instance, objective=objective, deadline=deadline, budget=budget, seed=seed, gpu_policy=gpu_policy
    )


def plan_cmd(
    workflow: Path = typer.Argument(..., help="Workflow YAML, or a CWL workflow or tool (FILE.cwl)."),
    cluster: Path | None = HERE_OPT,
    param: list[str] = PARAM_OPT,
    params_file: Path | None = PARAMS_FILE_OPT,
    objective: str = typer.Option("makespan", "--objective", help="makespan or cost."),
    deadline: str | None = typer.Option(None, "--deadline", help="e.g. 2h, 90m (with --objective cost)."),
    budget: str | None = typer.Option(None, "--budget", help="dollars (with --objective makespan)."),
    exact: bool = typer.Option(False, "--exact", help="Prove the optimum with OR-tools CP-SAT (small DAGs)."),
    time_limit: float = typer.Option(10.0, "--time-limit", help="Seconds for --exact."),
    seed: int = typer.Option(0, "--seed", help="Seed of the heuristic's perturbations."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable plan."),
    gantt: Path | None = typer.Option(None, "--gantt", help="Draw the schedule: FILE.svg, .html or .png."),
    explain: bool = typer.Option(False, "--explain", help="Why each other variant and node class lost."),
    gpu_policy: str = typer.Option(
        "avoid", "--gpu-policy", help="avoid: steps using no GPU stay off GPU nodes unless that is faster; allow."
    ),
    variant: list[str] = typer.Option([], "--variant", help="Force a variant: --variant STEP=NAME (repeatable)."),
    prefer: str | None = typer.Option(None, "--prefer", help="gpu or cpu: the kind to choose where both run."),
) -> None:
    """Choose variant, node and GPUs for every step of a workflow on a cluster (default: this machine)."""
    from hetflow.plan import first_class_rejection, parse_steer, steer_workflow

    steer = parse_steer(variant, prefer)
    loaded = _load(workflow, param, params_file)
    machines = _machines(cluster)
    classes = machines.classes()
    steered, steered_why = steer_workflow(
        loaded.workflow, steer, lambda s, v: any(first_class_rejection(v, c).ok for c in classes)
    )
    loaded = dataclasses.replace(loaded, workflow=steered)
    instance = _instance(loaded, machines)
    t0 = time.perf_counter()
    plan = _solve(
        instance,
        objective=objective,
        deadline=_seconds(deadline, "deadline"),
        budget=_money(budget),
        exact=exact,
        time_limit=time_limit,
        seed=seed,
        gpu_policy=gpu_policy,
    )
    took = time.perf_counter() - t0
    if gantt is not None:
        from hetflow.report import write_gantt

        write_gantt(plan, instance, gantt)
    suggestions = _suggestions(loaded.workflow.name)
    if json_out:
        data = plan_json(plan, instance, explain=explain)
        data["planning_seconds"] = round(took, 4)
        data["rightsizing"] = [_suggestion_json(s) for s in suggestions]
        data["steered"] = steered_why
        print_json(data)
        return
    print_table(console, plan_table(plan))
    opt = " (proven optimal)" if plan.optimal else ""
    console.print(
        f"makespan {plan.makespan:.1f}s{opt}, cost ${plan.cost:.4f}, {plan.algorithm}, planned in {took:.2f}s"
    )
    for note in plan.notes:
        err.print(f"note: {note}", highlight=False)
    for s in suggestions:
        err.print(f"note: {s.message}", highlight=False)
    if gantt is not None:
        console.print(f"schedule drawn to {gantt}")
    if explain:
        _explain(plan, instance, steered_why, loaded.workflow, local=cluster is None)


def _explain(plan: Plan, instance: Instance, steered_why: dict[str, str], workflow: Workflow, *, local: bool) -> None:
    """``--explain``: the batched fan-outs, then why each step went where it did."""
    from hetflow.execute import batch_notes, make_engine

    # unasked, items are batched where podman says the image has no ENTRYPOINT: this machine's
    for note in batch_notes(workflow, make_engine().image_entrypoint if local else None):
        console.print(f"[bold]batch[/]: {note}", highlight=False)
    for step in sorted(plan.placements, key=lambda s: plan.placements[s].start):
        p = plan.placements[step]
        console.print(f"[bold]{step}[/]: {p.variant} on {p.machine_class} ({p.machine})", highlight=False)
        if step in steered_why:
            console.print(f"  variant  {p.variant}: {steered_why[step]}", highlight=False)
        for row in explain_step(plan, instance, step):
            console.print(
                f"  {row['verdict']:8} {row['variant']} on {row['node_class']}: {row['reason']}", highlight=False
            )


def simulate_cmd(
    workflow: Path = typer.Argument(..., help="Workflow YAML, or a CWL workflow or tool (FILE.cwl)."),
    cluster: Path | None = HERE_OPT,
    param: list[str] = PARAM_OPT,
    params_file: Path | None = PARAMS_FILE_OPT,
    noise: float = typer.Option(0.2, "--noise", help="Run-time spread around the estimates (0.2 = ±20%)."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json"),
    gantt: Path | None = typer.Option(None, "--gantt", help="Draw the simulated schedule."),
) -> None:
    """Execute a plan in a discrete-event simulation: what-if for a cluster no one has yet."""
    from hetflow.plan import simulate

    if not 0 <= noise < 1:
        raise UsageError(f"--noise {noise}: give a spread in [0, 1), e.g. 0.2 for ±20%")
    loaded = _load(workflow, param, params_file)
    instance = _instance(loaded, _machines(cluster))
    plan = _solve(instance, objective="makespan", deadline=None, budget=None, exact=False, time_limit=0, seed=seed)
    result = simulate(instance, plan, noise=noise, seed=seed)
    if gantt is not None:
        from hetflow.report import write_gantt

        write_gantt(result.plan, instance, gantt)
    if json_out:
        print_json(result.to_json())
        return
    console.print(result.render())


def _catalog_cmd(
    workflow: Path = typer.Argument(..., help="Workflow YAML."),
    catalog: Path = typer.Option(..., "--catalog", help="Catalog of node types (YAML, kind: Catalog)."),
    param: list[str] = PARAM_OPT,
    deadline: str | None = typer.Option(None, "--deadline", help="Finish within, e.g. 2h."),
    budget: str | None = typer.Option(None, "--budget", help="Spend at most, in dollars."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Choose how many nodes of each type to rent: the Pareto frontier of makespan and cost."""
    from hetflow.plan import load_catalog, plan_virtual_cluster

    if deadline is not None and budget is not None:
        raise UsageError("give --deadline or --budget, not both")
    loaded = _load(workflow, param)
    cat = load_catalog(catalog)
    result = plan_virtual_cluster(
        loaded.workflow,
        cat.classes(),
        bandwidth=cat.bandwidth_bytes,
        deadline=_seconds(deadline, "deadline"),
        budget=_money(budget),
    )
    if json_out:
        print_json(result.to_json())
        return
    console.print(result.render())


cluster_app.command("plan")(_catalog_cmd)


@profile_app.command("show")
def profile_show(
    workflow: str | None = typer.Option(None, "--workflow", help="Only this workflow (by name)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run times learned per (step, variant, node class); they win over written estimates.
    Also says which steps ask far more memory or CPUs than they used (right-sizing)."""
    entries = learn(open_store().history(workflow, newest=PROFILE_KEEP))
    if json_out:
        print_json([e.__dict__ for e in entries])
        return
    for s in _suggestions(workflow):
        err.print(f"note: {s.message}", highlight=False)
    if not entries:
        console.print("nothing learned yet: profiles come from succeeded steps of 'hetflow run'")
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for col in ("WORKFLOW", "STEP", "VARIANT", "NODE CLASS", "SECONDS", "SAMPLES"):
        t.add_column(col)
    for e in entries:
        t.add_row(e.workflow, e.step, e.variant, e.node_class, f"{e.seconds:.2f}", str(e.samples))
    console.print(t)


@import_app.command("wfcommons")
def import_wfcommons(
    trace: Path = typer.Argument(..., help="WfFormat (WfCommons/WfInstances) JSON trace."),
    out: Path | None = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    gpu_variants: bool = typer.Option(
        True, "--gpu-variants/--no-gpu-variants", help="Add GPU variants by the benchmark rule."
    ),
) -> None:
    """Convert a workflow trace to a hetflow workflow, for planning your own traces."""
    import json

    from hetflow.spec import convert_wfcommons

    try:
        data = json.loads(trace.read_text())
    except FileNotFoundError:
        raise UsageError(f"{trace}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{trace}: not a JSON trace: {exc}") from None
    text = convert_wfcommons(data, gpu_variants=gpu_variants, file=str(trace))
    if out is None:
        print(text, end="")
    else:
        out.write_text(text)
        err.print(f"wrote {out}", highlight=False)


@export_app.command("kubernetes")
def export_kubernetes_cmd(
    workflow: Path = typer.Argument(..., help="Workflow YAML."),
    cluster: Path = CLUSTER_OPT,
    param: list[str] = PARAM_OPT,
    namespace: str | None = typer.Option(None, "--namespace", "-n"),
    claim: str = typer.Option("hetflow-work", "--claim", help="PersistentVolumeClaim of the work directory."),
    claim_size: str = typer.Option("10Gi", "--claim-size", help="'none': the claim exists already."),
    storage_class: str | None = typer.Option(None, "--storage-class"),
    run_id: str | None = typer.Option(None, "--run-id"),
    uid: int | None = typer.Option(None, "--uid", help="Run as this UID (default: yours)."),
    gid: int | None = typer.Option(None, "--gid", help="Run as this GID (default: yours)."),
    tools_image: str | None = typer.Option(None, "--tools-image", help="Image with sh and kubectl for the driver."),
    pin: bool = typer.Option(True, "--pin/--no-pin", help="Pin images by the digest resolved per node class."),
    objective: str = typer.Option("makespan", "--objective"),
    seed: int = typer.Option(0, "--seed"),
    gpu_policy: str = typer.Option("avoid", "--gpu-policy"),
    rdma_resource: str | None = typer.Option(
        None,
        "--rdma-resource",
        help="Extended resource a gang with network: rdma asks for (rdma/hca_shared_devices_a).",
    ),
) -> None:
    """Plan WORKFLOW on a cluster and print it as Kubernetes objects (kubectl create -f)."""
    import os
    import sys

    from hetflow.execute import default_resolver, new_run_id
    from hetflow.export import kubernetes as k8s
    from hetflow.plan import load_cluster

    loaded = _load(workflow, param)
    machines = load_cluster(cluster)
    conditional = sorted(n for n, step in loaded.workflow.steps.items() if step.when is not None)
    if conditional:
        raise UsageError(
            f"{workflow}: the Kubernetes export does not carry 'when:' conditions yet (step(s)"
            f" {', '.join(conditional)}); run with --backend slurm|ray, or drop the condition for the export"
        )
    if loaded.workflow.data or any(step.publish for step in loaded.workflow.steps.values()):
        raise UsageError(
            f"{workflow}: the Kubernetes export does not carry workflow data or publish targets yet; "
            "put the data on the work directory's volume and read it from a step, or run with --backend slurm|ray"
        )
    plan = _solve(
        _instance(loaded, machines),
        objective=objective,
        deadline=None,
        budget=None,
        exact=False,
        time_limit=10.0,
        seed=seed,
        gpu_policy=gpu_policy,
    )
    try:
        objects = k8s.export_kubernetes(
            loaded.workflow,
            machines,
            plan,
            run_id=run_id or new_run_id(),
            namespace=namespace,
            uid=os.getuid() if uid is None else uid,
            gid=os.getgid() if gid is None else gid,
            workdir_claim=claim,
            claim_size=None if claim_size == "none" else claim_size,
            storage_class=storage_class,
            tools_image=tools_image or k8s.DEFAULT_TOOLS_IMAGE,
            image_for=k8s.pinned_image_for(machines.classes(), default_resolver) if pin else None,
            rdma_resource=rdma_resource or k8s.DEFAULT_RDMA_RESOURCE,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.write(k8s.to_yaml(objects))

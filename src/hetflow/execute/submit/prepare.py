"""Deciding what a run will follow, once, when it is submitted: pin its images (local runs)
and plan it (``plan_local`` on this machine, the heuristic on a cluster file).

The answer is a ``RunPlan``; ``session`` stores it with the run and every executor of the
run reads it back.  Nothing here is called again for a run that has a stored plan.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Protocol

from hetflow.errors import EngineError, UsageError
from hetflow.execute.backends import registry
from hetflow.execute.settings import Settings
from hetflow.execute.submit.pin import Resolver, default_resolver, pin_images
from hetflow.execute.submit.runplan import CLUSTER, GREEDY, LOCAL, PLANNED, RunPlan, images_of
from hetflow.images import parse_reference
from hetflow.inventory import Node
from hetflow.plan import (
    PROFILE_KEEP,
    Cluster,
    Instance,
    MachineClass,
    SharedSample,
    Steer,
    build_instance,
    can_run_here,
    first_class_rejection,
    image_check,
    learn,
    learn_slowdown,
    load_cluster,
    plan_heuristic,
    plan_local,
    profile_for,
    steer_workflow,
    with_slowdown,
)
from hetflow.spec import LoadedWorkflow
from hetflow.state import Store

Say = Callable[[str], None]


class Puller(Protocol):
    """What pinning needs of a container engine (``engine.CliEngine`` has it)."""

    def image_exists(self, image: str) -> bool: ...

    def pull(self, ref: str, *, insecure: bool = False) -> None: ...


def _quiet(text: str) -> None:
    pass


def pin(
    loaded: LoadedWorkflow, node: Node, engine: Puller, say: Say = _quiet, resolver: Resolver = default_resolver
) -> tuple[LoadedWorkflow, list[str]]:
    """Resolve each image index to the build for this node and pull it by digest.  Returns
    the pinned workflow and the references pulled for it."""
    result = pin_images(loaded.workflow, node, resolver)
    for note in result.notes:
        say(f"note: {note}")
    ensure_pulled(result.pulls, engine)
    for image, pinned in sorted(result.pinned.items()):
        say(f"image {image} -> {pinned}")
    return dataclasses.replace(loaded, workflow=result.workflow), list(result.pulls)


def ensure_pulled(refs: list[str] | tuple[str, ...], engine: Puller) -> None:
    """Pull the references the engine does not hold (by digest: the pinned builds)."""
    for ref in refs:
        if not engine.image_exists(ref):
            engine.pull(ref, insecure=parse_reference(ref).is_loopback)


def _profile(store: Store, name: str) -> Mapping[tuple[str, str, str], float]:
    """Measured run times of this workflow's past steps: history wins over estimates."""
    return profile_for(learn(store.history(name, newest=PROFILE_KEEP)), name)


def measured_slowdowns(store: Store) -> dict[str, float]:
    """The time-slicing slowdown fitted per GPU model from the samples ``hetflow profile
    slowdown FILE`` recorded (``plan.learn_slowdown``); models without samples are absent."""
    by_model: dict[str, list[SharedSample]] = {}
    for s in store.slowdowns():
        if s.mode == "time-slicing":
            by_model.setdefault(s.gpu_model, []).append(SharedSample(s.solo, s.shared, s.load))
    fitted = {m: learn_slowdown(samples) for m, samples in by_model.items()}
    return {m: s for m, s in fitted.items() if s is not None}


def with_measured_slowdowns(store: Store, classes: tuple[MachineClass, ...]) -> tuple[MachineClass, ...]:
    """``classes`` with the slowdown measured on their GPU model, where the cluster file sets none."""
    measured = measured_slowdowns(store)
    return tuple(with_slowdown([c], measured[c.gpu_model])[0] if c.gpu_model in measured else c for c in classes)


def plan_on_node(
    store: Store,
    loaded: LoadedWorkflow,
    node: Node,
    pulls: list[str],
    env: Mapping[str, str] | None = None,
    steer: Steer | None = None,
) -> RunPlan:
    """Follow the planner on this machine (HETFLOW_PLANNER=greedy: the plain rule of
    "GPU variant when a qualifying GPU is free, else CPU"); ``loaded`` is already pinned.
    ``steer``: ``--variant``/``--prefer``, which the plan (or, greedy, the chooser) follows."""
    images = images_of(loaded.workflow)
    steered, why = steer_workflow(loaded.workflow, steer or Steer(), lambda s, v: can_run_here(s, v, node))
    if (os.environ if env is None else env).get("HETFLOW_PLANNER", PLANNED) == GREEDY:
        # the chooser follows a steered step's variant; the others, the greedy rule
        chosen = {s: next(iter(steered.steps[s].resolved_variants())) for s in why}
        return RunPlan(kind=LOCAL, planner=GREEDY, images=images, pulls=tuple(pulls), variants=chosen, reasons=why)
    name = loaded.workflow.name
    local = plan_local(steered, node, _profile(store, name))
    reasons = {s: f"{why[s]}; {r}" if s in why else r for s, r in local.reasons.items()}
    return RunPlan(
        kind=LOCAL,
        planner=PLANNED,
        plan=local.plan,
        images=images,
        pulls=tuple(pulls),
        variants=local.variants,
        priority=local.priority,
        reasons={**why, **reasons},
    )


def cluster_instance(
    store: Store, loaded: LoadedWorkflow, cluster: Cluster, resolver: Resolver = default_resolver, *, saga: bool = False
) -> Instance:
    """The planning problem of a workflow on a cluster file's machines, as ``hetflow plan``,
    ``hetflow run --cluster`` and the dashboard pose it: run times learned from this store's
    history win over estimates, and image builds are checked per node class.  ``saga``: one
    task per machine at a time (the SAGA comparison's model)."""
    return build_instance(
        loaded.workflow,
        with_measured_slowdowns(store, cluster.classes()),
        bandwidth=cluster.bandwidth_bytes,
        profile=_profile(store, loaded.workflow.name),
        one_task_per_machine=saga,
        image_check=image_check(resolver),
    )


def cluster_of(settings: Settings) -> Cluster:
    """The settings' cluster file; without one, the nodes the backend lists itself (its
    plugin's ``nodes``: Kubernetes' API server)."""
    if settings.cluster is not None:
        return load_cluster(settings.cluster)
    listed = registry.cluster_nodes(settings)
    if listed is not None:
        data = listed.cluster()
        if not data["nodeTypes"]:
            raise EngineError(f"{listed.title} has no Ready, schedulable node to plan on")
        return Cluster.model_validate(data)
    raise UsageError(f"the {settings.backend} backend plans on a cluster file: give --cluster FILE")


def plan_on_cluster(
    store: Store, loaded: LoadedWorkflow, settings: Settings, resolver: Resolver = default_resolver
) -> RunPlan:
    """Plan the workflow on the settings' cluster file, or on what the Kubernetes API server
    lists (history wins over estimates)."""
    cluster = cluster_of(settings)
    classes = cluster.classes()
    steered, why = steer_workflow(
        loaded.workflow, settings.steer, lambda s, v: any(first_class_rejection(v, c).ok for c in classes)
    )
    loaded = dataclasses.replace(loaded, workflow=steered)
    plan = plan_heuristic(cluster_instance(store, loaded, cluster, resolver))
    return RunPlan(
        kind=CLUSTER,
        planner=PLANNED,
        plan=plan,
        variants={s: p.variant for s, p in plan.placements.items()},
        priority={s: p.start for s, p in plan.placements.items()},
        classes=tuple(cluster.classes()),
        reasons=why,
    )

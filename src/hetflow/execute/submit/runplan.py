"""What a run follows, decided once when it is submitted and stored with it.

``hetflow run`` pins the images (local runs), plans, and records the result with the run;
the executor, a detached executor and ``hetflow resume`` read it back and never pin or plan
again, so a run resumed after a crash follows the plan it started with even when the
history, the profile or the cluster file changed meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hetflow.errors import StateError
from hetflow.execute.backends.plugin import LEASES, PLAN
from hetflow.execute.data.inputs import DataManifest
from hetflow.plan import (
    MachineClass,
    Plan,
    machine_class_from_dict,
    machine_class_to_dict,
    plan_from_dict,
    plan_to_dict,
)
from hetflow.spec import Step, Workflow, fanout_parent
from hetflow.state import Store

FORMAT = 1
# how the run's steps find their place (``backends.plugin``: its backend's dispatch)
LOCAL, CLUSTER = LEASES, PLAN
PLANNED, GREEDY = "plan", "greedy"  # HETFLOW_PLANNER: follow the planner, or the plain greedy rule


@dataclass(frozen=True)
class RunPlan:
    """A run's stored plan.

    ``images``: step -> variant -> the image it runs (pinned by digest where an index was
    resolved; variants with no build for the node are absent).  Empty: images as written.
    ``pulls``: registry references pulled for the run.  ``variants``/``priority``/``reasons``:
    the plan's variant, dispatch rank and explanation per step (empty with the greedy rule).
    ``classes``: the cluster's machine classes (cluster runs).  ``data``: the workflow
    data as resolved at submit (files, hashes, where steps mount them from)."""

    kind: str = LOCAL
    planner: str = PLANNED
    plan: Plan | None = None
    images: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pulls: tuple[str, ...] = ()
    variants: Mapping[str, str] = field(default_factory=dict)
    priority: Mapping[str, float] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    classes: tuple[MachineClass, ...] = ()
    data: DataManifest = field(default_factory=DataManifest)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "format": FORMAT,
            "kind": self.kind,
            "planner": self.planner,
            "plan": plan_to_dict(self.plan) if self.plan is not None else None,
            "images": {s: dict(v) for s, v in self.images.items()},
            "pulls": list(self.pulls),
            "variants": dict(self.variants),
            "priority": dict(self.priority),
            "reasons": dict(self.reasons),
            "classes": [machine_class_to_dict(c) for c in self.classes],
            "data": self.data.to_dict(),
        }
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunPlan:
        data = json.loads(text)
        plan = data.get("plan")
        return cls(
            kind=data.get("kind", LOCAL),
            planner=data.get("planner", PLANNED),
            plan=plan_from_dict(plan) if plan is not None else None,
            images={s: dict(v) for s, v in (data.get("images") or {}).items()},
            pulls=tuple(data.get("pulls") or ()),
            variants=dict(data.get("variants") or {}),
            priority={s: float(p) for s, p in (data.get("priority") or {}).items()},
            reasons=dict(data.get("reasons") or {}),
            classes=tuple(machine_class_from_dict(c) for c in data.get("classes") or ()),
            data=DataManifest.from_dict(data.get("data")),
        )


def images_of(workflow: Workflow) -> dict[str, dict[str, str]]:
    """step -> variant -> image, as ``apply_images`` puts them back."""
    return {s: {v: var.image for v, var in step.resolved_variants().items()} for s, step in workflow.steps.items()}


def apply_images(workflow: Workflow, images: Mapping[str, Mapping[str, str]]) -> Workflow:
    """The workflow as it was pinned: each variant's stored image, the variants the pinning
    dropped left out.  Steps absent from ``images`` stay as written."""
    if not images:
        return workflow
    steps = {}
    for s, step in workflow.steps.items():
        # an item of a fan-out expanded at run time runs what its step was pinned to
        key = s if s in images else fanout_parent(s)
        steps[s] = _with_images(step, images[key]) if key is not None and key in images else step
    return workflow.model_copy(update={"steps": steps})


def _with_images(step: Step, images: Mapping[str, str]) -> Step:
    if step.variants is None:
        return step.model_copy(update={"image": images.get("default", step.image)})
    variants = {n: v.model_copy(update={"image": images[n]}) for n, v in step.variants.items() if n in images}
    return step.model_copy(update={"variants": variants})


def stored_plan(store: Store, run_id: str) -> Plan | None:
    """The plan stored with a run (None: it has none, e.g. a greedy local run), for the
    report and the dashboard to draw against what ran."""
    text = store.plan_json(run_id)
    if text is None:
        return None
    try:
        return RunPlan.from_json(text).plan
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"run {run_id}: its stored plan cannot be read ({exc}); the store may be damaged") from None


def keep_data(store: Store, run_id: str, data: DataManifest) -> None:
    """The run's data as the executor last found it (``data.watch``) replaces the manifest
    stored with its plan: what ``hetflow resume`` compares the files with."""
    text = store.plan_json(run_id)
    if text is not None:
        store.set_plan_json(run_id, replace(RunPlan.from_json(text), data=data).to_json())

"""Plans as JSON-ready data, so a run can keep the plan it follows (the state store holds
the text) and a resumed run follows the same plan instead of planning again.

Only plain values cross: ``Plan``, its ``Placement``s and the ``MachineClass``es it was
made for.  Reading back ignores keys a newer field set no longer has, and fields added
since (with defaults) take their defaults, so a stored plan outlives small changes to
these dataclasses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from hetflow.inventory import GpuSharing
from hetflow.plan.instance import GpuKind, MachineClass, Placement, Plan

T = TypeVar("T")


def _tuples(value: Any) -> Any:
    """JSON has lists; these dataclasses hold tuples (GPU indices, labels, notes)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, tuple):  # already built values (GPU kinds) pass through
        return value
    return value


def _build(cls: type[T], data: Mapping[str, Any]) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: _tuples(v) for k, v in data.items() if k in names})


def machine_class_to_dict(c: MachineClass) -> dict[str, Any]:
    data = dataclasses.asdict(c)
    data["gpu_sharing"] = c.gpu_sharing.model_dump(mode="json")
    return data


def machine_class_from_dict(data: Mapping[str, Any]) -> MachineClass:
    fields = dict(data)
    sharing = fields.pop("gpu_sharing", None)
    kinds = fields.pop("gpu_kinds", None) or ()
    built = _build(MachineClass, fields)
    return dataclasses.replace(
        built,
        gpu_sharing=GpuSharing.model_validate(sharing) if isinstance(sharing, Mapping) else GpuSharing(),
        gpu_kinds=tuple(_build(GpuKind, k) for k in kinds if isinstance(k, Mapping)),
    )


def placement_to_dict(p: Placement) -> dict[str, Any]:
    return dataclasses.asdict(p)


def placement_from_dict(data: Mapping[str, Any]) -> Placement:
    return _build(Placement, data)


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    data = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    data["placements"] = {s: placement_to_dict(p) for s, p in plan.placements.items()}
    data["notes"] = list(plan.notes)
    return data


def plan_from_dict(data: Mapping[str, Any]) -> Plan:
    fields = dict(data)
    fields["placements"] = {s: placement_from_dict(p) for s, p in (data.get("placements") or {}).items()}
    return _build(Plan, fields)

"""Gangs all or nothing, without Kueue: a gang's Indexed Job is created suspended (no pod,
nothing held) and admitted, un-suspended, only when the nodes it may use have room for every
replica at once, as Kueue admits a Workload.  Without this two gangs that each got part of
their replicas scheduled would hold GPUs waiting for each other, forever.

Room is what kube-scheduler's NodeResourcesFit counts: a node's allocatable minus the requests
of the pods bound to it that have not ended; pods admitted but not yet bound (the scheduler
is still placing them) are counted too, placed first-fit, so two gangs admitted in one poll
never count the same room twice.  Each replica is then placed first-fit on its own copy of
that room.  Resources counted: cpu, memory, the extended resources (nvidia.com/gpu, ...) and
DRA devices (``devices``): a node's devices of a driver in its ResourceSlices less those
allocated to claims reserved for a pod, taken per replica as the pod's annotation says (a
bound pod's are in its claim's allocation already; one not bound yet is placed first-fit).
Without them a gang of DRA GPUs was admitted on CPU and memory alone: two gangs of 2 on a node
of 2 DRA GPUs made 4 pods at once, each gang holding part of the GPUs.  Whether a pod fits a
node's room is the planner's capacity predicate (``plan.fits``): cpu as cores, every other
resource a named scalar (memory too: a quantity may be a fraction of a byte, ``1.1Gi``),
each within 1e-9; a request of 0 is never short, as NodeResourcesFit skips it.  Pure
functions: the API's JSON in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hetflow.execute.backends.kubernetes.devices import dra_request
from hetflow.execute.backends.kubernetes.inventory import quantity
from hetflow.plan import Demand, NodeState
from hetflow.plan import fits as fits_node

Room = dict[str, dict[str, float]]  # node -> resource -> free amount


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """What a pod asks the scheduler for: the sum of its containers' requests."""
    out: dict[str, float] = {}
    for c in pod_spec.get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            out[k] = out.get(k, 0.0) + quantity(v)
    return out


def template_requests(template: Mapping[str, Any]) -> dict[str, float]:
    """What each pod of a Job's template asks: its containers' requests and its DRA devices."""
    return pod_requests(template.get("spec") or {}) | dra_request(template.get("metadata") or {})


def free_room(
    nodes: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    devices: Mapping[str, Mapping[str, float]] | None = None,
) -> Room:
    """Each Ready, schedulable node's allocatable (and free DRA devices: ``devices.dra_free``)
    minus its live pods' requests; pods not yet bound, with their DRA devices, are placed
    first-fit on what is left."""
    room: Room = {}
    for n in nodes:
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in n.get("status", {}).get("conditions") or ()
        )
        if ready and not n.get("spec", {}).get("unschedulable"):
            alloc = n.get("status", {}).get("allocatable") or {}
            name = n["metadata"]["name"]
            room[name] = {k: quantity(v) for k, v in alloc.items()} | dict((devices or {}).get(name, {}))
    unbound = []
    for p in pods:
        if p.get("status", {}).get("phase") in ("Succeeded", "Failed") or p.get("metadata", {}).get(
            "deletionTimestamp"
        ):
            continue
        need = pod_requests(p.get("spec", {}))
        node = p.get("spec", {}).get("nodeName")
        if node in room:
            _take(room[node], need)  # its DRA devices: its claim's allocation, out of ``devices`` already
        elif not node:
            unbound.append(need | dra_request(p.get("metadata", {})))
    for need in unbound:
        place(room, need, ())
    return room


def place(room: Room, need: Mapping[str, float], allowed: Sequence[str]) -> str | None:
    """Put ``need`` on the first node (of ``allowed``; empty: any) with room; the node, or None."""
    for name in sorted(room):
        if allowed and name not in allowed:
            continue
        free = room[name]
        if not fits_node(_node(free), _demand(need)):
            _take(free, need)
            return name
    return None


def fits(room: Room, need: Mapping[str, float], replicas: int, allowed: Sequence[str]) -> bool:
    """Whether ``replicas`` pods of ``need`` fit at once (placed on ``room``, which it takes)."""
    trial = {n: dict(r) for n, r in room.items()}
    if all(place(trial, need, allowed) is not None for _ in range(replicas)):
        room.clear()
        room.update(trial)
        return True
    return False


def _node(free: Mapping[str, float]) -> NodeState:
    """A node's room as the capacity predicate reads it: what is free is what it offers."""
    return NodeState(free.get("cpu", 0.0), scalars=free)


def _demand(need: Mapping[str, float]) -> Demand:
    """A pod's requests as the capacity predicate reads them."""
    return Demand(need.get("cpu", 0.0), scalars=tuple((k, v) for k, v in need.items() if k != "cpu"))


def _take(free: dict[str, float], need: Mapping[str, float]) -> None:
    for k, v in need.items():
        free[k] = free.get(k, 0.0) - v


def starting(jobs: list[dict[str, Any]], pods: dict[str, list[Any]]) -> list[tuple[dict[str, Any], int]]:
    """Jobs running (not suspended, not ended, not going) with fewer pods than completions, and how
    many pods each still lacks."""
    out = []
    for j in jobs:
        spec, status = j.get("spec", {}), j.get("status", {})
        conditions = status.get("conditions") or ()
        ended = any(c.get("status") == "True" and c.get("type") in ("Complete", "Failed") for c in conditions)
        if spec.get("suspend") or ended or j["metadata"].get("deletionTimestamp"):
            continue
        missing = int(spec.get("completions", 1)) - len(pods.get(j["metadata"]["name"], []))
        if missing > 0:
            out.append((j, missing))
    return out

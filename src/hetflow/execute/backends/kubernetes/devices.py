"""DRA devices and device-plugin GPUs as the API server tells them (pure functions: the API's
JSON in), for what a pod got (``hetflow show``'s GPUS) and what a node has free (a gang's
admission: ``admission``).

- A pod's DRA devices: its generated ResourceClaim (``status.resourceClaimStatuses``, the claim
  hetflow names ``gpus``) holds the scheduler's allocation (``status.allocation.devices.results``:
  driver, pool, device); each device is found in its pool's ResourceSlice, whose ``index``
  attribute (NVIDIA's DRA driver publishes one) is its GPU index on the node, else its name.
- A pod's device-plugin GPUs: which devices the plugin gave is the kubelet's to say, in
  ``allocatedResourcesStatus`` (KEP-4680, the ResourceHealthStatus feature): IDs that are
  numbers (the NVIDIA plugin's ``device-id-strategy=index``) are indices, other IDs (GPU UUIDs)
  are shown as they are.  Without it the API tells only how many: ``1x nvidia.com/gpu``.
- A node's free DRA devices: the devices of its ResourceSlices of a driver, less those
  allocated to a claim reserved for a pod (``status.reservedFor``: cleared when the pod ends).
  A pod hetflow makes says how many devices of which driver each replica's claim asks
  (``ANNOTATION_DRA``), so a gang not yet let go can be counted before any claim exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hetflow.kube import GPU_RESOURCES

Obj = Mapping[str, Any]
Device = tuple[str, str, str]  # (driver, pool, device): one allocated device, as a claim names it

CLAIM = "gpus"  # the pod's name for its GPU claim (``translate``)
ANNOTATION_DRA = "hetflow.io/dra-devices"  # on a pod template: "DRIVER=COUNT", per replica
DRA_PREFIX = "dra/"  # admission's room key for a driver's devices: dra/gpu.nvidia.com


def dra_request(meta: Obj) -> dict[str, float]:
    """What a pod (its metadata) asks of DRA devices, keyed as admission's room: {dra/DRIVER: n}."""
    driver, _, count = str((meta.get("annotations") or {}).get(ANNOTATION_DRA, "")).partition("=")
    return {DRA_PREFIX + driver: float(count)} if driver and count.isdigit() and int(count) else {}


def slice_devices(slices: Iterable[Obj]) -> dict[Device, tuple[str, int | str]]:
    """Each published device -> (its node, its index or name)."""
    out: dict[Device, tuple[str, int | str]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        node, driver, pool = spec.get("nodeName"), spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        if not node:
            continue  # a pool of devices not on one node (network-attached): no node's room
        for d in spec.get("devices") or ():
            index = ((d.get("attributes") or {}).get("index") or {}).get("int")
            out[(driver, pool, d.get("name", ""))] = (node, int(index) if isinstance(index, int) else d.get("name", ""))
    return out


def allocated(claim: Obj) -> list[Device]:
    """The devices the scheduler allocated to a ResourceClaim (none while it is not allocated)."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or ()
    return [(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results]


def in_use(claims: Iterable[Obj]) -> set[Device]:
    """Devices allocated to claims reserved for a pod (a pod that ended releases its claim's)."""
    return {d for c in claims if (c.get("status") or {}).get("reservedFor") for d in allocated(c)}


def dra_free(slices: Iterable[Obj], claims: Iterable[Obj]) -> dict[str, dict[str, float]]:
    """node -> {dra/DRIVER: devices free}."""
    taken = in_use(claims)
    out: dict[str, dict[str, float]] = {}
    for (driver, _pool, _name), (node, _) in ((d, v) for d, v in slice_devices(slices).items() if d not in taken):
        free = out.setdefault(node, {})
        free[DRA_PREFIX + driver] = free.get(DRA_PREFIX + driver, 0.0) + 1
    return out


def claim_name(pod: Obj) -> str | None:
    """The ResourceClaim made for the pod's GPU claim, once the controller made it."""
    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if s.get("name") == CLAIM and s.get("resourceClaimName"):
            return str(s["resourceClaimName"])
    return None


def pod_gpus(
    pod: Obj, claims: Mapping[str, Obj], devices: Mapping[Device, tuple[str, int | str]]
) -> tuple[int | str, ...] | None:
    """The GPUs the pod got (see above); None while that is not known yet (not bound, its
    claim not allocated, or a device not found in the slices read)."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName"):
        return None
    out: list[int | str] = []
    if spec.get("resourceClaims"):
        name = claim_name(pod)
        got = allocated(claims.get(name, {})) if name else []
        if not got or any(d not in devices for d in got):
            return None
        out += [devices[d][1] for d in got]
    return (*out, *_plugin_gpus(spec, (pod.get("status") or {}).get("containerStatuses") or ()))


def _plugin_gpus(spec: Obj, statuses: Sequence[Obj]) -> list[int | str]:
    ids = [
        r.get("resourceID", "")
        for c in statuses
        for a in c.get("allocatedResourcesStatus") or ()
        if str(a.get("name", "")).startswith(GPU_RESOURCES)
        for r in a.get("resources") or ()
    ]
    if ids:
        return [int(i) if i.isdigit() else i for i in ids]
    asked = [
        (k, v)
        for c in spec.get("containers") or ()
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items()
        if str(k).startswith(GPU_RESOURCES)
    ]
    return [f"{v}x {k}" for k, v in asked]

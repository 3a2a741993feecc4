"""Gang job -> Ray placement group, and the replicas once Ray has placed it.  Pure functions
(no Ray import), for tests; the keeper makes the group and starts the replicas.

A gang of R replicas is ONE placement group of R bundles, each bundle one replica's share
(its CPUs, GPUs, memory and the markers a single step asks for: accelerator type, node
type).  Ray reserves every bundle at once or none (``PlacementGroup.ready``), which is the
gang's all-or-nothing: no replica holds anything while waiting for the others.

Strategy (Ray docs, "Placement Groups: strategies"):
- ``per_node: 1``: STRICT_SPREAD, every bundle on a different node: exact.
- no ``per_node``: PACK, as few nodes as Ray finds room on: exact ("no limit").
- ``per_node: k > 1``: Ray has no "at most k bundles per node"; PACK is used, so a node
  with room for more than k replicas may get them all.  Every replica's resources are still
  reserved in full, and the launch contract describes what Ray chose (LOCAL_RANK,
  LOCAL_WORLD_SIZE and NODE_RANK come from the bundles' nodes), so a gang is never told a
  layout it does not have; only the planner's spreading intent is lost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray.translate import MARKER, NODE_LABEL, NODE_RESOURCE, RayNode, TaskRequest, task_request
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.gang.mpilaunch import SSH_CONFIG, mpi_folder
from hetflow.execute.gang.replicas import layout, replica_env
from hetflow.spec import Gang

STRICT_SPREAD = "STRICT_SPREAD"
PACK = "PACK"
# Where each replica says which Ray node it landed on (its hetflow name): on the host
# network every replica of one machine has the same hostname.
NODE_ENV = "HETFLOW_NODE"


@dataclass(frozen=True)
class GangRequest:
    """The placement group for one gang job, and each replica's task options (which equal
    its bundle, so the task fits the bundle exactly)."""

    task: TaskRequest  # one replica's options, never pinned by node id (bundles say where)
    replicas: int
    strategy: str
    label_selector: Mapping[str, str]  # every bundle's (a node named by label: NODE_LABEL)

    @property
    def bundle(self) -> dict[str, float]:
        return bundle(self.task)

    def bundles(self) -> list[dict[str, float]]:
        return [self.bundle for _ in range(self.replicas)]

    def describe(self) -> str:
        where = f", on {', '.join(f'{k}={v}' for k, v in self.label_selector.items())}" if self.label_selector else ""
        return f"{self.replicas} x ({self.task.describe()}), {self.strategy}{where}"


def strategy(gang: Gang) -> str:
    """STRICT_SPREAD for one replica per node; PACK otherwise (see the module's docstring)."""
    return STRICT_SPREAD if gang.per_node == 1 else PACK


def bundle(req: TaskRequest) -> dict[str, float]:
    """One replica's bundle: what its task asks for (Ray refuses zero amounts in a bundle)."""
    out = {"CPU": float(req.num_cpus), "GPU": float(req.num_gpus), "memory": float(req.memory), **req.resources}
    return {k: v for k, v in out.items() if v > 0}


def gang_request(job: Job, nodes: Sequence[RayNode]) -> GangRequest:
    """What to ask Ray for; EngineError saying what to change when no set of the cluster's
    alive nodes could ever hold the gang (Ray would keep its group pending for ever)."""
    if job.gang is None or not job.ranks:
        raise ValueError(f"{job.name} is not a gang job")
    one = task_request(job, nodes)  # GPU model, node type, a pinned node; checks one replica fits
    resources, selector = dict(one.resources), {}
    if one.node_id is not None:  # a node type of one node: every bundle on that node
        node = next(n for n in nodes if n.node_id == one.node_id)
        if NODE_RESOURCE + node.name in node.resources:
            resources[NODE_RESOURCE + node.name] = MARKER
        else:
            selector[NODE_LABEL] = node.name
    req = GangRequest(replace(one, resources=resources, node_id=None), len(job.ranks), strategy(job.gang), selector)
    short = shortfall(req, nodes)
    if short:
        raise EngineError(
            f"{job.name} is a gang that {short}; add nodes, or lower replicas or per-replica resources"
            + (", or allow more than one replica per node (per_node)" if req.strategy == STRICT_SPREAD else "")
        )
    return req


def _copies(node: RayNode, wants: Mapping[str, float]) -> int:
    """How many bundles of ``wants`` the node's totals hold."""
    counts = [math.floor(node.resources.get(k, 0.0) / v + 1e-9) for k, v in wants.items() if v > 0]
    return min(counts) if counts else 0


def shortfall(req: GangRequest, nodes: Sequence[RayNode]) -> str:
    """Why no set of these nodes could ever hold the group, by their totals ("" when
    some set could).  Ray itself says INFEASIBLE only when one bundle fits nowhere; a
    STRICT_SPREAD group with fewer fitting nodes than replicas is NO_RESOURCES to it."""
    # CPUs, GPUs and memory are counted; a marker (0.001 of a node-type resource) is only
    # asked to be present, as for a single task (1000 markers fit a node with 1).
    amounts = {k: v for k, v in req.bundle.items() if v != MARKER}
    fit = [
        n
        for n in nodes
        if all(n.resources.get(k, 0.0) >= v for k, v in req.bundle.items())
        and all(n.name == v for k, v in req.label_selector.items() if k == NODE_LABEL)
    ]
    if req.strategy == STRICT_SPREAD:
        room = len(fit)
        need = f"needs {req.replicas} nodes that each hold one replica ({req.task.describe()}), one replica per node"
    else:
        room = sum(_copies(n, amounts) for n in fit)
        need = f"needs room for {req.replicas} replicas of {req.task.describe()} in all"
    if room >= req.replicas:
        return ""
    return f"{need}; the Ray cluster's alive nodes have room for {room} ({len(fit)} of {len(nodes)} hold one replica)"


# --- once Ray placed the group -----------------------------------------------------------


def bundle_nodes(bundles_to_node_id: Mapping[int, str], replicas: int) -> list[str]:
    """Ray node id of each replica's bundle, in rank order (``placement_group_table(pg)
    ["bundles_to_node_id"]``); ValueError when a bundle has no node yet."""
    out = [bundles_to_node_id.get(i, "") for i in range(replicas)]
    missing = [i for i, n in enumerate(out) if not n or set(n) == {"f"}]  # Ray's nil id is all f
    if missing:
        raise ValueError(f"bundles {missing} of the placement group have no node yet")
    return out


def node_addresses(ray_nodes: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """Ray node id -> the address the other nodes reach it at (``ray.nodes()``'s
    NodeManagerAddress: the address Ray's own nodes talk to each other on)."""
    return {str(n["NodeID"]): str(n["NodeManagerAddress"]) for n in ray_nodes if n.get("NodeManagerAddress")}


def replica_specs(
    ranks: Sequence[ContainerSpec],
    gang: Gang,
    node_ids: Sequence[str],
    addresses: Mapping[str, str],
    names: Mapping[str, str],
) -> tuple[ContainerSpec, ...]:
    """Each replica's container where its bundle landed: the template plus the launch
    contract (``execute.gang.replicas.replica_env``) computed from the bundles' nodes and addresses,
    and HETFLOW_NODE (the node's hetflow name).  GPUs are added in the task, by what Ray
    assigned there."""
    if len(node_ids) != len(ranks):
        raise ValueError(f"{len(node_ids)} nodes for {len(ranks)} replicas")
    plan = layout(hosts_of(node_ids, addresses), list(node_ids))
    return tuple(
        replace(spec, env={**spec.env, **replica_env(gang, plan, i), NODE_ENV: names.get(node_ids[i], node_ids[i])})
        for i, spec in enumerate(ranks)
    )


def hosts_of(node_ids: Sequence[str], addresses: Mapping[str, str]) -> list[str]:
    """Each replica's address, from the node its bundle landed on."""
    return [addresses[n] for n in node_ids]


def mpi_ssh_config(spec: ContainerSpec) -> str | None:
    """The host side path of an MPI gang's ssh_config, or None: not an MPI gang."""
    folder = mpi_folder(spec.mounts)
    return None if folder is None else f"{folder.rstrip('/')}/{SSH_CONFIG}"

"""What every replica of a gang step is told, and what its containers are called.

A gang attempt is one job of the backend (``Job.ranks``): replica 0 is the attempt's usual
container, ``hf-RUN-STEP-ATTEMPT``, so everything that follows one container by name (the
runner, resume's adoption, the store) follows the gang through it; replica ``i`` is
``hf-RUN-STEP-ATTEMPT-r<i>``.  A name that ends in ``-r<digits>`` is never an attempt of its
own (attempt names end in the attempt number).

The launch contract, after torchrun and OpenMPI's mpirun, is written once: ``LAUNCH_CONTRACT``
says which variable holds which quantity of a rank (its rank, the world size, its node's
index, its place on the node, replica 0's address, the port) under which launchers:
- every replica: HETFLOW_RANK, HETFLOW_WORLD_SIZE, HETFLOW_NODE_RANK, HETFLOW_LOCAL_RANK;
- ``launcher: torch``: MASTER_ADDR (replica 0's address), MASTER_PORT, RANK, WORLD_SIZE,
  LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, the names torchrun sets for each worker;
- ``launcher: mpi``: replica 0 runs ``mpirun`` over a hostfile of every replica
  (``execute.gang.mpilaunch``, whose ``mpi_env`` adds Open MPI's settings); the others wait for it.
Every producer renders it with its own values (``render_contract``): this machine and Ray
with strings (``replica_env``), Slurm's task script with shell expressions evaluated where
the task lands (``backends.slurm.gang``), the Kubernetes export with pod fields
(``export.kubernetes``: a pod is a node, so only gang-wide values under mpi, where
``mpirun -x`` passes the launcher's).  ``tests/unit/test_gang_contract.py`` holds all four.

Pure: names and dictionaries only; the backends start the containers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from hetflow.spec import Gang

LABEL_RANK = "hetflow.rank"
LABEL_WORLD = "hetflow.world"  # the gang's size, on every replica: a lost one is noticed
LABEL_LAUNCHER = "hetflow.launcher"  # "mpi" on a gang whose replica 0 decides its end
KILLED = (137, 143)  # 128 + SIGKILL, 128 + SIGTERM: what a stopped replica exits with
REPLICA_RE = re.compile(r"^(?P<job>.+)-r(?P<rank>\d+)$")


def replica_name(job: str, rank: int) -> str:
    """Replica ``rank``'s container: the job's own name for rank 0."""
    return job if rank == 0 else f"{job}-r{rank}"


def replica_of(name: str) -> tuple[str, int] | None:
    """``hf-x-train-1-r2`` -> (``hf-x-train-1``, 2); None for a job's own name."""
    m = REPLICA_RE.match(name)
    return (m["job"], int(m["rank"])) if m else None


def network_name(job: str) -> str:
    """The private network of a gang attempt on one machine."""
    return f"{job}-net"


@dataclass(frozen=True)
class Rank:
    """Where one replica runs: its node (a name the replicas can reach it by) and its place
    among the replicas on that node."""

    rank: int
    host: str  # what the other replicas connect to (a container name, a node address)
    node_rank: int  # the node's index among the gang's nodes, in rank order
    local_rank: int  # the replica's index on its node
    local_size: int  # replicas on its node


def layout(hosts: Sequence[str], nodes: Sequence[str]) -> list[Rank]:
    """Ranks in order from each replica's reachable ``hosts[i]`` and the ``nodes[i]`` it runs
    on (replicas on one node are numbered there 0, 1, ... in rank order)."""
    if len(hosts) != len(nodes):
        raise ValueError(f"{len(hosts)} hosts for {len(nodes)} replicas")
    node_index: dict[str, int] = {}
    per_node: dict[str, int] = {}
    for n in nodes:
        node_index.setdefault(n, len(node_index))
        per_node[n] = per_node.get(n, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for i, (h, n) in enumerate(zip(hosts, nodes, strict=True)):
        local = seen.get(n, 0)
        seen[n] = local + 1
        out.append(Rank(i, h, node_index[n], local, per_node[n]))
    return out


# What a variable of the contract holds: the replica's rank, the gang's size, its node's index
# among the gang's nodes, its index on its node, the replicas on its node, replica 0's address,
# the gang's port.
Quantity = Literal["rank", "world", "node_rank", "local_rank", "local_size", "master_addr", "port"]
GANG_WIDE: frozenset[Quantity] = frozenset({"world", "master_addr", "port"})  # alike on every rank
EVERY_LAUNCHER = frozenset({"none", "torch", "mpi"})
TORCH = frozenset({"torch"})
V = TypeVar("V")


@dataclass(frozen=True)
class RankVariable:
    """One variable of the launch contract: its ``name``, what it holds, under which launchers."""

    name: str
    value: Quantity
    launchers: frozenset[str]


LAUNCH_CONTRACT: tuple[RankVariable, ...] = (
    RankVariable("HETFLOW_RANK", "rank", EVERY_LAUNCHER),
    RankVariable("HETFLOW_WORLD_SIZE", "world", EVERY_LAUNCHER),
    RankVariable("HETFLOW_NODE_RANK", "node_rank", EVERY_LAUNCHER),
    RankVariable("HETFLOW_LOCAL_RANK", "local_rank", EVERY_LAUNCHER),
    # torchrun's names for each worker (torch.distributed.run's environment variables)
    RankVariable("MASTER_ADDR", "master_addr", TORCH),
    RankVariable("MASTER_PORT", "port", TORCH),
    RankVariable("RANK", "rank", TORCH),
    RankVariable("WORLD_SIZE", "world", TORCH | {"mpi"}),  # mpi too: what the export has always set
    RankVariable("LOCAL_RANK", "local_rank", TORCH),
    RankVariable("LOCAL_WORLD_SIZE", "local_size", TORCH),
    RankVariable("NODE_RANK", "node_rank", TORCH),
)


def render_contract(launcher: str, values: Mapping[Quantity, V], *, gang_wide: bool = False) -> dict[str, V]:
    """The contract's variables under ``launcher``, each given its quantity's entry of
    ``values`` (a string, a shell expression, a pod field: whatever the producer writes).
    ``gang_wide``: only the variables alike on every rank (a launcher passes them on)."""
    return {
        v.name: values[v.value]
        for v in LAUNCH_CONTRACT
        if launcher in v.launchers and (not gang_wide or v.value in GANG_WIDE)
    }


def replica_env(gang: Gang, ranks: Sequence[Rank], rank: int) -> dict[str, str]:
    """The variables replica ``rank`` of the gang gets (hetflow's own win over the step's)."""
    me = ranks[rank]
    values: dict[Quantity, str] = {
        "rank": str(rank),
        "world": str(len(ranks)),
        "node_rank": str(me.node_rank),
        "local_rank": str(me.local_rank),
        "local_size": str(me.local_size),
        "master_addr": ranks[0].host,
        "port": str(gang.port),
    }
    return render_contract(gang.launcher, values)


REPLICA_MISSING = "replica missing"  # a gang with a replica the engine does not have


@dataclass(frozen=True)
class GangState:
    """The state of a gang attempt from its replicas': running while every replica runs (or
    all that have ended succeeded), failed as soon as one fails."""

    running: bool
    exit_code: int | None
    status: str
    failed_rank: int | None = None


def gang_state(replicas: Mapping[int, tuple[bool, int | None, str]], world: int, *, lead: bool = False) -> GangState:
    """Fold the replicas' (running, exit code, engine status) by rank into the gang's.

    A replica that is gone (not in ``replicas``) while others exist counts as failed
    (exit 137, as if killed), so a partial gang never looks healthy.  ``lead``: replica 0
    decides (an MPI launcher: the workers serve it and never end by themselves), so the
    gang ends with replica 0, with its exit code."""
    zero = replicas.get(0)
    if lead and zero is not None and not zero[0]:
        code = zero[1] if zero[1] is not None else 137
        return GangState(False, code, f"launcher exited {code}", None if code == 0 else 0)
    failed = [(r, st[1]) for r, st in sorted(replicas.items()) if not st[0] and st[1] not in (0, None)]
    if failed:
        # the replica that failed by itself, not one hetflow stopped after it (SIGKILL/SIGTERM)
        rank, code = next(((r, c) for r, c in failed if c not in KILLED), failed[0])
        return GangState(False, code, f"replica {rank} exited {code}", rank)
    missing = [r for r in range(world) if r not in replicas]
    if replicas and missing:
        return GangState(False, 137, REPLICA_MISSING, missing[0])
    if any(st[0] for st in replicas.values()):
        return GangState(True, None, "running")
    return GangState(False, 0, "exited")

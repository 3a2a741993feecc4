"""What every replica of a gang step is told, and what its containers are called.

A gang attempt is one job of the backend (``Job.ranks``): replica 0 is the attempt's usual
container, ``hf-RUN-STEP-ATTEMPT``, so everything that follows one container by name (the
runner, resume's adoption, the store) follows the gang through it; replica ``i`` is
``hf-RUN-STEP-ATTEMPT-r<i>``.  A name that ends in ``-r<digits>`` is never an attempt of its
own (attempt names end in the attempt number).

The launch contract, after torchrun and OpenMPI's mpirun:
- every replica: HETFLOW_RANK, HETFLOW_WORLD_SIZE, HETFLOW_NODE_RANK, HETFLOW_LOCAL_RANK;
- ``launcher: torch``: MASTER_ADDR (replica 0's address), MASTER_PORT, RANK, WORLD_SIZE,
  LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, the names torchrun sets for each worker;
- ``launcher: mpi``: replica 0 runs ``mpirun`` over a hostfile of every replica
  (``execute.mpilaunch``); the others wait for it.

Pure: names and dictionaries only; the backends start the containers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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


def replica_env(gang: Gang, ranks: Sequence[Rank], rank: int) -> dict[str, str]:
    """The variables replica ``rank`` of the gang gets (hetflow's own win over the step's)."""
    me, world = ranks[rank], len(ranks)
    env = {
        "HETFLOW_RANK": str(rank),
        "HETFLOW_WORLD_SIZE": str(world),
        "HETFLOW_NODE_RANK": str(me.node_rank),
        "HETFLOW_LOCAL_RANK": str(me.local_rank),
    }
    if gang.launcher == "torch":
        env |= {
            "MASTER_ADDR": ranks[0].host,
            "MASTER_PORT": str(gang.port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(me.local_rank),
            "LOCAL_WORLD_SIZE": str(me.local_size),
            "NODE_RANK": str(me.node_rank),
        }
    return env


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
        return GangState(False, 137, "replica missing", missing[0])
    if any(st[0] for st in replicas.values()):
        return GangState(True, None, "running")
    return GangState(False, 0, "exited")

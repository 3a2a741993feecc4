"""The planning problem as plain values: what the planner reads and what it returns.

Built from a workflow, a cluster and the measured profile by ``plan.build``; solved by
``plan.heuristic`` (list scheduling + local search) or ``plan.exact`` (CP-SAT).  Nothing
here does I/O, so ``plan(instance, seed) -> Plan`` is a pure function (STYLE.md habit 1).

Machines of one node type are alike for placement, so options are computed per *class*
(Nomad's computed node class) and only the choice of the concrete machine is per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MachineClass:
    """A node type of the cluster: ``count`` identical machines."""

    name: str
    count: int
    cores: int
    memory: int  # bytes
    speed: float = 1.0  # CPU speed factor: a CPU step runs estimate / speed
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory: int = 0
    gpu_cc: tuple[int, int] = (0, 0)
    gpu_speed: float = 1.0  # a GPU step runs estimate / gpu_speed (A100 = 1.0)
    gpu_cuda: str = ""  # highest CUDA the nodes' driver supports ("12.4"); "" unknown
    price_per_hour: float = 0.0
    microarchitecture: str = "x86_64"
    labels: tuple[tuple[str, str], ...] = ()
    gpu_link: str = ""  # how a node's GPUs are joined: "nvlink", "pcie", "" (unknown: as pcie)
    nvlink_gpus: int = 0  # GPUs in one NVLink domain (8 for an NVSwitch board, 2 for bridged pairs)
    rdma: bool = False  # the nodes have an RDMA device (InfiniBand / RoCE)

    def machine_ids(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class Option:
    """One way to run a task: a variant on a machine class, with its run time there."""

    variant: str
    machine_class: str
    runtime: float  # seconds
    cores: float
    memory: int
    gpus: int = 0


@dataclass(frozen=True)
class Rejection:
    """Why a (variant, class) pair is not an option: a filter's answer (STYLE.md habit 2)."""

    variant: str
    machine_class: str
    code: str
    reason: str


@dataclass(frozen=True)
class Task:
    """One step to place.  ``replicas``: how many containers start together as one
    all-or-nothing gang, each with an option's resources, on machines of one class, at
    most ``per_node`` on a machine (0: as many as fit).  An option's ``runtime`` is then
    the replicas' compute; ``plan.gangs`` adds the exchange of ``comm_bytes`` (per
    replica, a ring allreduce), slower across nodes than inside one."""

    name: str
    options: tuple[Option, ...]
    rejected: tuple[Rejection, ...] = ()
    replicas: int = 1
    per_node: int = 0
    comm_bytes: float = 0.0


@dataclass(frozen=True)
class Edge:
    parent: str
    child: str
    bytes: float = 0.0


@dataclass(frozen=True)
class Instance:
    """Tasks in topological order, data edges, the cluster's classes and its bandwidth.

    ``one_task_per_machine`` is the classic DAG-scheduling model (HEFT, SAGA): a machine
    runs one task at a time whatever its cores.  Otherwise machines are shared by cores,
    memory and GPUs."""

    tasks: tuple[Task, ...]
    edges: tuple[Edge, ...]
    classes: tuple[MachineClass, ...]
    bandwidth: float = 1.25e9  # bytes/s between two machines; zero cost on one machine
    one_task_per_machine: bool = False

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def machine_class(self, name: str) -> MachineClass:
        for c in self.classes:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True)
class Placement:
    task: str
    variant: str
    machine: str  # machine id, "<class>-<i>"
    machine_class: str
    start: float
    finish: float
    cores: float
    memory: int
    gpus: tuple[int, ...] = ()  # GPU indices on the machine
    # A gang: one (machine, GPU indices) per replica, rank 0 first (``machine`` and ``gpus``
    # above are rank 0's); empty for a step of one container.
    ranks: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def per_machine(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Machine -> (replicas there, their GPU indices): what the placement holds where."""
        if not self.ranks:
            return {self.machine: (1, self.gpus)}
        out: dict[str, tuple[int, tuple[int, ...]]] = {}
        for machine, gpus in self.ranks:
            n, held = out.get(machine, (0, ()))
            out[machine] = (n + 1, held + gpus)
        return out


@dataclass(frozen=True)
class Plan:
    placements: dict[str, Placement]
    makespan: float
    cost: float  # dollars: each step's runtime x its node's price x its dominant share of the node
    algorithm: str
    objective: str = "makespan"
    optimal: bool = False  # proven optimal (exact mode)
    notes: tuple[str, ...] = field(default=())

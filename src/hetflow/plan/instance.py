"""The planning problem as plain values: what the planner reads and what it returns.

Built from a workflow, a cluster and the measured profile by ``plan.build``; solved by
``plan.search.heuristic`` (list scheduling + local search) or ``plan.search.exact`` (CP-SAT).  Nothing
here does I/O, so ``plan(instance, seed) -> Plan`` is a pure function (STYLE.md habit 1).

Machines of one node type are alike for placement, so options are computed per *class*
(Nomad's computed node class) and only the choice of the concrete machine is per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetflow.inventory import GpuSharing


@dataclass(frozen=True)
class GpuKind:
    """What one GPU of a machine is, when a machine's GPUs are unlike (a probed node with
    an NVIDIA and an AMD GPU): the per-GPU form of ``MachineClass``'s ``gpu_*`` fields."""

    vendor: str = "nvidia"
    model: str = ""
    memory: int = 0
    cc: tuple[int, int] = (0, 0)
    arch: str = ""  # AMD gfx target / Intel family; "" for NVIDIA
    speed: float = 1.0
    cuda: str = ""
    rocm: str = ""
    mig: tuple[str, ...] = ()  # its MIG layout (profiles) when MIG mode is on


@dataclass(frozen=True)
class MachineClass:
    """A node type of the cluster: ``count`` identical machines.

    The ``gpu_*`` fields describe every GPU of a machine (all alike); a machine whose GPUs
    differ (vendors, models) lists one ``GpuKind`` per GPU index in ``gpu_kinds``, which
    then wins over the class-wide fields.  ``gpu_sharing`` is how each GPU is shared
    (exclusive, time-slicing or MPS with replicas); ``mig`` the MIG layout of each GPU
    (profiles; empty: MIG off), whose instances are given out instead of whole GPUs."""

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
    gpu_vendor: str = "nvidia"  # nvidia, amd or intel
    gpu_arch: str = ""  # AMD gfx target (gfx90a) / Intel family (pvc); "" for NVIDIA
    gpu_rocm: str = ""  # ROCm version on AMD nodes; "" unknown
    gpu_sharing: GpuSharing = field(default_factory=GpuSharing)
    mig: tuple[str, ...] = ()  # every GPU's MIG layout (profiles); empty: MIG off
    gpu_kinds: tuple[GpuKind, ...] = ()  # per GPU index when the GPUs are unlike; empty: all alike
    spot: bool = False  # spot / preemptible capacity: a retry that avoids a failed class tries on-demand first

    def gpu_kind(self, index: int) -> GpuKind:
        """GPU ``index`` of a machine of this class, from ``gpu_kinds`` or the class fields."""
        if self.gpu_kinds:
            return self.gpu_kinds[index]
        return GpuKind(
            vendor=self.gpu_vendor,
            model=self.gpu_model,
            memory=self.gpu_memory,
            cc=self.gpu_cc,
            arch=self.gpu_arch,
            speed=self.gpu_speed,
            cuda=self.gpu_cuda,
            rocm=self.gpu_rocm,
            mig=self.mig,
        )

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
    # A slice of one GPU instead of whole ones (``gpus`` is then 1): ``share`` of a
    # time-sliced or MPS GPU, or one MIG instance of profile ``mig``.
    share: float = 0.0
    mig: str = ""
    vendor: str = "nvidia"  # whose GPUs the option takes ("any": whichever qualify)


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
    the replicas' compute; ``plan.feasible.gangs`` adds the exchange of ``comm_bytes`` (per
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
    # A slice of GPU ``gpus[0]``: ``share`` of it (time-slicing or MPS; 0.0: whole GPUs),
    # or its MIG device ``mig_device`` (index among the GPU's MIG instances; None: none).
    share: float = 0.0
    mig_device: int | None = None

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


def placed_option(options: tuple[Option, ...], p: Placement) -> Option | None:
    """The option a placement follows: its variant on its machine class, holding a share, a
    MIG instance or whole GPUs as the placement does (the validator and the simulator ask)."""
    for o in options:
        if (
            o.variant == p.variant
            and o.machine_class == p.machine_class
            and (o.share > 0) == (p.share > 0)
            and bool(o.mig) == (p.mig_device is not None)
        ):
            return o
    return None

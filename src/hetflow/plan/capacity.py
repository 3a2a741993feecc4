"""One machine's capacity and the one admission rule every planner, checker and simulation
asks (issue 24: the rule was written four times, with tolerances from 1e-9 to 1e-6).

**The admission rule.**  ``sharing_refusal`` decides whether a set of tenants may share one
GPU at once: at most ``replicas`` of them, and the sum of their shares (the GPU's *load*)
within the lowest load any of them was planned at (a time-sliced tenant's run time assumes
a load; an MPS client is planned at load 1, which makes its shares sum to at most 1;
``sharecheck`` has the model).  Admitting one more tenant is asking the rule about the set
with it added.  Its users: the planner's ``gpuload.GpuLoad.blocked`` (over time), the
validator's ``sharecheck`` (every instant of a plan), the simulation's ``Machine`` below
(now), and the local runner's ``tenancy.admits`` (live leases; a time-sliced lease is not
planned at a load, so only its count binds).  Cores and memory are admitted by ``fits``:
cores within ``CORE_EPS`` (fractional cores add up with rounding error), memory exactly
(whole bytes).

**The machine.**  ``Machine`` is one machine now: its free cores, memory and whole GPUs,
the shared tenants on each GPU and the MIG instances held.  The event-driven baselines
(``eventsim``: first fit, kube-scheduler, Slurm backfill) take and give back counts of
GPUs; the simulation holds and releases a plan's placements as planned (GPU indices,
shares, MIG instances).  The planner's own view over time is ``timeline.Timeline``, which
keeps the same quantities as step functions and asks the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetflow.plan.instance import MachineClass, Placement

CORE_EPS = 1e-9  # fractional cores add up with rounding error; a hair over capacity still fits
# A load is a sum of a few shares in (0, 1]; a planned load is recovered from run times
# (``sharecheck.planned_load``), whose rounding at start times near 1e6 s reaches ~1e-9 of a
# load, so the load is compared with a margin well above that and far below any share.
LOAD_TOL = 1e-6

REPLICAS = "replicas"  # sharing_refusal: more tenants than the GPU's replicas
LOAD = "load"  # sharing_refusal: the shares sum past the lowest planned load


def sharing_refusal(count: int, load: float, level: float, replicas: int) -> str | None:
    """None when ``count`` tenants whose shares sum to ``load`` may share one GPU at once,
    the lowest load any of them was planned at being ``level`` (``math.inf``: no tenant is
    planned at a load) and the GPU taking at most ``replicas``; else ``REPLICAS`` or ``LOAD``."""
    if count > replicas:
        return REPLICAS
    if load > level + LOAD_TOL:
        return LOAD
    return None


def fits(cores: float, memory: int, free_cores: float, free_memory: int) -> bool:
    """Whether ``cores`` and ``memory`` fit in what is free."""
    return cores <= free_cores + CORE_EPS and memory <= free_memory


Tenancy = tuple[str, float, float]  # a shared tenant of one GPU: task, share, planned load


@dataclass
class Machine:
    """One machine now: its capacity and what is free (see the module docstring).

    In the one-task-per-machine model a machine has one "core" and no memory to give, and
    every step asks for one core (``eventsim.demand``), so it runs one step at a time."""

    index: int  # cluster order: class by class, then by number
    id: str
    cls: MachineClass
    cap_cores: float
    cap_memory: int
    cores: float
    memory: int
    gpus: list[int] = field(default_factory=list)  # free whole GPUs, ascending
    tenants: dict[int, list[Tenancy]] = field(default_factory=dict)  # GPU -> its shared tenants
    migs: set[tuple[int, int]] = field(default_factory=set)  # (GPU, MIG instance) held

    @classmethod
    def idle(cls, index: int, mid: str, mclass: MachineClass, one_task: bool) -> Machine:
        """Machine ``mid`` of ``mclass`` with nothing on it."""
        cores, memory = (1.0, 0) if one_task else (float(mclass.cores), mclass.memory)
        return cls(index, mid, mclass, cores, memory, cores, memory, list(range(mclass.gpus)))

    # counts of whole GPUs, lowest index first (the event-driven baselines)

    def fits(self, cores: float, memory: int, gpus: int) -> bool:
        return fits(cores, memory, self.cores, self.memory) and gpus <= len(self.gpus)

    def take(self, cores: float, memory: int, gpus: int) -> tuple[int, ...]:
        self.cores -= cores
        self.memory -= memory
        taken, self.gpus = self.gpus[:gpus], self.gpus[gpus:]
        return tuple(taken)

    def give_back(self, cores: float, memory: int, gpus: tuple[int, ...]) -> None:
        self.cores += cores
        self.memory += memory
        self.gpus = sorted(self.gpus + list(gpus))

    # placements as planned: GPU indices, shares, MIG instances (the simulation)

    def admits(self, p: Placement, cores: float, memory: int, level: float) -> bool:
        """Whether ``p`` (holding ``cores`` and ``memory`` here; a shared tenant planned at
        load ``level``) may start now."""
        if not fits(cores, memory, self.cores, self.memory):
            return False
        if p.mig_device is not None:
            return (p.gpus[0], p.mig_device) not in self.migs
        if p.share > 0:
            g = p.gpus[0]
            here = self.tenants.get(g, [])
            lowest = min([level, *(lv for _, _, lv in here)])
            load = p.share + sum(sh for _, sh, _ in here)
            replicas = self.cls.gpu_sharing.replicas
            return g in self.gpus and sharing_refusal(len(here) + 1, load, lowest, replicas) is None
        return all(g in self.gpus and not self.tenants.get(g) for g in p.gpus)

    def hold(self, p: Placement, cores: float, memory: int, level: float, sign: int) -> None:
        """Take (``sign`` 1) or give back (-1) what ``admits`` asked about."""
        self.cores -= sign * cores
        self.memory -= sign * memory
        if p.mig_device is not None:
            if sign > 0:
                self.migs.add((p.gpus[0], p.mig_device))
            else:
                self.migs.discard((p.gpus[0], p.mig_device))
        elif p.share > 0:
            here = self.tenants.setdefault(p.gpus[0], [])
            if sign > 0:
                here.append((p.task, p.share, level))
            else:
                here.remove((p.task, p.share, level))
        elif sign > 0:
            self.gpus = [g for g in self.gpus if g not in p.gpus]
        else:
            self.gpus = sorted(self.gpus + list(p.gpus))

"""One machine now, for the simulations that move forward event by event: the baselines
(``baselines.eventsim``: first fit, kube-scheduler, Slurm backfill) and the replay of a plan
(``simulator``).  It keeps what is free (cores, memory, whole GPUs), the shared tenants of
each GPU and the MIG instances held; it admits through ``fit.fits``, reading itself as a
``NodeState`` (``state``, kept until the next change).

The baselines ask for counts of whole GPUs and take the lowest free indices; the replay
holds a plan's placements as planned (``placed``: its GPU indices, its share, its MIG
instance).  A MIG instance is a device of its own here, as in the planner's timeline (its
key is ``(gpu, instance)``), and the replay does not hold a plan's GPUs to MIG mode: which
GPUs a placement may take whole or shared is the plan's, judged by ``check_plan``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import cast

from hetflow.plan.instance import MachineClass, Placement
from hetflow.plan.model.fit import MIG, WHOLE, Claim, Demand, GpuState, NodeState, fits

Tenancy = tuple[str, float, float]  # a shared tenant of one GPU: its holder, share, planned load


def placed(p: Placement, cores: float, memory: int, level: float, mode: str) -> Demand:
    """What placement ``p`` holds on its machine: ``cores`` and ``memory`` there, and its
    GPUs as planned: a MIG instance, a share (in sharing ``mode``, planned at load
    ``level``) of its GPU, or its GPUs whole."""
    if p.mig_device is not None:
        claims: tuple[Claim, ...] = (Claim((p.gpus[0], p.mig_device), MIG, instance=p.mig_device),)
    elif p.share > 0:
        claims = (Claim(p.gpus[0], mode, p.share, level),)
    else:
        claims = tuple(Claim(g) for g in p.gpus)
    return Demand(cores, memory, claims=claims)


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
    _state: NodeState | None = field(default=None, init=False, repr=False, compare=False)  # until a change
    # id(demand) -> (the demand, whether it fits): kept with its demand, so the id is not reused
    _asked: dict[int, tuple[Demand, bool]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def idle(cls, index: int, mid: str, mclass: MachineClass, one_task: bool) -> Machine:
        """Machine ``mid`` of ``mclass`` with nothing on it."""
        cores, memory = (1.0, 0) if one_task else (float(mclass.cores), mclass.memory)
        return cls(index, mid, mclass, cores, memory, cores, memory, list(range(mclass.gpus)))

    def state(self) -> NodeState:
        """This machine now, as ``fits`` reads it: what is free is what it offers."""
        if self._state is None:
            mode = self.cls.gpu_sharing.mode
            gpu: dict[Hashable, GpuState] = {g: GpuState(whole=1) for g in range(self.cls.gpus) if g not in self.gpus}
            for g, here in self.tenants.items():
                if here:
                    gpu[g] = GpuState(
                        int(g not in self.gpus),
                        len(here),
                        sum(sh for _, sh, _ in here),
                        min(lv for _, _, lv in here),
                        frozenset((mode,)),
                    )
            for g, d in self.migs:
                gpu[(g, d)] = GpuState(instances=frozenset((d,)))
            self._state = NodeState(
                self.cores, self.memory, len(self.gpus), replicas=self.cls.gpu_sharing.replicas, gpu=gpu
            )
        return self._state

    def fits(self, demand: Demand) -> bool:
        """Whether ``demand`` may start here now (asked once per demand until the next change:
        the policies ask the same few demands of every machine, over and over)."""
        asked = self._asked.get(id(demand))
        if asked is None:
            asked = self._asked[id(demand)] = (demand, not fits(self._state or self.state(), demand))
        return asked[1]

    def take(self, demand: Demand, holder: str = "") -> tuple[int, ...]:
        """Hold ``demand`` (a shared tenant as ``holder``'s); the whole GPUs it takes by count,
        the lowest free first."""
        self.cores -= demand.cores
        self.memory -= demand.memory
        taken, self.gpus = tuple(self.gpus[: demand.gpus]), self.gpus[demand.gpus :]
        for c in demand.claims:
            if c.mode == MIG:
                self.migs.add(cast(tuple[int, int], c.gpu))  # (GPU, instance): ``placed``
            elif c.mode == WHOLE:
                self.gpus.remove(cast(int, c.gpu))
            else:
                self.tenants.setdefault(cast(int, c.gpu), []).append((holder, c.share, c.level))
        self._state = None
        self._asked.clear()
        return taken

    def give_back(self, demand: Demand, taken: tuple[int, ...], holder: str = "") -> None:
        """Undo ``take``: ``taken`` are the GPUs it returned."""
        self.cores += demand.cores
        self.memory += demand.memory
        whole = [cast(int, c.gpu) for c in demand.claims if c.mode == WHOLE]
        if taken or whole:
            self.gpus = sorted(self.gpus + list(taken) + whole)
        for c in demand.claims:
            if c.mode == MIG:
                self.migs.discard(cast(tuple[int, int], c.gpu))
            elif c.mode != WHOLE:
                self.tenants[cast(int, c.gpu)].remove((holder, c.share, c.level))
        self._state = None
        self._asked.clear()

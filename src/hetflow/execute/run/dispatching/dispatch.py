"""Dispatch strategies: for a ready step, which variant runs, where, and with which GPUs.

The runner asks one ``Dispatch`` per run (Kubernetes' scheduler framework calls this kind
of seam an extension point).  ``LocalDispatch`` does hetflow's own accounting on this
machine: free cores and memory, GPU leases shared by every run on the host, the variant
chooser (the plan's variant, or the greedy rule).  ``ClusterDispatch`` follows the cluster
plan's placements and leaves capacity and GPUs to the engine (Slurm, Ray), which queues
the work and assigns devices itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from hetflow.execute.backends.base import Backend
from hetflow.execute.devices.gpu import GpuAccess, gpu_access
from hetflow.execute.gang.elastic import sizes, with_replicas
from hetflow.execute.run.attempts import Active
from hetflow.execute.run.retries import NextAttempt
from hetflow.inventory import Gpu, GpuSharing, Node
from hetflow.plan import (
    Capacity,
    MachineClass,
    Placement,
    PlanChooser,
    Slot,
    Tenant,
    VariantChooser,
    admits,
    first_class_rejection,
)
from hetflow.spec import Step, Variant
from hetflow.state import Lease, Store


@dataclass(frozen=True)
class Decision:
    """The answer for one ready step: run ``variant`` (with ``gpus``), or not now.

    ``variant`` None with ``wait``: it could run once resources free up (``why`` says what
    it waits for); without ``wait``: it can never run here (``why`` says why)."""

    variant: str | None
    gpus: tuple[Gpu, ...] = ()
    why: str = ""
    wait: bool = False
    slot: Slot | None = None  # a share or MIG step: how it holds gpus[0]; None: whole GPUs
    replicas: int | None = None  # an elastic gang: the replicas it starts with (None: as written)


@dataclass(frozen=True)
class Where:
    """What the engine is told about where a job runs (a cluster plan's placement)."""

    node: str  # what the step and attempt records name: this machine, or the planned class
    gpu_model: str | None = None
    gpu_vendor: str | None = None  # the planned class's GPUs' vendor (None: it has none)
    pinned_node: str | None = None
    node_class: str | None = None
    nodes: int = 1  # a gang: how many nodes the plan spreads its replicas over
    gpu_sharing: GpuSharing | None = None  # how the planned class shares its GPUs (Slurm shard vs mps gres)
    shared: bool = True  # False: the plan gave a gpu_share step a whole GPU (the engine is asked for one)


class Dispatch(Protocol):
    def decide(self, name: str, step: Step) -> Decision: ...

    def where(self, name: str) -> Where: ...

    def access(self, variant: Variant, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> GpuAccess: ...

    def reserve(self, holder: Lease, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> bool: ...

    def inherit(self, parent: str, items: Sequence[str]) -> None:
        """A fan-out expanded at run time: its items follow the plan its step had."""


class LocalDispatch:
    """This machine: hetflow counts free cores and memory and leases GPUs itself; GPU leases
    live in the store, so they hold across every run on the host."""

    def __init__(
        self,
        *,
        node: Node,
        chooser: VariantChooser,
        store: Store,
        backend: Backend,
        active: Mapping[str, Active],
        pid: int,
        alive: Callable[[int], bool],
    ) -> None:
        self.node, self.chooser, self.store, self.backend = node, chooser, store, backend
        self.active, self.pid, self.alive = active, pid, alive

    def view(self) -> tuple[Capacity, tuple[Tenant, ...]]:
        """What a decision reads of the machine now: the free capacity and the GPUs' tenants."""
        live = self.live_leases()
        return self.free(live), tuple(map(tenant, live))

    def decide(self, name: str, step: Step, view: tuple[Capacity, tuple[Tenant, ...]] | None = None) -> Decision:
        """The choice for the step as written; an elastic gang (``spec.fields.elastic``) as many
        replicas as fit now, from its max down to its min (the min's answer when none fit).
        ``view``: the machine as ``view`` saw it a moment ago (None: looked at now)."""
        free, tenants = view if view is not None else self.view()
        tried = sizes(step)
        for n in tried:
            choice = self.chooser.choose(with_replicas(step, n), self.node, free, name, tenants)
            if choice.variant is not None:
                if len(tried) == 1:
                    return Decision(choice.variant, choice.gpus, choice.explain(), slot=choice.slot)
                why = f"{choice.explain()}; {n} of {tried[0]} replicas (min {tried[-1]})"
                return Decision(choice.variant, choice.gpus, why, slot=choice.slot, replicas=n)
        prefix = "waiting for resources: " if choice.wait else "no variant can run on this machine: "
        return Decision(None, (), prefix + choice.explain(), choice.wait)

    def live_leases(self) -> list[Lease]:
        """The leases of every run on the host whose holder is alive."""
        return [lease for lease in self.store.leases() if not self.stale(lease)]

    def free(self, live: list[Lease] | None = None) -> Capacity:
        """This machine less what this run's attempts hold and the GPUs leased by live
        holders (a GPU with any tenant is not free whole)."""
        held = {a.container: (a.cpus, a.memory) for a in self.active.values()}  # a batch's items: one container
        # rounded: twenty 0.1-CPU steps must leave 0.0 free, not -1e-16 (or 0.1 as 0.09999...)
        cpus = round(self.node.cpu.cores - sum(c for c, _ in held.values()), 9)
        mem = self.node.memory_bytes - sum(m for _, m in held.values())
        leased = {lease.gpu_uuid for lease in (self.live_leases() if live is None else live)}
        return Capacity(cpus, mem, tuple(g for g in self.node.gpus if g.uuid not in leased))

    def stale(self, lease: Lease) -> bool:
        """A lease is dead when its process is gone and its container is not running."""
        if lease.pid == self.pid or self.alive(lease.pid):
            return False
        st = self.backend.poll(lease.run_id).get(lease.container)
        return st is None or not st.running

    def where(self, name: str) -> Where:
        return Where(self.node.name)

    def inherit(self, parent: str, items: Sequence[str]) -> None:
        if isinstance(self.chooser, PlanChooser):
            self.chooser.inherit(parent, items)

    def access(self, variant: Variant, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> GpuAccess:
        return gpu_access(gpus, self.node, slot=slot, memory=variant.gpu_request.memory)

    def reserve(self, holder: Lease, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> bool:
        """Lease the GPUs for the attempt (all or none): whole, or the slot's share or MIG
        instance, checked against the GPU's other live holders (``plan.tenancy.admits``) in
        the store's write transaction; leases whose holder is dead go."""
        uuids = [g.uuid for g in gpus]
        if not uuids:
            return True
        if slot is not None and slot.mode != "whole":
            mig = slot.mig.uuid if slot.mig is not None else ""
            claims = [replace(holder, gpu_uuid=slot.gpu.uuid, mode=slot.mode, share=slot.share, mig=mig)]
        else:
            claims = [replace(holder, gpu_uuid=u) for u in uuids]
        stale = [lease for lease in self.store.leases() if lease.gpu_uuid in uuids and self.stale(lease)]
        sharing = self.node.gpu_sharing
        return self.store.acquire(
            claims, stale, lambda claim, others: admits(tenant(claim), [tenant(o) for o in others], sharing) is None
        )


def tenant(lease: Lease) -> Tenant:
    """A lease row as the lease arithmetic sees it."""
    return Tenant(lease.gpu_uuid, lease.mode, lease.share, lease.mig)


class ClusterDispatch:
    """A cluster engine: the plan placed every step; the engine assigns GPUs and queues."""

    def __init__(
        self,
        node: Node,
        placements: Mapping[str, Placement],
        classes: Sequence[MachineClass],
        nexts: Mapping[str, NextAttempt] | None = None,
        reasons: Mapping[str, str] | None = None,
        failed: Mapping[str, str] | None = None,
    ) -> None:
        self.node = node  # this machine: its control devices still go into a CPU step's container
        self.placements = dict(placements)
        self.classes = tuple(classes)
        self.nexts: Mapping[str, NextAttempt] = nexts if nexts is not None else {}  # what retries changed
        self.moved: dict[str, tuple[str, str]] = {}  # step -> (variant, class) a retry moved it to
        self.reasons = dict(reasons or {})  # step -> why the plan has its variant (--variant, --prefer)
        # nodes declared failed in this run, each with the step first lost there (``lostattempts``:
        # the runner's, seen as it grows): no later attempt of any step is placed there
        self.failed: Mapping[str, str] = failed if failed is not None else {}
        # node class -> GPU model (the engine's GPU type), and -> the one node a class of one
        # names (the engine's node list: a cluster file lists Slurm nodes or Ray nodes by name)
        self.gpu_models = {c.name: c.gpu_model for c in classes if c.gpus}
        self.gpu_vendors = {c.name: c.gpu_vendor for c in classes if c.gpus}
        self.pinned_nodes = {c.name: c.name for c in classes if c.count == 1}
        self.sharing = {c.name: c.gpu_sharing for c in classes if c.gpus}

    def decide(self, name: str, step: Step) -> Decision:
        placed = self.placements.get(name)
        if placed is None:
            return Decision(None, (), "no node of the cluster can run this step (see 'hetflow plan --explain')")
        nxt = self.nexts.get(name)
        avoid = nxt.avoid if nxt is not None else frozenset()
        # a class pinned to a node that died under an attempt (this step's or another's): Slurm
        # would hold the job pending there, Ray refuse it, so it moves like an avoided class
        lost = (nxt.lost_nodes if nxt is not None else frozenset()) | set(self.failed)
        dead = {c: n for c, n in self.pinned_nodes.items() if n in lost}
        self.moved.pop(name, None)
        to = nxt.move_to if nxt is not None else None
        if to is not None and to != placed.machine_class:  # hetflow migrate --to: only that class will do
            d = self._moved(name, step, placed, avoid | {c.name for c in self.classes if c.name != to}, dead)
            return replace(d, why=f"{d.variant} on {to} (moved there by hetflow migrate)") if d.variant else d
        if placed.variant in step.resolved_variants() and placed.machine_class not in avoid | set(dead):
            why = self.reasons.get(name)
            planned = f"planned; {why}" if why else "planned"
            return Decision(placed.variant, (), f"{placed.variant} on {placed.machine_class} ({planned})")
        return self._moved(name, step, placed, avoid, dead)

    def _moved(
        self, name: str, step: Step, placed: Placement, avoid: frozenset[str], dead: Mapping[str, str] | None = None
    ) -> Decision:
        """A retry left the planned (variant, class): its fallback variant, or a class to
        avoid.  The first class that can ever hold a variant takes it: on-demand classes
        before spot ones (nextflow#7396: a step lost with a spot node retries on demand),
        a variant using no GPU on a class without GPUs first (the planner's "avoid" GPU
        policy), else in the cluster file's order; the planned variant first, then GPU ones."""
        dead = dead or {}
        variants = step.resolved_variants()
        order = sorted(variants, key=lambda v: (v != placed.variant, -variants[v].resources.gpus))
        usable = [c for c in self.classes if c.name not in avoid and c.name not in dead]
        under = {n for n, s in self.failed.items() if s == name}
        under |= nxt.lost_nodes if (nxt := self.nexts.get(name)) is not None else frozenset()
        where = "under it" if set(dead.values()) & under else "in this run"  # under another step's attempt
        lost = f"node {', '.join(sorted(dead.values()))} failed {where}" if dead else ""
        for vname in order:
            cpu_only = not variants[vname].uses_gpu
            for c in sorted(usable, key=lambda c: (c.spot, cpu_only and c.gpus > 0)):
                if first_class_rejection(variants[vname], c).ok:
                    self.moved[name] = (vname, c.name)
                    left = f", avoiding {', '.join(sorted(avoid))}" if avoid else ""
                    by = f"moved: {lost}" if lost and placed.machine_class in dead else "moved by its retry policy"
                    return Decision(vname, (), f"{vname} on {c.name} ({by}{left})")
        if placed.variant in variants:  # nowhere else: the planned class again, said so
            if placed.machine_class in dead:
                return Decision(
                    placed.variant,
                    (),
                    f"{placed.variant} on {placed.machine_class} (planned; {lost} and no other node class can run "
                    f"variant(s) {', '.join(variants)}: submitted there again, it runs once the node is back)",
                )
            return Decision(
                placed.variant,
                (),
                f"{placed.variant} on {placed.machine_class} (planned; no other node class can run it)",
            )
        return Decision(None, (), f"no node class can run variant(s) {', '.join(variants)} of this retry")

    def where(self, name: str) -> Where:
        placed = self.placements[name]
        vname, cname = self.moved.get(name, (placed.variant, placed.machine_class))
        pinned = self.pinned_nodes.get(cname)
        return Where(
            node=cname,
            gpu_model=self.gpu_models.get(cname),
            gpu_vendor=self.gpu_vendors.get(cname),
            pinned_node=pinned,
            # a pinned node says it all; otherwise the engine picks among the class's nodes
            node_class=None if pinned else cname,
            nodes=len(placed.per_machine()),
            gpu_sharing=self.sharing.get(cname),
            shared=placed.share > 0 and vname == placed.variant,
        )

    def access(self, variant: Variant, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> GpuAccess:
        # The engine's job gives the container exactly the device nodes it assigned.
        return GpuAccess() if variant.uses_gpu else gpu_access((), self.node)

    def reserve(self, holder: Lease, gpus: tuple[Gpu, ...], slot: Slot | None = None) -> bool:
        return True

    def inherit(self, parent: str, items: Sequence[str]) -> None:
        placed = self.placements.get(parent)
        if placed is not None:
            for item in items:
                self.placements[item] = placed

"""Variant choice for the local runner: the GPU variant when a qualifying GPU is free,
else the CPU variant, with the reason for every variant not taken.

This is a small interface (``VariantChooser``) so the planner of a later issue can
replace the greedy rule without touching the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from hetflow.errors import Problem
from hetflow.inventory import Gpu, Node
from hetflow.plan.feasible.filters import Capacity, Status, check, qualifying_gpus, vendor_ok
from hetflow.plan.onemachine.gpupick import pick_gpus
from hetflow.plan.sharing.tenancy import Slot, Tenant, mig_slot, share_slot
from hetflow.spec import LoadedWorkflow, Step, Variant, fanout_parent, item_text


@dataclass(frozen=True)
class Choice:
    """The answer for one ready step.

    ``variant`` None with ``wait`` True: something could fit once resources free up.
    ``variant`` None with ``wait`` False: nothing on this node can ever run the step."""

    variant: str | None
    gpus: tuple[Gpu, ...] = ()
    wait: bool = False
    why: str = ""
    rejected: tuple[tuple[str, str], ...] = field(default=())  # (variant, reason)
    slot: Slot | None = None  # a share or MIG step: how it holds gpus[0]; None: whole GPUs

    def explain(self) -> str:
        parts = [self.why] if self.why else []
        parts += [f"{v}: {r}" for v, r in self.rejected]
        return "; ".join(parts)


class VariantChooser(Protocol):
    def choose(
        self, step: Step, node: Node, free: Capacity, name: str = "", tenants: Sequence[Tenant] = ()
    ) -> Choice: ...


def whole_gang(step: Step) -> dict[str, Variant]:
    """The step's variants as one machine must hold them: a gang's replicas all at once
    (this machine is one node), each variant's resources times the replicas."""
    variants = step.resolved_variants()
    n = step.replicas
    if n <= 1:
        return variants
    return {
        k: v.model_copy(
            update={
                "resources": v.resources.model_copy(
                    update={
                        "cpus": v.resources.cpus * n,
                        "memory": v.resources.memory * n,
                        "gpus": v.resources.gpus * n,
                    }
                )
            }
        )
        for k, v in variants.items()
    }


def gpu_pool(v: Variant, gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """The GPUs that can serve ``v``'s kind of request at all: its vendor's (``any``:
    whichever); for whole GPUs and shares those not in MIG mode (a GPU in MIG mode is only
    given out by instance), for a MIG instance those in MIG mode."""
    r = v.gpu_request
    mig = r.kind == "mig"
    return tuple(g for g in gpus if vendor_ok(g.vendor, r.vendor) and g.mig_enabled == mig)


def _fits_here(step: Step, v: Variant, cap: Capacity, node: Node, *, now: bool) -> Status:
    """``check`` for a step or a whole gang on this one machine, worded for the gang."""
    cap = Capacity(cap.cpus, cap.memory, gpu_pool(v, cap.gpus))
    gang = step.gang
    if gang is not None and gang.replicas > 1 and gang.per_node is not None and gang.per_node < gang.replicas:
        return Status(
            "gang-per-node",
            f"per_node: {gang.per_node} spreads the gang's {gang.replicas} replicas over "
            f"{gang.nodes_at_least()} nodes, and this machine is one; run it on a cluster backend or drop per_node",
        )
    st = check(v, cap, where="this machine", now=now, labels=None if now else node.labels)
    if not now and st.code == "gpus" and len(cap.gpus) < len(node.gpus):
        st = Status("gpus", _pool_reason(v, node))
    if st.ok or gang is None or gang.replicas <= 1:
        return st
    return Status(st.code, f"the gang's {gang.replicas} replicas together: {st.reason}")


def _pool_reason(v: Variant, node: Node) -> str:
    """Why the machine's GPUs are too few for ``v`` when some were left out of its pool:
    another vendor's, or (not) in MIG mode."""
    r = v.gpu_request
    have = ", ".join(
        f"{sum(g.vendor == vendor for g in node.gpus)} {vendor}" for vendor in sorted({g.vendor for g in node.gpus})
    )
    if r.kind == "mig":
        return f"asks for {r.describe()}; no {r.vendor} GPU of this machine is in MIG mode (it has {have} GPUs)"
    in_mig = sum(g.mig_enabled for g in node.gpus)
    tail = f"; {in_mig} in MIG mode, given only by instance (gpu_mig)" if in_mig else ""
    return f"asks for {r.describe()}; this machine has {have} GPUs{tail}"


def take_gpus(step: Step, v: Variant, free: Capacity, node: Node) -> tuple[Gpu, ...] | None:
    """The free GPUs the step gets, topology first (``plan.onemachine.gpupick``): one set per replica;
    None when no sets of free GPUs meet the gang's ``gpu_link``."""
    n = step.replicas
    per = v.resources.gpus // n if n > 1 else v.resources.gpus
    need = step.gang.gpu_link if step.gang is not None else "any"
    picked = pick_gpus(node, qualifying_gpus(v, gpu_pool(v, free.gpus)), n, per, need)
    return None if picked is None else tuple(picked)


def fraction_never(v: Variant, node: Node) -> str | None:
    """Why a share or MIG variant can never run here (None when it can, or is not one)."""
    r = v.gpu_request
    pool = qualifying_gpus(v, gpu_pool(v, node.gpus))
    if r.kind == "share" and not pool:
        return f"asks for {r.describe()}; this machine has no qualifying GPU outside MIG mode"
    if r.kind == "mig" and r.mig is not None:
        slot, why = mig_slot(pool, (), r.mig, r.memory)
        if slot is None:
            return f"asks for {r.describe()}; no GPU of this machine has one ({why})"
    return None


def _never_here(step: Step, v: Variant, total: Capacity, node: Node) -> Status:
    """Why ``v`` can never run on this machine (``_fits_here`` against its capacity, then a
    share's or MIG instance's own rule), or OK."""
    st = _fits_here(step, v, total, node, now=False)
    fraction = fraction_never(v, node) if st.ok else None
    return st if fraction is None else Status("gpu_fraction", fraction)


def can_run_here(step: Step, v: Variant, node: Node) -> bool:
    """Whether variant ``v`` of ``step`` can ever run on this machine (a gang's replicas together).

    The answer depends on the variant's fields, the step's gang and replicas and the node
    (all frozen): each distinct question is answered once (a dry run of 10,000 fan-out
    items asks a handful)."""
    name = next((n for n, o in step.resolved_variants().items() if o == v), None)
    gang = None if step.gang is None else step.gang.model_dump_json()
    key = (id(node), name is None, step.replicas, gang, v.model_dump_json())
    known = _RUNS_HERE.get(key)
    if known is not None and known[0] is node:  # the node itself, held: its id is not reused
        return known[1]
    whole = whole_gang(step).get(name, v) if name is not None else v
    ok = _never_here(step, whole, Capacity.of(node), node).ok
    if len(_RUNS_HERE) >= 4096:
        _RUNS_HERE.clear()
    _RUNS_HERE[key] = (node, ok)
    return ok


_RUNS_HERE: dict[tuple[int, bool, int, str | None, str], tuple[Node, bool]] = {}


def fraction_now(
    step: Step, v: Variant, free: Capacity, node: Node, tenants: Sequence[Tenant]
) -> tuple[Status, Slot | None, str]:
    """For a share or MIG variant: whether it fits now (CPUs, memory and a tenancy of one
    GPU, ``plan.sharing.tenancy``), the slot it takes and why that one."""
    r = v.gpu_request
    pool = qualifying_gpus(v, gpu_pool(v, node.gpus))
    if r.kind == "mig" and r.mig is not None:
        slot, why = mig_slot(pool, tenants, r.mig, r.memory)
    else:
        slot, why = share_slot(pool, tenants, node.gpu_sharing, r.share or 0.0)
    now = check(v, Capacity(free.cpus, free.memory, (slot.gpu,) if slot else ()), where="this machine", now=True)
    if slot is None and (now.ok or now.code.startswith("gpus")):
        return Status("gpus_busy", f"waiting for {r.describe()}: {why}"), None, why
    return now, slot, why


def variant_order(step: Step) -> list[str]:
    """GPU variants first (most whole GPUs first, then a share or MIG instance), then the
    others in file order."""
    variants = step.resolved_variants()
    return sorted(variants, key=lambda v: (-variants[v].resources.gpus, not variants[v].uses_gpu))


class GreedyChooser:
    """Prefer a GPU variant whose GPUs are free now; fall back to a CPU variant.

    ``tenants``: the live leases of this machine's GPUs (``plan.sharing.tenancy``), which a share
    or MIG variant is placed among; whole GPUs come from ``free.gpus``."""

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "", tenants: Sequence[Tenant] = ()) -> Choice:
        variants = whole_gang(step)
        total = Capacity.of(node)
        rejected: list[tuple[str, str]] = []
        could_later = False
        for name in variant_order(step):
            v = variants[name]
            never = _fits_here(step, v, total, node, now=False)
            if not never.ok:
                rejected.append((name, never.reason))
                continue
            fraction = fraction_never(v, node)
            if fraction is not None:
                rejected.append((name, fraction))
                continue
            if step.gang is not None and take_gpus(step, v, total, node) is None:
                rejected.append(
                    (
                        name,
                        f"no {v.resources.gpus // step.replicas} GPUs of this machine meet "
                        f"gpu_link: {step.gang.gpu_link}",
                    )
                )
                continue
            if v.gpu_request.kind in ("share", "mig"):
                now, slot, why_slot = fraction_now(step, v, free, node, tenants)
                if not now.ok or slot is None:
                    rejected.append((name, now.reason))
                    could_later = True
                    continue
                return Choice(
                    name, (slot.gpu,), False, f"{name}: {slot.describe()} ({why_slot})", tuple(rejected), slot
                )
            now = _fits_here(step, v, free, node, now=True)
            if not now.ok:
                rejected.append((name, now.reason))
                could_later = True
                continue
            taken = take_gpus(step, v, free, node)
            if taken is None:
                rejected.append(
                    (name, f"waiting for GPUs joined as gpu_link asks ({step.gang.gpu_link if step.gang else 'any'})")
                )
                could_later = True
                continue
            gpus = taken
            if v.resources.gpus:
                why = f"{name}: {len(gpus)} qualifying GPU(s) free"
            elif any(variants[r].uses_gpu for r, _ in rejected):
                when = "now (GPUs busy)" if could_later else "on this machine"
                why = f"{name}: chosen because no GPU variant can run {when}"
            else:
                why = f"{name}: fits"
            return Choice(name, gpus, False, why, tuple(rejected))
        return Choice(None, (), could_later, "", tuple(rejected))


class PlanChooser:
    """Follow a plan's variant per step (the planner weighed run times and GPUs); wait
    while the planned variant's resources are busy instead of switching, so the plan's
    GPU choices hold.  Steps the plan does not cover fall back to ``GreedyChooser``."""

    def __init__(self, variants: Mapping[str, str], reasons: Mapping[str, str] | None = None) -> None:
        self.variants = dict(variants)
        self.reasons = dict(reasons or {})
        self.fallback = GreedyChooser()

    def inherit(self, parent: str, items: Sequence[str]) -> None:
        """Items of a fan-out expanded at run time take their step's planned variant."""
        for item in items:
            if parent in self.variants:
                self.variants[item] = self.variants[parent]
            if parent in self.reasons:
                self.reasons[item] = self.reasons[parent]

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "", tenants: Sequence[Tenant] = ()) -> Choice:
        wanted = self.variants.get(name)
        variants = whole_gang(step)
        if wanted not in variants:
            return self.fallback.choose(step, node, free, name, tenants)
        v = variants[wanted]
        never = _fits_here(step, v, Capacity.of(node), node, now=False)
        fraction = fraction_never(v, node) if never.ok else None
        if not never.ok or fraction is not None:
            choice = self.fallback.choose(step, node, free, name, tenants)
            return replace(choice, why=f"planned {wanted} cannot run here ({fraction or never.reason}); {choice.why}")
        others = tuple((o, f"the plan chose {wanted}") for o in variants if o != wanted)
        if v.gpu_request.kind in ("share", "mig"):
            status, slot, why_slot = fraction_now(step, v, free, node, tenants)
            if not status.ok or slot is None:
                return Choice(None, (), True, "", ((wanted, status.reason), *others))
            why = f"{wanted}: planned, {slot.describe()} ({why_slot})"
            if name in self.reasons:
                return Choice(wanted, (slot.gpu,), False, f"{why}; {self.reasons[name]}", slot=slot)
            return Choice(wanted, (slot.gpu,), False, why, others, slot)
        now = _fits_here(step, v, free, node, now=True)
        if not now.ok:
            return Choice(None, (), True, "", ((wanted, now.reason), *others))
        taken = take_gpus(step, v, free, node)
        if taken is None:
            return Choice(None, (), True, "", ((wanted, "waiting for GPUs joined as gpu_link asks"), *others))
        gpus = taken
        if name in self.reasons:  # the plan's own explanation already covers the other variants
            return Choice(wanted, gpus, False, f"{wanted}: planned ({self.reasons[name]})")
        return Choice(wanted, gpus, False, f"{wanted}: planned", others)


def feasibility_problems(loaded: LoadedWorkflow, node: Node) -> list[Problem]:
    """For ``hetflow validate`` and before a run: a variant that can never run here is a
    note when another variant of the step fits, an error when none does (unless the
    step is optional)."""
    workflow, file = loaded.workflow, loaded.file
    problems: list[Problem] = []
    total = Capacity.of(node)
    # A variant's verdict depends on nothing but its own fields and its step's gang: each
    # distinct one is judged once (10,000 fan-out items ask about a handful).
    seen: dict[tuple[str, str | None], Status] = {}
    for sname, step in workflow.steps.items():
        variants = whole_gang(step)
        gang = None if step.gang is None else step.gang.model_dump_json()
        bad: dict[str, Status] = {}
        for n, v in variants.items():
            key = (v.model_dump_json(), gang)
            if key not in seen:
                seen[key] = _never_here(step, v, total, node)
            bad[n] = seen[key]
        fitting = [n for n, s in bad.items() if s.ok]
        for vname, status in bad.items():
            if status.ok:
                continue
            label = f"step {sname!r}{_item_values(loaded, sname)}" + (f" variant {vname!r}" if step.variants else "")
            loc = ("steps", sname, "variants", vname, "resources") if step.variants else ("steps", sname, "resources")
            if fitting:
                sev, tail = "note", f"; variant {fitting[0]!r} will be used here"
            elif step.optional:
                sev, tail = "note", "; the step is optional and will be skipped"
            elif status.code.startswith("gang"):
                sev, tail = "error", ""  # the reason says what to change
            else:
                sev, tail = "error", "; lower the request or run on a machine that has it"
            problems.append(Problem(file, loaded.line(*loc), f"{label} {status.reason}{tail}", sev))
    return problems


def _item_values(loaded: LoadedWorkflow, name: str) -> str:
    """`` [sample=a]`` for an item of a fan-out whose list the file gave (its values, as
    ``show``'s ITEM column writes them), else nothing: ``qc.0`` alone says only its index."""
    parent = fanout_parent(name)
    items = loaded.fanouts.get(parent) if parent is not None else None
    index = int(name.rpartition(".")[2]) if items is not None else -1
    return f" [{item_text(items[index])}]" if items is not None and 0 <= index < len(items) else ""

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
from hetflow.plan.filters import Capacity, Status, check, qualifying_gpus
from hetflow.plan.gpupick import pick_gpus
from hetflow.spec import LoadedWorkflow, Step, Variant


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

    def explain(self) -> str:
        parts = [self.why] if self.why else []
        parts += [f"{v}: {r}" for v, r in self.rejected]
        return "; ".join(parts)


class VariantChooser(Protocol):
    def choose(self, step: Step, node: Node, free: Capacity, name: str = "") -> Choice: ...


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


def _fits_here(step: Step, v: Variant, cap: Capacity, node: Node, *, now: bool) -> Status:
    """``check`` for a step or a whole gang on this one machine, worded for the gang."""
    gang = step.gang
    if gang is not None and gang.replicas > 1 and gang.per_node is not None and gang.per_node < gang.replicas:
        return Status(
            "gang-per-node",
            f"per_node: {gang.per_node} spreads the gang's {gang.replicas} replicas over "
            f"{gang.nodes_at_least()} nodes, and this machine is one; run it on a cluster backend or drop per_node",
        )
    st = check(v, cap, where="this machine", now=now, labels=None if now else node.labels)
    if st.ok or gang is None or gang.replicas <= 1:
        return st
    return Status(st.code, f"the gang's {gang.replicas} replicas together: {st.reason}")


def take_gpus(step: Step, v: Variant, free: Capacity, node: Node) -> tuple[Gpu, ...] | None:
    """The free GPUs the step gets, topology first (``plan.gpupick``): one set per replica;
    None when no sets of free GPUs meet the gang's ``gpu_link``."""
    n = step.replicas
    per = v.resources.gpus // n if n > 1 else v.resources.gpus
    need = step.gang.gpu_link if step.gang is not None else "any"
    picked = pick_gpus(node, qualifying_gpus(v, free.gpus), n, per, need)
    return None if picked is None else tuple(picked)


def variant_order(step: Step) -> list[str]:
    """GPU variants first (most GPUs first), then the others in file order."""
    variants = step.resolved_variants()
    return sorted(variants, key=lambda v: -variants[v].resources.gpus)


class GreedyChooser:
    """Prefer a GPU variant whose GPUs are free now; fall back to a CPU variant."""

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "") -> Choice:
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
            if step.gang is not None and take_gpus(step, v, total, node) is None:
                rejected.append(
                    (
                        name,
                        f"no {v.resources.gpus // step.replicas} GPUs of this machine meet "
                        f"gpu_link: {step.gang.gpu_link}",
                    )
                )
                continue
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
            elif any(variants[r].resources.gpus for r, _ in rejected):
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

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "") -> Choice:
        wanted = self.variants.get(name)
        variants = whole_gang(step)
        if wanted not in variants:
            return self.fallback.choose(step, node, free, name)
        v = variants[wanted]
        never = _fits_here(step, v, Capacity.of(node), node, now=False)
        if not never.ok:
            choice = self.fallback.choose(step, node, free, name)
            return replace(choice, why=f"planned {wanted} cannot run here ({never.reason}); {choice.why}")
        others = tuple((o, f"the plan chose {wanted}") for o in variants if o != wanted)
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
    for sname, step in workflow.steps.items():
        variants = whole_gang(step)
        bad = {n: _fits_here(step, v, total, node, now=False) for n, v in variants.items()}
        fitting = [n for n, s in bad.items() if s.ok]
        for vname, status in bad.items():
            if status.ok:
                continue
            label = f"step {sname!r}" + (f" variant {vname!r}" if step.variants else "")
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

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
from hetflow.plan.filters import Capacity, check, qualifying_gpus
from hetflow.spec import LoadedWorkflow, Step


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


def variant_order(step: Step) -> list[str]:
    """GPU variants first (most GPUs first), then the others in file order."""
    variants = step.resolved_variants()
    return sorted(variants, key=lambda v: -variants[v].resources.gpus)


class GreedyChooser:
    """Prefer a GPU variant whose GPUs are free now; fall back to a CPU variant."""

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "") -> Choice:
        variants = step.resolved_variants()
        total = Capacity.of(node)
        rejected: list[tuple[str, str]] = []
        could_later = False
        for name in variant_order(step):
            v = variants[name]
            never = check(v, total, where="this machine", now=False, labels=node.labels)
            if not never.ok:
                rejected.append((name, never.reason))
                continue
            now = check(v, free, where="this machine", now=True)
            if not now.ok:
                rejected.append((name, now.reason))
                could_later = True
                continue
            gpus = tuple(qualifying_gpus(v, free.gpus)[: v.resources.gpus])
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
        variants = step.resolved_variants()
        if wanted not in variants:
            return self.fallback.choose(step, node, free, name)
        v = variants[wanted]
        never = check(v, Capacity.of(node), where="this machine", now=False, labels=node.labels)
        if not never.ok:
            choice = self.fallback.choose(step, node, free, name)
            return replace(choice, why=f"planned {wanted} cannot run here ({never.reason}); {choice.why}")
        others = tuple((o, f"the plan chose {wanted}") for o in variants if o != wanted)
        now = check(v, free, where="this machine", now=True)
        if not now.ok:
            return Choice(None, (), True, "", ((wanted, now.reason), *others))
        gpus = tuple(qualifying_gpus(v, free.gpus)[: v.resources.gpus])
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
        variants = step.resolved_variants()
        bad = {n: check(v, total, where="this machine", now=False, labels=node.labels) for n, v in variants.items()}
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
            else:
                sev, tail = "error", "; lower the request or run on a machine that has it"
            problems.append(Problem(file, loaded.line(*loc), f"{label} {status.reason}{tail}", sev))
    return problems

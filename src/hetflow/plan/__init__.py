"""Where and when: pure functions of (workflow, machines, profile, seed); no I/O.

instance    the planning problem and its answer as frozen values (Instance, Plan)
feasible/   can a variant run there: filters (one family of feasibility filters, Filter
            plugins over a NodeView: a node class of a cluster file, or this machine,
            total or free now), images (the image-compatibility filter), gangs
build       workflow + node classes -> Instance (filters, estimates, edge sizes)
model/      one capacity model: fit (the one predicate, fits(NodeState, Demand) ->
            reasons, asked by the timeline, check_plan, the simulations, the local leases
            and the Kubernetes admission) and machine (a machine now: the baselines' and
            the simulator's)
search/     the planner: compiled (the indexed instance), timeline (one machine's use
            over time), listpass (one pass) + score (score plugins), heuristic
            (HEFT-family list scheduling with variant choice and local search), exact
            (CP-SAT)
baselines/  what the planner is measured against: eventsim (machines, release, one
            EventLoop), firstfit, kubesched (kube-scheduler's default scores),
            backfill (Slurm-style EASY backfill)
bounds/     lower bounds on the makespan: lower (closed form and strong), lpbound (LP)
sharing/    slices of GPUs: gpuload (a GPU's tenants over time), sharecheck
            (check_plan's rules for shares and MIG), tenancy (the local runner's
            GPU leases); search/sharewhy answers --explain for shared vs whole
sizing/     cluster and catalog files (cluster), the virtual-cluster Pareto search
            (virtual, over clusterpoint values), the anchors its saving is quoted
            against (anchors), request right-sizing (rightsize)
explanation why every other (variant, class) lost, as frozen values report renders
onemachine/ planning for the local runner: local (the plan for this machine), choose
            (variant choice), gpupick (which free GPUs), steer (``--variant``)
checking/   validate (check_plan: a plan keeps capacity, GPUs and precedence) and
            simulator (the discrete-event simulator)
gpuspec     a node type's GPUs (vendor, sharing, MIG layout, speed table); cost,
            profile, stored (a Plan as JSON, kept with the run): the rest

Names are loaded on first use (as in ``hetflow.execute``), so ``hetflow run`` does not pay
for the cluster files, the virtual-cluster search or CP-SAT when it plans for one machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.plan.build import DEFAULT_ESTIMATE, build_instance
    from hetflow.plan.checking.simulator import simulate
    from hetflow.plan.cost import gpu_amount
    from hetflow.plan.explanation import explain
    from hetflow.plan.feasible.filters import Capacity, check, first_class_rejection, vendor_ok
    from hetflow.plan.feasible.images import Resolver, class_node, image_check
    from hetflow.plan.gpuspec import GPU_SPEEDS, GpuSpec
    from hetflow.plan.instance import GpuKind, Instance, MachineClass, Placement, Plan
    from hetflow.plan.model.fit import Demand, NodeState, fits
    from hetflow.plan.onemachine.choose import (
        GreedyChooser,
        PlanChooser,
        VariantChooser,
        can_run_here,
        feasibility_problems,
    )
    from hetflow.plan.onemachine.local import plan_local
    from hetflow.plan.onemachine.steer import Steer, parse_steer, steer_workflow
    from hetflow.plan.profile import PROFILE_KEEP, SharedSample, learn, learn_slowdown, profile_for, with_slowdown
    from hetflow.plan.search.compiled import timeslice_runtime
    from hetflow.plan.search.exact import plan_exact
    from hetflow.plan.search.heuristic import plan_heuristic
    from hetflow.plan.sharing.tenancy import Slot, Tenant, admits
    from hetflow.plan.sizing.cluster import Cluster, load_catalog, load_cluster
    from hetflow.plan.sizing.clusterpoint import ClusterPoint
    from hetflow.plan.sizing.rightsize import OVER_ASK, SIZING_KEEP, Suggestion, UsageSample, suggest_sizes
    from hetflow.plan.sizing.virtual import plan_virtual_cluster
    from hetflow.plan.stored import machine_class_from_dict, machine_class_to_dict, plan_from_dict, plan_to_dict

_WHERE: dict[str, tuple[str, ...]] = {
    "build": (
        "DEFAULT_ESTIMATE",
        "admits",
        "build_instance",
    ),
    "onemachine.choose": (
        "GpuKind",
        "GpuSpec",
        "GreedyChooser",
        "PlanChooser",
        "VariantChooser",
        "can_run_here",
        "feasibility_problems",
    ),
    "sizing.cluster": (
        "Cluster",
        "load_catalog",
        "load_cluster",
    ),
    "sizing.clusterpoint": ("ClusterPoint",),
    "search.compiled": ("timeslice_runtime",),
    "cost": ("gpu_amount",),
    "search.exact": ("plan_exact",),
    "explanation": ("explain",),
    "feasible.filters": (
        "Capacity",
        "check",
        "first_class_rejection",
        "vendor_ok",
    ),
    "gpuspec": (
        "GPU_SPEEDS",
        "GpuSpec",
    ),
    "search.heuristic": ("plan_heuristic",),
    "feasible.images": (
        "Resolver",
        "SharedSample",
        "class_node",
        "image_check",
    ),
    "instance": (
        "GpuKind",
        "Instance",
        "MachineClass",
        "Placement",
        "Plan",
    ),
    "onemachine.local": ("plan_local",),
    "model.fit": (
        "Demand",
        "NodeState",
        "fits",
    ),
    "profile": (
        "PROFILE_KEEP",
        "SharedSample",
        "learn",
        "learn_slowdown",
        "profile_for",
        "with_slowdown",
    ),
    "sizing.rightsize": (
        "OVER_ASK",
        "SIZING_KEEP",
        "Suggestion",
        "UsageSample",
        "suggest_sizes",
    ),
    "checking.simulator": ("simulate",),
    "onemachine.steer": ("Steer", "parse_steer", "steer_workflow"),
    "stored": (
        "machine_class_from_dict",
        "machine_class_to_dict",
        "plan_from_dict",
        "plan_to_dict",
    ),
    "sharing.tenancy": (
        "Slot",
        "Tenant",
        "admits",
    ),
    "sizing.virtual": ("plan_virtual_cluster",),
}
__all__ = [
    "DEFAULT_ESTIMATE",
    "GPU_SPEEDS",
    "OVER_ASK",
    "PROFILE_KEEP",
    "SIZING_KEEP",
    "Capacity",
    "Cluster",
    "ClusterPoint",
    "Demand",
    "GpuKind",
    "GpuSpec",
    "GreedyChooser",
    "Instance",
    "MachineClass",
    "NodeState",
    "Placement",
    "Plan",
    "PlanChooser",
    "Resolver",
    "SharedSample",
    "Slot",
    "Steer",
    "Suggestion",
    "Tenant",
    "UsageSample",
    "VariantChooser",
    "admits",
    "build_instance",
    "can_run_here",
    "check",
    "class_node",
    "explain",
    "feasibility_problems",
    "first_class_rejection",
    "fits",
    "gpu_amount",
    "image_check",
    "learn",
    "learn_slowdown",
    "load_catalog",
    "load_cluster",
    "machine_class_from_dict",
    "machine_class_to_dict",
    "parse_steer",
    "plan_exact",
    "plan_from_dict",
    "plan_heuristic",
    "plan_local",
    "plan_to_dict",
    "plan_virtual_cluster",
    "profile_for",
    "simulate",
    "steer_workflow",
    "suggest_sizes",
    "timeslice_runtime",
    "vendor_ok",
    "with_slowdown",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)

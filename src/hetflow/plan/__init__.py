"""Where and when: pure functions of (workflow, machines, profile, seed); no I/O.

instance    the planning problem and its answer as frozen values (Instance, Plan)
filters     one family of feasibility filters (Filter plugins over a NodeView: a
            node class of a cluster file, or this machine, total or free now)
score       score plugins: how a list pass ranks a task's candidate placements
build       workflow + node classes -> Instance (filters, estimates, edge sizes)
heuristic   HEFT-family list scheduling with variant choice and local search
            (listpass: one pass; compiled: the indexed instance; timeline: one
            machine's use over time); exact: CP-SAT
explanation why every other (variant, class) lost, as frozen values report renders
choose      variant choice for the local runner (tenancy: who holds which part of its
            GPUs); local: the plan for this machine
cluster     cluster and catalog files (gpuspec: a node type's GPUs: vendor, sharing,
            MIG layout, speed table); virtual: the virtual-cluster Pareto search,
            anchors: the single-type and two-type clusters its saving is quoted against;
            clusterpoint: one candidate cluster, planned (what both exchange)
validate    check_plan: a plan keeps capacity, GPUs and precedence (sharecheck: GPU
            shares within the sharing policy and slowdown model, MIG instances);
            gpuload: one GPU's shared tenants over time; sharewhy: shared vs whole
            for --explain
rightsize   suggestions for steps asking far more memory or CPUs than they used
capacity    one machine's capacity now (capacity.Machine: the simulator's and the
            baselines') and the one GPU-sharing admission rule (sharing_refusal) that
            the planner, validator, simulator and local leases all ask
simulator   the discrete-event simulator; cost, bounds, profile, images,
            stored (a Plan as JSON, kept with the run): the rest
baseline    what the planner is measured against: first fit (baseline), kube-scheduler's
            default scores (kubesched), Slurm-style EASY backfill (backfill); eventsim:
            their machines, DAG release and one EventLoop

Names are loaded on first use (as in ``hetflow.execute``), so ``hetflow run`` does not pay
for the cluster files, the virtual-cluster search or CP-SAT when it plans for one machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.plan.build import DEFAULT_ESTIMATE, build_instance
    from hetflow.plan.choose import GreedyChooser, PlanChooser, VariantChooser, can_run_here, feasibility_problems
    from hetflow.plan.cluster import Cluster, load_catalog, load_cluster
    from hetflow.plan.clusterpoint import ClusterPoint
    from hetflow.plan.compiled import timeslice_runtime
    from hetflow.plan.cost import gpu_amount
    from hetflow.plan.exact import plan_exact
    from hetflow.plan.explanation import explain
    from hetflow.plan.filters import Capacity, check, first_class_rejection, vendor_ok
    from hetflow.plan.gpuspec import GPU_SPEEDS, GpuSpec
    from hetflow.plan.heuristic import plan_heuristic
    from hetflow.plan.images import Resolver, class_node, image_check
    from hetflow.plan.instance import GpuKind, Instance, MachineClass, Placement, Plan
    from hetflow.plan.local import plan_local
    from hetflow.plan.profile import SharedSample, learn, learn_slowdown, profile_for, with_slowdown
    from hetflow.plan.rightsize import OVER_ASK, Suggestion, UsageSample, suggest_sizes
    from hetflow.plan.simulator import simulate
    from hetflow.plan.steer import Steer, parse_steer, steer_workflow
    from hetflow.plan.stored import machine_class_from_dict, machine_class_to_dict, plan_from_dict, plan_to_dict
    from hetflow.plan.tenancy import Slot, Tenant, admits
    from hetflow.plan.virtual import plan_virtual_cluster

_WHERE: dict[str, tuple[str, ...]] = {
    "build": (
        "DEFAULT_ESTIMATE",
        "admits",
        "build_instance",
    ),
    "choose": (
        "GpuKind",
        "GpuSpec",
        "GreedyChooser",
        "PlanChooser",
        "VariantChooser",
        "can_run_here",
        "feasibility_problems",
    ),
    "cluster": (
        "Cluster",
        "load_catalog",
        "load_cluster",
    ),
    "clusterpoint": ("ClusterPoint",),
    "compiled": ("timeslice_runtime",),
    "cost": ("gpu_amount",),
    "exact": ("plan_exact",),
    "explanation": ("explain",),
    "filters": (
        "Capacity",
        "check",
        "first_class_rejection",
        "vendor_ok",
    ),
    "gpuspec": (
        "GPU_SPEEDS",
        "GpuSpec",
    ),
    "heuristic": ("plan_heuristic",),
    "images": (
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
    "local": ("plan_local",),
    "profile": (
        "SharedSample",
        "learn",
        "learn_slowdown",
        "profile_for",
        "with_slowdown",
    ),
    "rightsize": (
        "OVER_ASK",
        "Suggestion",
        "UsageSample",
        "suggest_sizes",
    ),
    "simulator": ("simulate",),
    "steer": ("Steer", "parse_steer", "steer_workflow"),
    "stored": (
        "machine_class_from_dict",
        "machine_class_to_dict",
        "plan_from_dict",
        "plan_to_dict",
    ),
    "tenancy": (
        "Slot",
        "Tenant",
        "admits",
    ),
    "virtual": ("plan_virtual_cluster",),
}
__all__ = [
    "DEFAULT_ESTIMATE",
    "GPU_SPEEDS",
    "OVER_ASK",
    "Capacity",
    "Cluster",
    "ClusterPoint",
    "GpuKind",
    "GpuSpec",
    "GreedyChooser",
    "Instance",
    "MachineClass",
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

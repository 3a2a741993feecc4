"""Where a step may run: the planned node class as node affinity (GPU Feature Discovery and
node-feature-discovery labels), and the plan's reasons as annotations."""

from __future__ import annotations

import math

import archspec.cpu

from hetflow.export.kubernetes._accel import gpu_expressions
from hetflow.export.kubernetes._common import GOARCH, NFD_CPUID, NFD_FLAGS, Obj
from hetflow.kube import ARCH_LABEL, GFD_CC_MAJOR, GFD_CC_MINOR, GFD_MEMORY, GFD_PRODUCT, label_value
from hetflow.plan import DEFAULT_ESTIMATE, MachineClass, Placement, Plan, first_class_rejection
from hetflow.spec import Step, Variant


def gfd_product(model: str) -> str:
    """A GPU product name as GPU Feature Discovery labels it: blanks become '-' (GFD
    joins the words with dashes), and characters a label value cannot hold too."""
    return label_value("-".join(model.split()))


def cpu_expressions(microarchitecture: str) -> list[Obj]:
    """Node requirements for a class's CPU: ``kubernetes.io/arch`` from archspec's family
    and the NFD cpuid label of every vector extension the micro-architecture has.  A
    name archspec does not know gives none (the planner's image check decides then)."""
    target = archspec.cpu.TARGETS.get(microarchitecture)
    if target is None:
        return []
    out: list[Obj] = []
    arch = GOARCH.get(str(target.family))
    if arch:
        out.append({"key": ARCH_LABEL, "operator": "In", "values": [arch]})
    flags = sorted({NFD_FLAGS[f] for f in target.features if f in NFD_FLAGS})
    out += [{"key": NFD_CPUID + f, "operator": "In", "values": ["true"]} for f in flags]
    return out


def node_affinity(variant: Variant, cls: MachineClass) -> Obj:
    """requiredDuringScheduling terms that keep the pod on nodes like the planned class.

    Terms are ORed and expressions in a term ANDed (Kubernetes' NodeSelector), so a
    compute capability of at least M.m becomes two terms: major > M, or major = M and
    minor >= m; every other requirement is repeated in both."""
    base = cpu_expressions(cls.microarchitecture)
    base += [{"key": k, "operator": "In", "values": [v]} for k, v in cls.labels]
    req = variant.gpu_request
    nvidia = cls.gpu_vendor == "nvidia" and req.kind != "mig"  # GFD's memory and CC labels apply
    if cls.gpus:
        base += gpu_expressions(req, cls)  # product, sharing, MIG layout; AMD/Intel labels (_accel)
    else:
        # The plan kept this step off GPU nodes: GFD runs on (and labels) GPU nodes only.
        base.append({"key": GFD_PRODUCT, "operator": "DoesNotExist"})
    terms: list[list[Obj]] = [[]]
    if nvidia and variant.uses_gpu and variant.gpu is not None:
        if variant.gpu.min_memory > 0:
            mib = math.ceil(variant.gpu.min_memory / 1024**2)
            base.append({"key": GFD_MEMORY, "operator": "Gt", "values": [str(mib - 1)]})
        major, minor = variant.gpu.cc_tuple
        if minor:
            terms = [
                [{"key": GFD_CC_MAJOR, "operator": "Gt", "values": [str(major)]}],
                [
                    {"key": GFD_CC_MAJOR, "operator": "In", "values": [str(major)]},
                    {"key": GFD_CC_MINOR, "operator": "Gt", "values": [str(minor - 1)]},
                ],
            ]
        elif major:
            terms = [[{"key": GFD_CC_MAJOR, "operator": "Gt", "values": [str(major - 1)]}]]
    return {"nodeSelectorTerms": [{"matchExpressions": base + extra} for extra in terms]}


def plan_note(p: Placement, plan: Plan) -> str:
    return (
        f"{p.variant} on {p.machine_class} ({p.machine}), planned {p.start:.1f}s to {p.finish:.1f}s "
        f"by {plan.algorithm} ({plan.objective})"
    )


def reasons(step: Step, p: Placement, cls: MachineClass) -> str:
    """Why not the step's other variants on the planned class, in a line: the filter that
    rejects one, or its estimated run time there against the plan's."""
    chosen = p.finish - p.start
    out = []
    for vname, v in step.resolved_variants().items():
        if vname == p.variant:
            continue
        why = first_class_rejection(v, cls).reason or None
        if why is None:
            speed = cls.gpu_speed if v.uses_gpu else cls.speed
            runtime = (DEFAULT_ESTIMATE if v.estimate is None else v.estimate) / speed
            why = f"est. {runtime:.3g}s here vs {chosen:.3g}s planned"
        out.append(f"{vname}: {why}")
    text = "; ".join(out) or "the step's only variant"
    return text if len(text) <= 300 else text[:297] + "..."

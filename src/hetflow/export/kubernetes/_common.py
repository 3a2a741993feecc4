"""What the exporter's modules share: object labels and names, the run's context, and the
security settings and volumes every pod of a run gets."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetflow.execute import LABEL_RUN, RunPaths
from hetflow.spec import Workflow

Obj = dict[str, Any]
ImageFor = Callable[[str, str], str]  # (image as written, node class) -> reference to run

LABEL_WORKFLOW = "hetflow.workflow"
LABEL_VARIANT = "hetflow.variant"
LABEL_CLASS = "hetflow.node-class"
LABEL_ROLE = "hetflow.role"  # step | driver
LABEL_NETWORK = "hetflow.network"  # none | allowed: what the NetworkPolicy selects on
ANNOTATION_PLAN = "hetflow.plan"
ANNOTATION_REASONS = "hetflow.reasons"
ANNOTATION_IMAGE = "hetflow.image"  # the image as written, when it runs pinned
MANAGED_BY = {"app.kubernetes.io/managed-by": "hetflow"}

# The NVIDIA device plugin's resource, and GPU Feature Discovery's labels (GFD README,
# "Generated Labels"): the product name with blanks as dashes, memory in MiB, and the
# compute capability split in two integers.  Under time-slicing with renameByDefault
# the product gets a "-SHARED" suffix, so both spellings are accepted.
GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
ARCH_LABEL = "kubernetes.io/arch"  # well-known label, GOARCH spelling
NFD_CPUID = "feature.node.kubernetes.io/cpu-cpuid."

# archspec feature (Linux /proc/cpuinfo spelling) -> the cpuid flag name NFD publishes
# (klauspost/cpuid spelling; NFD docs, "Feature labels", X86 and Arm64 CPUID flags).
# Only vector extensions, which is what a -march build breaks on.  The x86-64-v2 flags
# (SSE4.2, POPCNT, ...) and BMI1/2, F16C, LZCNT are on NFD's default attributeBlacklist
# (source/cpu/cpu.go) and never appear as labels, so requiring them would match no node.
# NFD spells a flag as the /proc/cpuinfo name without '_', upper case, except FMA3.
NFD_FLAGS: Mapping[str, str] = {
    **{
        f: f.replace("_", "").upper()
        for f in (
            "avx", "avx2", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512ifma",
            "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bf16", "avx512_bitalg",
            "avx512_vpopcntdq", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "sve",
        )
    },
    "fma": "FMA3",
}  # fmt: skip
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "riscv64": "riscv64", "s390x": "s390x"}

# Needs POSIX sh, coreutils and kubectl (registry.k8s.io/kubectl has no shell).
DEFAULT_TOOLS_IMAGE = "docker.io/alpine/k8s:1.33.4"
WORK_MOUNT = "/work"
TMP_SIZE = "256Mi"  # as the local runner's tmpfs (engine.ContainerSpec.tmpfs_size)
STAGING_ATTEMPT = 1  # Job retries reuse one staging directory; each pod empties it first
DRIVER_FAILED_EXIT = 3  # the driver's "a step failed" exit: fails its Job at once
RUN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?\Z")
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9_.-]{0,61})?[A-Za-z0-9])?\Z")
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# An extended resource's name: a domain prefix and a name (rdma/hca, nvidia.com/gpu).
RESOURCE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go)
QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?\Z")


@dataclass(frozen=True)
class Context:
    """What every object of one run shares."""

    workflow: Workflow
    run_id: str
    namespace: str | None
    uid: int
    gid: int
    claim: str
    tools: str

    @property
    def paths(self) -> RunPaths:
        return RunPaths(Path("runs") / self.run_id)  # relative: the claim's root is the base

    @property
    def driver(self) -> str:
        return f"hf-{self.run_id}"

    def meta(
        self, name: str, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
    ) -> Obj:
        out: Obj = {"name": name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        out["labels"] = {**MANAGED_BY, **(labels or {})}
        if annotations:
            out["annotations"] = dict(annotations)
        return out

    def run_labels(self, role: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_WORKFLOW: self.workflow.name, LABEL_ROLE: role}


def job_name(run_id: str, step: str, suffix: int = 0) -> str:
    """``hf-RUN-STEP``; a step name that is not a DNS label as it stands ('_', too long)
    gets a hash of the original, so two names never meet.  ``suffix``: characters to leave
    free for what is appended to the name (an Indexed Job's pods are JOB-INDEX)."""
    plain = f"hf-{run_id}-{step}"
    if DNS_LABEL_RE.match(plain) and len(plain) + suffix <= 63:
        return plain
    digest = hashlib.sha256(step.encode()).hexdigest()[:6]
    room = 63 - suffix - len(f"hf-{run_id}--{digest}")
    return f"hf-{run_id}-{step.replace('_', '-')[:room].strip('-')}-{digest}"


def label_value(text: str) -> str:
    """``text`` as a label value: other characters become '-', at most 63, alphanumeric ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def pod_security(ctx: Context) -> Obj:
    out: Obj = {"runAsUser": ctx.uid, "runAsGroup": ctx.gid}
    if ctx.uid != 0:
        out["runAsNonRoot"] = True
    # Makes a fresh block-backed volume writable by the submitter's group; ignored by
    # volumes that do not support ownership management (NFS).  OnRootMismatch skips the
    # recursive chown when the root already fits.
    out["fsGroup"] = ctx.gid
    out["fsGroupChangePolicy"] = "OnRootMismatch"
    out["seccompProfile"] = {"type": "RuntimeDefault"}
    return out


def container_security() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }


def small_resources() -> Obj:
    both = {"cpu": "100m", "memory": "128Mi"}
    return {"requests": dict(both), "limits": dict(both)}


def run_volumes(ctx: Context) -> list[Obj]:
    return [
        {"name": "work", "persistentVolumeClaim": {"claimName": ctx.claim}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
    ]

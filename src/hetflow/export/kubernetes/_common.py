"""What the exporter's modules share: the run's context, the volumes every pod of a run
gets, NFD's CPU labels; Kubernetes' own names come from ``hetflow.kube``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetflow.execute import RunPaths
from hetflow.kube import LABEL_ROLE, LABEL_RUN, LABEL_WORKFLOW, MANAGED_BY
from hetflow.spec import Workflow

Obj = dict[str, Any]
ImageFor = Callable[[str, str], str]  # (image as written, node class) -> reference to run

# Label keys, resource names, GPU labellers' labels, pod security and the name rule are
# Kubernetes' vocabulary, shared with the live backend: ``hetflow.kube``.
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


def small_resources() -> Obj:
    both = {"cpu": "100m", "memory": "128Mi"}
    return {"requests": dict(both), "limits": dict(both)}


def run_volumes(ctx: Context) -> list[Obj]:
    return [
        {"name": "work", "persistentVolumeClaim": {"claimName": ctx.claim}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
    ]

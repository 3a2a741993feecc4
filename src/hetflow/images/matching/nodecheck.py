"""Checking one build's ``Requirements`` against a node: pure helpers of ``match``.

``NodeFacts`` is what matching reads of a ``Node`` (CPU target and level, each vendor's
GPU architectures, the CUDA and ROCm versions); ``check_requirements`` judges a build
against them and says why, every reason when it does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.images.matching.gpumatch import check_rocm
from hetflow.images.matching.requirements import (
    Requirements,
    archspec_target,
    normalize_arch,
    parse_version,
    sm_name,
    version_text,
)
from hetflow.inventory import Node
from hetflow.inventory import x86_64_level as _archspec_level

# What each x86-64 psABI level adds that a message can name (x86-64 psABI, section 3.1.1
# "Processor Architecture"; level 1 is every x86-64 CPU).
_LEVEL_NEEDS = {2: "SSE4.2 and POPCNT", 3: "AVX2, FMA and BMI2", 4: "AVX-512"}


@dataclass(frozen=True)
class NodeFacts:
    os: str
    arch: str
    uarch: str
    level: int | None
    ccs: tuple[tuple[int, int], ...]
    cuda: tuple[int, int] | None
    cuda_unknown_why: str
    gpus: int = 0
    gfx: tuple[str, ...] = ()  # the AMD GPUs' gfx targets
    xe: tuple[str, ...] = ()  # the Intel GPUs' families
    rocm: tuple[int, int] | None = None
    rocm_unknown_why: str = ""

    @classmethod
    def of(cls, node: Node) -> NodeFacts:
        arch = normalize_arch(node.cpu.architecture)
        level = node.cpu.x86_64_level
        target = archspec_target(node.cpu.microarchitecture)
        if level is None and arch == "amd64":
            level = _archspec_level(target) if target is not None else 1
        nvidia = [g for g in node.gpus if g.vendor == "nvidia"]
        amd = [g for g in node.gpus if g.vendor == "amd"]
        cudas = [v for g in nvidia if g.cuda_version and (v := parse_version(g.cuda_version))]
        fakes = [g for g in nvidia if g.fake and not g.cuda_version]
        why = "fake GPU without cuda_version" if fakes else "the driver did not report it"
        rocms = [v for g in amd if g.rocm_version and (v := parse_version(g.rocm_version))]
        fake_rocm = any(g.fake for g in amd)
        return cls(
            os=node.os.lower(),
            arch=arch,
            uarch=node.cpu.microarchitecture,
            level=level,
            ccs=tuple(g.compute_capability_tuple for g in nvidia),
            cuda=max(cudas) if cudas else None,
            cuda_unknown_why=why,
            gpus=len(node.gpus),
            gfx=tuple(g.architecture for g in amd),
            xe=tuple(g.architecture for g in node.gpus if g.vendor == "intel"),
            rocm=min(rocms) if rocms else None,
            rocm_unknown_why="fake GPU without a ROCm version" if fake_rocm else "no /opt/rocm/.info/version",
        )


def _check_cpu(req: Requirements, facts: NodeFacts, ok: list[str], bad: list[str]) -> None:
    if req.x86_64_level and req.x86_64_level > 1:
        need = f"x86-64-v{req.x86_64_level}"
        if facts.arch != "amd64":
            bad.append(f"{need} build needs an x86-64 CPU; node is {facts.arch}")
        elif (facts.level or 1) < req.x86_64_level:
            have = f"x86-64-v{facts.level or 1} ({facts.uarch})"
            bad.append(f"{need} build needs {_LEVEL_NEEDS[req.x86_64_level]}; node is {have}")
        else:
            ok.append(f"{need}: node is x86-64-v{facts.level} ({facts.uarch})")
    if req.microarchitecture:
        name = req.microarchitecture
        wanted, have = archspec_target(name), archspec_target(facts.uarch)
        if name == facts.uarch:
            ok.append(f"cpu:{name}: node is {facts.uarch}")
        elif have is None:
            bad.append(f"{name} build needs a {name} CPU; node's {facts.uarch!r} is not known to archspec")
        elif have >= wanted:
            ok.append(f"cpu:{name}: node is {facts.uarch}, which runs {name} code")
        else:
            bad.append(f"{name} build needs {name} or a newer CPU of its line; node is {facts.uarch}")


def _nvidia_prefix(facts: NodeFacts) -> str:
    """``"NVIDIA "`` when the node has GPUs of other vendors (so "no GPU" would be wrong)."""
    return "NVIDIA " if facts.gpus else ""


def _check_gpu(req: Requirements, facts: NodeFacts, ok: list[str], bad: list[str]) -> None:
    if not req.needs_gpu:
        return
    if req.gpu_sm is not None:
        sm, need = sm_name(req.gpu_sm, req.gpu_sm_exact), version_text(req.gpu_sm)
        best = max(facts.ccs) if facts.ccs else None
        if best is None:
            bad.append(f"{sm} build needs a GPU with compute capability {need}; node has no {_nvidia_prefix(facts)}GPU")
        elif req.gpu_sm_exact and req.gpu_sm not in facts.ccs:
            # sm_90a code uses architecture-specific instructions with no PTX fallback.
            have = ", ".join(sorted({version_text(c) for c in facts.ccs}))
            bad.append(f"{sm} build runs only on compute capability {need}; node has {have}")
        elif not req.gpu_sm_exact and best < req.gpu_sm:
            bad.append(f"{sm} build needs compute capability {need}; node has {version_text(best)}")
        else:
            ok.append(f"gpu:{sm}: node has compute capability {version_text(best)}")
    elif req.gpu and req.cuda is None and req.gpu_vendor in (None, "nvidia"):
        count = facts.gpus if req.gpu_vendor is None else len(facts.ccs)
        what = "GPU" if req.gpu_vendor is None else "NVIDIA GPU"
        if count:
            ok.append(f"gpu: node has {count} {what}(s)")
        else:
            bad.append(f"{what} build needs a{'n' if what[0] == 'N' else ''} {what}; node has none")
    _check_other_vendors(req, facts, ok, bad)
    if req.cuda is not None:
        # Checked the way the NVIDIA container toolkit checks NVIDIA_REQUIRE_CUDA: the
        # CUDA version the driver supports (nvidia-smi's "CUDA Version") >= the build's.
        need = version_text(req.cuda)
        if not facts.ccs:
            if req.gpu_sm is None:  # else "needs a GPU ...; node has no GPU" is already said
                bad.append(
                    f"cuda>={need} build needs a driver supporting CUDA {need}; node has no {_nvidia_prefix(facts)}GPU"
                )
        elif facts.cuda is None:
            bad.append(
                f"cuda>={need} build needs a driver supporting CUDA {need}; "
                f"node's driver CUDA version is unknown ({facts.cuda_unknown_why})"
            )
        elif facts.cuda < req.cuda:
            have = version_text(facts.cuda)
            bad.append(f"cuda>={need} build needs a driver supporting CUDA {need}; node's driver supports {have}")
        else:
            ok.append(f"cuda>={need}: node's driver supports {version_text(facts.cuda)}")


def _check_other_vendors(req: Requirements, facts: NodeFacts, ok: list[str], bad: list[str]) -> None:
    """AMD (gfx targets, ROCm) and Intel (families) needs; see ``gpumatch``."""
    if req.gfx:
        label = "+".join(req.gfx)
        fits = sorted({t for t in facts.gfx if t in req.gfx})
        if fits:
            ok.append(f"gpu:{label}: node has {', '.join(fits)}")
        else:
            have = ", ".join(sorted(set(facts.gfx))) or "no AMD GPU"
            bad.append(f"{label} build has code for {', '.join(req.gfx)} only; node has {have}")
    if req.xe:
        label = "+".join(req.xe)
        fits = sorted({f for f in facts.xe if f in req.xe})
        if fits:
            ok.append(f"gpu:{label}: node has Intel {', '.join(fits)}")
        else:
            have = ", ".join(sorted(set(facts.xe))) or "no Intel GPU"
            bad.append(f"{label} build was compiled for Intel {', '.join(req.xe)} only; node has {have}")
    if req.rocm is not None:
        need = version_text(req.rocm)
        if not facts.gfx:
            if not req.gfx:
                bad.append(f"rocm>={need} build needs an AMD GPU; node has none")
        elif facts.rocm is None:
            bad.append(
                f"rocm>={need} build needs a ROCm driver near {need}; node's is unknown ({facts.rocm_unknown_why})"
            )
        elif (why := check_rocm(req.rocm, facts.rocm)) is not None:
            bad.append(why)
        else:
            ok.append(f"rocm>={need}: node's ROCm {version_text(facts.rocm)} is within 2 releases")
    if req.gpu_vendor in ("amd", "intel") and not (req.gfx or req.xe or req.rocm):
        count = len(facts.gfx) if req.gpu_vendor == "amd" else len(facts.xe)
        name = req.gpu_vendor.upper() if req.gpu_vendor == "amd" else "Intel"
        if count:
            ok.append(f"gpu:{req.gpu_vendor}: node has {count} {name} GPU(s)")
        else:
            bad.append(f"{name} GPU build needs an {name} GPU; node has none")


def check_requirements(req: Requirements, facts: NodeFacts) -> tuple[bool, tuple[str, ...]]:
    ok: list[str] = []
    bad: list[str] = []
    if req.not_image:
        bad.append(req.not_image)
    if req.os and req.os != facts.os:
        bad.append(f"{req.os} build; node runs {facts.os}")
    if req.architecture and req.architecture != facts.arch:
        bad.append(f"{req.architecture} build; node is {facts.arch}")
    else:
        # CPU checks only when the architecture fits: "arm64 build; node is amd64" says it all.
        _check_cpu(req, facts, ok, bad)
    _check_gpu(req, facts, ok, bad)
    bad.extend(req.unknown)
    if bad:
        return False, tuple(bad)
    if req.generic:
        ok.insert(0, "generic build: needs nothing beyond its platform")
    return True, tuple(ok)

"""Which build in an image index suits a node: pure functions, no I/O.

podman, docker and Kubernetes pull the first entry of an index whose os/architecture
match, whatever else the host has.  hetflow reads what each entry needs, checks it
against a ``Node`` and picks the most specific build that fits, explaining every
entry it turns down (STYLE.md habit 2: every rejection explains itself).

An entry's requirements come from three places, all optional and merged (the
strictest value wins):

``platform.architecture`` / ``platform.os``
    amd64 is x86_64 and arm64 is aarch64 (Go's GOARCH names vs the kernel's).
``platform.variant``
    containerd's convention: on amd64, ``v2``..``v4`` are the x86-64 psABI levels
    (``v1`` is every x86-64 CPU); on arm64, ``v8`` is the default and ``v8.N``/``v9.N``
    name archspec's ``armv8.Na`` targets.
``platform.features`` (RESERVED by image-index.md; MetaHub's and hetflow's use) and the
``org.hetflow.*`` annotations (which survive tools that drop ``features``):

    ==================  ===================================  =====================================
    feature             annotation                           the node needs
    ==================  ===================================  =====================================
    cpu:skylake_avx512  org.hetflow.cpu.microarchitecture    that archspec target or a descendant
    x86-64-v3           org.hetflow.cpu.level = 3            an x86-64 CPU at psABI level >= 3
    gpu:sm_80           org.hetflow.gpu.sm = 80              a GPU of compute capability >= 8.0
    cuda>=12.2          org.hetflow.cuda = 12.2              a driver supporting CUDA >= 12.2
    gpu                 (none)                               any GPU
    ==================  ===================================  =====================================

A feature hetflow does not know rejects its entry: ``features`` lists what a build
needs, and a need nobody can check cannot be promised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import archspec.cpu

from hetflow.images.oci import Descriptor, Index, Platform, is_index, platform_string
from hetflow.inventory import Node
from hetflow.inventory import x86_64_level as _archspec_level

__all__ = [
    "ANNOTATION_CUDA",
    "ANNOTATION_GPU_SM",
    "ANNOTATION_LEVEL",
    "ANNOTATION_MICROARCHITECTURE",
    "Requirements",
    "Resolution",
    "Verdict",
    "annotations_for",
    "check",
    "describe",
    "features_for",
    "normalize_arch",
    "parse_requirements",
    "platform_for",
    "requirements_of",
    "resolve",
]

ANNOTATION_MICROARCHITECTURE = "org.hetflow.cpu.microarchitecture"
ANNOTATION_LEVEL = "org.hetflow.cpu.level"
ANNOTATION_GPU_SM = "org.hetflow.gpu.sm"
ANNOTATION_CUDA = "org.hetflow.cuda"
# buildx marks provenance/SBOM entries this way (platform unknown/unknown).
_DOCKER_REFERENCE_TYPE = "vnd.docker.reference.type"

# Go's GOARCH names, which images use, for the kernel's `uname -m` names, which nodes use.
_ARCH_ALIASES = {
    "x86_64": "amd64", "x86-64": "amd64", "x64": "amd64", "amd64": "amd64",
    "aarch64": "arm64", "arm64": "arm64", "armv8": "arm64",
    "i386": "386", "i686": "386", "386": "386",
    "ppc64le": "ppc64le", "powerpc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}  # fmt: skip

# What each x86-64 psABI level adds that a message can name (x86-64 psABI, section 3.1.1
# "Processor Architecture"; level 1 is every x86-64 CPU).
_LEVEL_NEEDS = {2: "SSE4.2 and POPCNT", 3: "AVX2, FMA and BMI2", 4: "AVX-512"}

_CPU_FEATURE = re.compile(r"cpu[:-](?P<name>[a-z0-9_.\-]+)\Z")
_LEVEL = re.compile(r"(?:x86[-_]64[-_])?v(?P<level>[1-4])\Z")
_SM = re.compile(r"(?:gpu:)?sm_?(?P<major>\d+)(?P<minor>\d)(?P<exact>a?)\Z")
_SM_BARE = re.compile(r"(?P<major>\d+)(?P<minor>\d)(?P<exact>a?)\Z")
_NVCAP = re.compile(r"(?:gpu:|nvcap[:-]|cc)?(?P<major>\d+)\.(?P<minor>\d+)\Z")
_CUDA = re.compile(r"(?:cuda)?\s*(?:>=|:|-)?\s*(?P<major>\d+)(?:\.(?P<minor>\d+))?(?:\.\d+)?\Z")


def normalize_arch(name: str) -> str:
    """GOARCH spelling of an architecture: ``x86_64`` -> ``amd64``, ``aarch64`` -> ``arm64``."""
    key = name.strip().lower()
    return _ARCH_ALIASES.get(key, key)


def _target(name: str) -> Any:
    return archspec.cpu.TARGETS.get(name)


def _depth(name: str) -> int:
    """How far down archspec's tree a target is: 0 for a family root (x86_64)."""
    target = _target(name)
    return len(target.ancestors) if target is not None else 0


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", text)
    return (int(match[1]), int(match[2] or 0)) if match else None


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _sm(cc: tuple[int, int], exact: bool = False) -> str:
    return f"sm_{cc[0]}{cc[1]}{'a' if exact else ''}"


@dataclass(frozen=True)
class Requirements:
    """What one build needs of a node.  Empty fields need nothing.

    ``unknown`` holds features and values hetflow cannot check, and ``not_image`` says
    why an entry is not a runnable image at all (an attestation, a nested index);
    either rejects the entry."""

    os: str | None = None
    architecture: str | None = None  # GOARCH spelling (amd64, arm64)
    microarchitecture: str | None = None  # an archspec target name
    x86_64_level: int | None = None  # 2..4; 1 needs nothing beyond amd64
    gpu: bool = False  # any GPU (implied by gpu_sm and cuda)
    gpu_sm: tuple[int, int] | None = None  # minimum compute capability (major, minor)
    gpu_sm_exact: bool = False  # sm_90a: arch-specific code runs only on exactly that capability
    cuda: tuple[int, int] | None = None  # minimum CUDA version the driver must support
    unknown: tuple[str, ...] = ()
    not_image: str | None = None

    @property
    def needs_gpu(self) -> bool:
        return self.gpu or self.gpu_sm is not None or self.cuda is not None

    @property
    def generic(self) -> bool:
        """True when the build asks nothing of the CPU or GPU beyond os/architecture."""
        return not (
            self.microarchitecture or (self.x86_64_level or 1) > 1 or self.needs_gpu or self.unknown or self.not_image
        )

    def labels(self) -> list[str]:
        """The requirements as feature strings, in a fixed order (see ``features_for``)."""
        out = []
        if self.microarchitecture:
            out.append(f"cpu:{self.microarchitecture}")
        if self.x86_64_level and self.x86_64_level > 1:
            out.append(f"x86-64-v{self.x86_64_level}")
        if self.gpu_sm is not None:
            out.append(f"gpu:{_sm(self.gpu_sm, self.gpu_sm_exact)}")
        elif self.gpu and self.cuda is None:
            out.append("gpu")
        if self.cuda is not None:
            out.append(f"cuda>={_v(self.cuda)}")
        return out

    def specificity(self) -> tuple[int, ...]:
        """The ranking key among compatible builds, highest first: a GPU build, then
        the higher sm, the newer CUDA, the deeper CPU target (archspec ancestors; a
        level counts as its x86_64_vN target), and last a named architecture."""
        cpu = _depth(self.microarchitecture) + 1 if self.microarchitecture else 0
        if self.x86_64_level and self.x86_64_level > 1:
            cpu = max(cpu, _depth(f"x86_64_v{self.x86_64_level}") + 1)
        sm = self.gpu_sm[0] * 10 + self.gpu_sm[1] if self.gpu_sm else 0
        cuda = self.cuda[0] * 100 + self.cuda[1] if self.cuda else 0
        return (int(self.needs_gpu), sm, cuda, cpu, int(self.architecture is not None))


# --- reading requirements ----------------------------------------------------------------


def _merge(a: Requirements, b: Requirements) -> Requirements:
    """Both sets of needs at once: the stricter of two values, both microarchitectures'
    descendant, or a conflict recorded in ``unknown``."""
    unknown = a.unknown + tuple(u for u in b.unknown if u not in a.unknown)
    uarch = a.microarchitecture or b.microarchitecture
    if a.microarchitecture and b.microarchitecture and a.microarchitecture != b.microarchitecture:
        ta, tb = _target(a.microarchitecture), _target(b.microarchitecture)
        if ta >= tb:
            uarch = a.microarchitecture
        elif tb >= ta:
            uarch = b.microarchitecture
        else:
            unknown += (f"asks for both {a.microarchitecture} and {b.microarchitecture}; no CPU is both",)

    def most(x: tuple[int, int] | int | None, y: Any) -> Any:
        return y if x is None else x if y is None else max(x, y)

    return Requirements(
        os=a.os or b.os,
        architecture=a.architecture or b.architecture,
        microarchitecture=uarch,
        x86_64_level=most(a.x86_64_level, b.x86_64_level),
        gpu=a.gpu or b.gpu,
        gpu_sm=most(a.gpu_sm, b.gpu_sm),
        gpu_sm_exact=(a.gpu_sm_exact and a.gpu_sm == most(a.gpu_sm, b.gpu_sm))
        or (b.gpu_sm_exact and b.gpu_sm == most(a.gpu_sm, b.gpu_sm)),
        cuda=most(a.cuda, b.cuda),
        unknown=unknown,
        not_image=a.not_image or b.not_image,
    )


def _cpu_name(name: str, source: str) -> Requirements:
    """A CPU target: an x86-64 level name, a family root (needs nothing) or a target."""
    name = name.strip().lower()
    for candidate in (name, name.replace("-", "_")):
        level = re.fullmatch(r"x86_64_v([2-4])", candidate)
        if level:
            return Requirements(x86_64_level=int(level[1]))
        if candidate in ("x86_64", "aarch64", "ppc64le", "riscv64"):
            return Requirements()
        if _target(candidate) is not None:
            return Requirements(microarchitecture=candidate)
    return Requirements(unknown=(f"{source}: CPU microarchitecture {name!r} is not one archspec knows",))


def _one_feature(feature: str) -> Requirements:
    text = feature.strip().lower()
    if text in ("gpu", "gpu:nvidia", "nvidia"):
        return Requirements(gpu=True)
    if match := _CPU_FEATURE.match(text):
        return _cpu_name(match["name"], f"feature {feature!r}")
    if match := re.fullmatch(r"x86[-_]64[-_]v([1-4])", text):
        return Requirements(x86_64_level=int(match[1]))
    if match := _SM.match(text):
        return Requirements(gpu_sm=(int(match["major"]), int(match["minor"])), gpu_sm_exact=bool(match["exact"]))
    if match := re.fullmatch(r"(?:nvcap[:-]|gpu:cc)(\d+)\.(\d+)", text):
        return Requirements(gpu_sm=(int(match[1]), int(match[2])))
    if match := re.fullmatch(r"cuda\s*(?:>=|:|-)\s*(\d+)(?:\.(\d+))?(?:\.\d+)?", text):
        return Requirements(cuda=(int(match[1]), int(match[2] or 0)))
    return Requirements(
        unknown=(f"feature {feature!r} is not one hetflow can check (cpu:NAME, x86-64-vN, gpu:sm_XY, cuda>=X.Y, gpu)",)
    )


def _annotations(annotations: Mapping[str, str]) -> Requirements:
    out = Requirements()
    for key, value in annotations.items():
        text = value.strip().lower()
        if key == ANNOTATION_MICROARCHITECTURE:
            part = _cpu_name(text, f"annotation {key}={value!r}")
        elif key == ANNOTATION_LEVEL:
            match = _LEVEL.fullmatch(text) or re.fullmatch(r"(?P<level>[1-4])", text)
            part = (
                Requirements(x86_64_level=int(match["level"]))
                if match
                else Requirements(unknown=(f"annotation {key}={value!r} is not an x86-64 level (1-4, v3, x86-64-v3)",))
            )
        elif key == ANNOTATION_GPU_SM:
            sm, cc = _SM.match(text) or _SM_BARE.match(text), _NVCAP.match(text)
            if sm:
                part = Requirements(gpu_sm=(int(sm["major"]), int(sm["minor"])), gpu_sm_exact=bool(sm["exact"]))
            elif cc:
                part = Requirements(gpu_sm=(int(cc["major"]), int(cc["minor"])))
            else:
                part = Requirements(unknown=(f"annotation {key}={value!r} is not a GPU architecture (80, sm_80, 8.0)",))
        elif key == ANNOTATION_CUDA:
            match = _CUDA.match(text)
            part = (
                Requirements(cuda=(int(match["major"]), int(match["minor"] or 0)))
                if match
                else Requirements(unknown=(f"annotation {key}={value!r} is not a CUDA version (12.2, >=12.2)",))
            )
        elif key == _DOCKER_REFERENCE_TYPE:
            part = Requirements(not_image=f"a {value} (build metadata), not a runnable image")
        else:
            continue
        out = _merge(out, part)
    return out


def _platform(platform: Platform) -> Requirements:
    arch = normalize_arch(platform.architecture)
    if arch == "unknown" or platform.os == "unknown":
        # buildx writes unknown/unknown for attestation manifests.
        return Requirements(not_image="platform unknown/unknown: build metadata, not a runnable image")
    out = Requirements(os=platform.os.lower(), architecture=arch)
    variant = (platform.variant or "").strip().lower()
    if not variant:
        return out
    if arch == "amd64" and (match := re.fullmatch(r"v([1-4])", variant)):
        level = int(match[1])
        return replace(out, x86_64_level=level if level > 1 else None)
    if arch == "arm64" and (match := re.fullmatch(r"v(\d+)(?:\.(\d+))?", variant)):
        if variant in ("v8", "v8.0"):
            return out
        name = f"armv{match[1]}.{match[2] or 0}a"
        if _target(name) is not None:
            return replace(out, microarchitecture=name)
    return replace(out, unknown=(f"variant {platform.variant!r} of {arch} is not one hetflow can check",))


def requirements_of(desc: Descriptor) -> Requirements:
    """Everything an index entry needs, read from its platform, features and annotations."""
    out = Requirements()
    if is_index(desc.media_type):
        out = Requirements(not_image="a nested index; hetflow does not descend into it")
    if desc.platform is not None:
        out = _merge(out, _platform(desc.platform))
        for feature in desc.platform.features:
            out = _merge(out, _one_feature(feature))
    return _merge(out, _annotations(desc.annotations or {}))


def parse_requirements(
    spec: str | Iterable[str], *, os: str | None = None, architecture: str | None = None
) -> Requirements:
    """Requirements from feature strings: ``"x86-64-v3,gpu:sm_80"`` or a list of them.
    ``""`` or ``"generic"`` needs nothing.  Unknown features are kept in ``unknown``."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = Requirements(os=os, architecture=normalize_arch(architecture) if architecture else None)
    for item in items:
        if item.strip() and item.strip().lower() != "generic":
            out = _merge(out, _one_feature(item))
    return out


def features_for(req: Requirements) -> list[str]:
    """The ``platform.features`` strings for an index entry with these requirements."""
    return req.labels()


def annotations_for(req: Requirements) -> dict[str, str]:
    """The ``org.hetflow.*`` annotations that repeat ``features`` for tools that drop it."""
    out: dict[str, str] = {}
    if req.microarchitecture:
        out[ANNOTATION_MICROARCHITECTURE] = req.microarchitecture
    if req.x86_64_level and req.x86_64_level > 1:
        out[ANNOTATION_LEVEL] = str(req.x86_64_level)
    if req.gpu_sm is not None:
        out[ANNOTATION_GPU_SM] = _sm(req.gpu_sm, req.gpu_sm_exact).removeprefix("sm_")
    if req.cuda is not None:
        out[ANNOTATION_CUDA] = _v(req.cuda)
    return out


def platform_for(
    req: Requirements, *, os: str = "linux", architecture: str = "amd64", variant: bool = True
) -> Platform:
    """An index entry's platform: os/architecture (the requirements' own, if any, win),
    the features, and on amd64 containerd's ``variant: vN`` for a level >= 2."""
    arch = req.architecture or normalize_arch(architecture)
    fields: dict[str, Any] = {"os": req.os or os, "architecture": arch}
    if variant and arch == "amd64" and req.x86_64_level and req.x86_64_level > 1:
        fields["variant"] = f"v{req.x86_64_level}"
    features = features_for(req)
    if features:
        fields["features"] = features
    return Platform.model_validate(fields)


# --- checking a node ---------------------------------------------------------------------


@dataclass(frozen=True)
class _NodeFacts:
    os: str
    arch: str
    uarch: str
    level: int | None
    ccs: tuple[tuple[int, int], ...]
    cuda: tuple[int, int] | None
    cuda_unknown_why: str

    @classmethod
    def of(cls, node: Node) -> _NodeFacts:
        arch = normalize_arch(node.cpu.architecture)
        level = node.cpu.x86_64_level
        target = _target(node.cpu.microarchitecture)
        if level is None and arch == "amd64":
            level = _archspec_level(target) if target is not None else 1
        cudas = [v for g in node.gpus if g.cuda_version and (v := _version(g.cuda_version))]
        fakes = [g for g in node.gpus if g.fake and not g.cuda_version]
        why = "fake GPU without cuda_version" if fakes else "the driver did not report it"
        return cls(
            os=node.os.lower(),
            arch=arch,
            uarch=node.cpu.microarchitecture,
            level=level,
            ccs=tuple(g.compute_capability_tuple for g in node.gpus),
            cuda=max(cudas) if cudas else None,
            cuda_unknown_why=why,
        )


def _check_cpu(req: Requirements, facts: _NodeFacts, ok: list[str], bad: list[str]) -> None:
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
        wanted, have = _target(name), _target(facts.uarch)
        if name == facts.uarch:
            ok.append(f"cpu:{name}: node is {facts.uarch}")
        elif have is None:
            bad.append(f"{name} build needs a {name} CPU; node's {facts.uarch!r} is not known to archspec")
        elif have >= wanted:
            ok.append(f"cpu:{name}: node is {facts.uarch}, which runs {name} code")
        else:
            bad.append(f"{name} build needs {name} or a newer CPU of its line; node is {facts.uarch}")


def _check_gpu(req: Requirements, facts: _NodeFacts, ok: list[str], bad: list[str]) -> None:
    if not req.needs_gpu:
        return
    if req.gpu_sm is not None:
        sm, need = _sm(req.gpu_sm, req.gpu_sm_exact), _v(req.gpu_sm)
        best = max(facts.ccs) if facts.ccs else None
        if best is None:
            bad.append(f"{sm} build needs a GPU with compute capability {need}; node has no GPU")
        elif req.gpu_sm_exact and req.gpu_sm not in facts.ccs:
            # sm_90a code uses architecture-specific instructions with no PTX fallback.
            have = ", ".join(sorted({_v(c) for c in facts.ccs}))
            bad.append(f"{sm} build runs only on compute capability {need}; node has {have}")
        elif not req.gpu_sm_exact and best < req.gpu_sm:
            bad.append(f"{sm} build needs compute capability {need}; node has {_v(best)}")
        else:
            ok.append(f"gpu:{sm}: node has compute capability {_v(best)}")
    elif req.gpu and req.cuda is None:
        if facts.ccs:
            ok.append(f"gpu: node has {len(facts.ccs)} GPU(s)")
        else:
            bad.append("GPU build needs a GPU; node has none")
    if req.cuda is not None:
        # Checked the way the NVIDIA container toolkit checks NVIDIA_REQUIRE_CUDA: the
        # CUDA version the driver supports (nvidia-smi's "CUDA Version") >= the build's.
        need = _v(req.cuda)
        if not facts.ccs:
            if req.gpu_sm is None:  # else "needs a GPU ...; node has no GPU" is already said
                bad.append(f"cuda>={need} build needs a driver supporting CUDA {need}; node has no GPU")
        elif facts.cuda is None:
            bad.append(
                f"cuda>={need} build needs a driver supporting CUDA {need}; "
                f"node's driver CUDA version is unknown ({facts.cuda_unknown_why})"
            )
        elif facts.cuda < req.cuda:
            have = _v(facts.cuda)
            bad.append(f"cuda>={need} build needs a driver supporting CUDA {need}; node's driver supports {have}")
        else:
            ok.append(f"cuda>={need}: node's driver supports {_v(facts.cuda)}")


def _check(req: Requirements, facts: _NodeFacts) -> tuple[bool, tuple[str, ...]]:
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


def check(desc: Descriptor, node: Node) -> Verdict:
    """One entry against one node."""
    req = requirements_of(desc)
    ok, reasons = _check(req, _NodeFacts.of(node))
    return Verdict(desc, ok, reasons, req.specificity())


# --- resolving ---------------------------------------------------------------------------


def describe(desc: Descriptor) -> str:
    """``sha256:0123456789ab linux/amd64/v3 [x86-64-v3]``: an entry in one short line."""
    labels = requirements_of(desc).labels()
    short = desc.digest.split(":", 1)[-1][:12]
    return f"{desc.digest.split(':', 1)[0]}:{short} {platform_string(desc.platform)} [{', '.join(labels) or 'generic'}]"


@dataclass(frozen=True)
class Verdict:
    """One entry judged against one node: ``reasons`` say why it fits (ok) or every
    reason it does not; ``specificity`` ranks the fitting ones (higher wins)."""

    descriptor: Descriptor
    ok: bool
    reasons: tuple[str, ...]
    specificity: tuple[int, ...]


@dataclass(frozen=True)
class Resolution:
    """The build chosen for a node (None when nothing fits) and every entry's verdict,
    in index order."""

    chosen: Descriptor | None
    verdicts: tuple[Verdict, ...]
    node: str = field(default="")

    def explain(self) -> list[str]:
        """Human lines: the decision, then one line per entry with its reasons."""
        where = f"node {self.node}" if self.node else "this node"
        fitting = sum(v.ok for v in self.verdicts)
        if self.chosen is not None:
            head = f"chose {describe(self.chosen)} for {where}: the most specific of {fitting} compatible build(s)"
        elif not self.verdicts:
            head = f"the index is empty: nothing to run on {where}"
        else:
            count = len(self.verdicts)
            head = f"no build fits {where}; {count} entr{'y' if count == 1 else 'ies'} rejected"
        lines = [head]
        for verdict in self.verdicts:
            mark = "chosen" if verdict.descriptor is self.chosen else "fits" if verdict.ok else "rejected"
            lines.append(f"  {mark:8} {describe(verdict.descriptor)}: {'; '.join(verdict.reasons)}")
        return lines


def resolve(index: Index, node: Node) -> Resolution:
    """The most specific entry of ``index`` (an ``Index``) that fits ``node``.

    Only compatible entries compete; the highest ``specificity`` wins (a GPU build on a
    GPU node over a CPU build, a higher sm, a deeper CPU target), and a generic build
    is the fallback.  Ties keep index order, as a runtime reading the index would."""
    facts = _NodeFacts.of(node)
    verdicts = []
    chosen: Verdict | None = None
    for desc in index.manifests:
        req = requirements_of(desc)
        ok, reasons = _check(req, facts)
        verdict = Verdict(desc, ok, reasons, req.specificity())
        verdicts.append(verdict)
        if ok and (chosen is None or verdict.specificity > chosen.specificity):
            chosen = verdict
    return Resolution(chosen.descriptor if chosen else None, tuple(verdicts), node=node.name)

"""Which build of an image index fits a node: the matching rules as named tables.

Builders at the top (``machine``, ``card``, ``entry``, ``index``) are shared with the
other image tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.images import (
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    Index,
    Platform,
    Requirements,
    normalize_arch,
    parse_requirements,
    platform_for,
    requirements_of,
    resolve,
)
from hetflow.images.matching.match import annotations_for, check, features_for
from hetflow.inventory import Cpu, Gpu, Node

# --- builders ---------------------------------------------------------------------------

_LEVELS = {"core2": 1, "nehalem": 2, "haswell": 3, "skylake": 3, "zen2": 3, "zen3": 3}


def card(cc: str = "8.0", cuda: str | None = "12.4", *, index: int = 0, fake: bool = True) -> Gpu:
    """A GPU of compute capability ``cc`` whose driver supports CUDA ``cuda``."""
    return Gpu(
        index=index,
        uuid=f"GPU-{index}",
        model="Test GPU",
        memory_bytes=16 * 1024**3,
        compute_capability=cc,
        driver_version="fake" if fake else "550.54.15",
        cuda_version=cuda,
        device_path=f"/dev/nvidia{index}",
        minor=index,
        fake=fake,
    )


def machine(uarch: str = "haswell", *gpus: Gpu, arch: str = "x86_64", level: int | str | None = "auto") -> Node:
    """A node with an ``uarch`` CPU (archspec name) and ``gpus``; its x86-64 level is
    the usual one for known names, else left for archspec to work out."""
    if level == "auto":
        level = _LEVELS.get(uarch, 4 if "avx512" in uarch or uarch in ("icelake", "zen4") else None)
    assert level is None or isinstance(level, int)
    return Node(
        name=f"{uarch}{'-gpu' if gpus else ''}",
        cpu=Cpu(
            vendor="GenuineIntel",
            model="Test CPU",
            architecture=arch,
            microarchitecture=uarch,
            x86_64_level=level if arch == "x86_64" else None,
            cores=8,
        ),
        memory_bytes=64 * 1024**3,
        gpus=tuple(gpus),
    )


def entry(
    name: str = "a",
    features: str | list[str] = "",
    *,
    arch: str = "amd64",
    os: str = "linux",
    variant: str | None = None,
    annotations: dict[str, str] | None = None,
    platform: bool = True,
) -> Descriptor:
    """An index entry named ``name`` (its digest is the name repeated)."""
    feats = [f for f in (features.split(",") if isinstance(features, str) else features) if f]
    fields: dict[str, object] = {"architecture": arch, "os": os}
    if variant:
        fields["variant"] = variant
    if feats:
        fields["features"] = feats
    digest = "sha256:" + (name.encode().hex() * 64)[:64]
    return Descriptor(
        mediaType=OCI_MANIFEST,
        digest=digest,
        size=100,
        platform=Platform.model_validate(fields) if platform else None,
        annotations=annotations,
    )


def index(*entries: Descriptor) -> Index:
    return Index(mediaType=OCI_INDEX, manifests=list(entries))


def name_of(desc: Descriptor | None) -> str | None:
    """The ``name`` an ``entry`` was built with."""
    if desc is None:
        return None
    hexed = desc.digest.removeprefix("sha256:")
    for size in range(2, 64, 2):
        candidate = bytes.fromhex(hexed[:size]).decode(errors="replace")
        if (candidate.encode().hex() * 64)[:64] == hexed:
            return candidate
    raise AssertionError(f"{desc.digest} was not made by entry()")


def verdict(desc: Descriptor, node: Node) -> tuple[bool, str]:
    v = check(desc, node)
    return v.ok, "; ".join(v.reasons)


# --- tables -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    build: Descriptor
    node: Node
    ok: bool
    reason: str = ""  # a substring of the joined reasons


def run(case: Case) -> None:
    ok, reasons = verdict(case.build, case.node)
    assert ok is case.ok, reasons
    assert case.reason in reasons


ARCHSPEC_ORDER = {
    "haswell build on skylake": Case(entry(features="cpu:haswell"), machine("skylake"), True),
    "skylake build on haswell": Case(
        entry(features="cpu:skylake"),
        machine("haswell"),
        False,
        "skylake build needs skylake or a newer CPU of its line; node is haswell",
    ),
    "skylake_avx512 build on icelake": Case(entry(features="cpu:skylake_avx512"), machine("icelake"), True),
    "icelake build on skylake_avx512": Case(entry(features="cpu:icelake"), machine("skylake_avx512"), False, "icelake"),
    "zen2 build on zen3": Case(entry(features="cpu:zen2"), machine("zen3"), True),
    "zen3 build on zen2": Case(entry(features="cpu:zen3"), machine("zen2"), False, "node is zen2"),
    "haswell build on zen3 (other line)": Case(entry(features="cpu:haswell"), machine("zen3"), False),
    "same name": Case(entry(features="cpu:cascadelake"), machine("cascadelake"), True),
    "metahub spelling cpu-broadwell on skylake": Case(entry(features="cpu-broadwell"), machine("skylake"), True),
    "annotation haswell on core2": Case(
        entry(annotations={"org.hetflow.cpu.microarchitecture": "haswell"}), machine("core2"), False, "haswell"
    ),
    "x86_64 target name needs nothing": Case(entry(features="cpu:x86_64"), machine("core2"), True),
    "neoverse_n1 build on neoverse_v2": Case(
        entry(features="cpu:neoverse_n1", arch="arm64"), machine("neoverse_v2", arch="aarch64"), True
    ),
    "unknown to archspec is rejected": Case(
        entry(features="cpu:coffelake"), machine("skylake"), False, "'coffelake' is not one archspec knows"
    ),
    "node unknown to archspec": Case(
        entry(features="cpu:haswell"), machine("futurelake", level=3), False, "not known to archspec"
    ),
}


@pytest.mark.parametrize("case", ARCHSPEC_ORDER.values(), ids=ARCHSPEC_ORDER.keys())
def test_microarchitecture_follows_archspec_order(case: Case) -> None:
    run(case)


LEVELS = {
    "v2 feature on v3 node": Case(entry(features="x86-64-v2"), machine("haswell"), True),
    "v3 feature on v3 node": Case(entry(features="x86-64-v3"), machine("haswell"), True),
    "v3 feature on v1 node": Case(
        entry(features="x86-64-v3"),
        machine("core2"),
        False,
        "x86-64-v3 build needs AVX2, FMA and BMI2; node is x86-64-v1 (core2)",
    ),
    "v4 feature on v3 node": Case(
        entry(features="x86-64-v4"),
        machine("haswell"),
        False,
        "x86-64-v4 build needs AVX-512; node is x86-64-v3 (haswell)",
    ),
    "v4 feature on v4 node": Case(entry(features="x86-64-v4"), machine("skylake_avx512"), True),
    "v2 feature on v1 node": Case(entry(features="x86-64-v2"), machine("core2"), False, "SSE4.2"),
    "v1 feature on v1 node": Case(entry(features="x86-64-v1"), machine("core2"), True),
    "containerd variant v3 on v3 node": Case(entry(variant="v3"), machine("haswell"), True),
    "containerd variant v3 on v1 node": Case(entry(variant="v3"), machine("core2"), False, "x86-64-v3 build"),
    "containerd variant v4 on v3 node": Case(entry(variant="v4"), machine("zen3"), False, "AVX-512"),
    "containerd variant v1 needs nothing": Case(entry(variant="v1"), machine("core2"), True),
    "annotation level 3 on v2 node": Case(
        entry(annotations={"org.hetflow.cpu.level": "3"}), machine("nehalem"), False, "node is x86-64-v2 (nehalem)"
    ),
    "annotation x86-64-v2 on v3 node": Case(
        entry(annotations={"org.hetflow.cpu.level": "x86-64-v2"}), machine("haswell"), True
    ),
    "archspec spelling cpu:x86_64_v3": Case(
        entry(features="cpu:x86_64_v3"), machine("core2"), False, "x86-64-v3 build"
    ),
    "node level worked out by archspec": Case(entry(features="x86-64-v3"), machine("haswell", level=None), True),
    "level build on arm node": Case(
        entry(features="x86-64-v3", arch="arm64"), machine("neoverse_n1", arch="aarch64"), False, "needs an x86-64 CPU"
    ),
}


@pytest.mark.parametrize("case", LEVELS.values(), ids=LEVELS.keys())
def test_x86_64_levels(case: Case) -> None:
    run(case)


GPU_ARCH = {
    "sm_80 on cc 8.0": Case(entry(features="gpu:sm_80"), machine("haswell", card("8.0")), True),
    "sm_80 on cc 8.6": Case(entry(features="gpu:sm_80"), machine("haswell", card("8.6")), True),
    "sm_80 on cc 9.0": Case(entry(features="gpu:sm_80"), machine("haswell", card("9.0")), True),
    "sm_80 on cc 7.5": Case(
        entry(features="gpu:sm_80"), machine("haswell", card("7.5")), False, "sm_80 build needs compute capability 8.0"
    ),
    "sm_90 on cc 8.0": Case(
        entry(features="gpu:sm_90"),
        machine("haswell", card("8.0")),
        False,
        "sm_90 build needs compute capability 9.0; node has 8.0",
    ),
    "sm_100 on cc 9.0": Case(entry(features="sm_100"), machine("haswell", card("9.0")), False, "10.0; node has 9.0"),
    "sm_90a on cc 9.0": Case(entry(features="gpu:sm_90a"), machine("haswell", card("9.0")), True),
    "sm_90a on cc 10.0": Case(
        entry(features="gpu:sm_90a"), machine("haswell", card("10.0")), False, "runs only on compute capability 9.0"
    ),
    "best of several GPUs": Case(
        entry(features="gpu:sm_86"), machine("haswell", card("7.5"), card("8.6", index=1)), True
    ),
    "no GPU": Case(
        entry(features="gpu:sm_80"),
        machine("haswell"),
        False,
        "sm_80 build needs a GPU with compute capability 8.0; node has no GPU",
    ),
    "metahub nvcap-5.2 on cc 6.0": Case(entry(features="nvcap-5.2"), machine("haswell", card("6.0")), True),
    "annotation 86 on cc 8.0": Case(
        entry(annotations={"org.hetflow.gpu.sm": "86"}),
        machine("haswell", card("8.0")),
        False,
        "needs compute capability 8.6",
    ),
    "annotation 8.0 on cc 8.0": Case(
        entry(annotations={"org.hetflow.gpu.sm": "8.0"}), machine("haswell", card("8.0")), True
    ),
    "plain gpu on GPU node": Case(entry(features="gpu"), machine("haswell", card("7.0")), True),
    "plain gpu without GPU": Case(
        entry(features="gpu"), machine("haswell"), False, "GPU build needs a GPU; node has none"
    ),
}


@pytest.mark.parametrize("case", GPU_ARCH.values(), ids=GPU_ARCH.keys())
def test_gpu_architecture_against_compute_capability(case: Case) -> None:
    run(case)


CUDA = {
    "12.2 on driver 12.4": Case(entry(features="cuda>=12.2"), machine("haswell", card(cuda="12.4")), True),
    "12.2 on driver 12.2": Case(entry(features="cuda>=12.2"), machine("haswell", card(cuda="12.2")), True),
    "12.4 on driver 12.2": Case(
        entry(features="cuda>=12.4"),
        machine("haswell", card(cuda="12.2")),
        False,
        "cuda>=12.4 build needs a driver supporting CUDA 12.4; node's driver supports 12.2",
    ),
    "12.2 on driver 11.8": Case(
        entry(features="cuda>=12.2"), machine("haswell", card(cuda="11.8")), False, "supports 11.8"
    ),
    "cuda>=12 on driver 12.0": Case(entry(features="cuda>=12"), machine("haswell", card(cuda="12.0")), True),
    "patch level ignored": Case(entry(features="cuda>=12.2.1"), machine("haswell", card(cuda="12.2")), True),
    "no GPU": Case(entry(features="cuda>=12.2"), machine("haswell"), False, "node has no GPU"),
    "fake GPU without cuda_version": Case(
        entry(features="cuda>=12.2"),
        machine("haswell", card(cuda=None)),
        False,
        "node's driver CUDA version is unknown (fake GPU without cuda_version)",
    ),
    "real GPU whose driver said nothing": Case(
        entry(features="cuda>=12.2"),
        machine("haswell", card(cuda=None, fake=False)),
        False,
        "the driver did not report it",
    ),
    "annotation >=12.2 on driver 12.1": Case(
        entry(annotations={"org.hetflow.cuda": ">=12.2"}), machine("haswell", card(cuda="12.1")), False, "CUDA 12.2"
    ),
    "annotation 12.2 on driver 12.3": Case(
        entry(annotations={"org.hetflow.cuda": "12.2"}), machine("haswell", card(cuda="12.3")), True
    ),
}


@pytest.mark.parametrize("case", CUDA.values(), ids=CUDA.keys())
def test_cuda_against_driver(case: Case) -> None:
    run(case)


OS_ARCH = {
    "amd64 build on x86_64 node": Case(entry(arch="amd64"), machine("haswell"), True),
    "x86_64 spelled in the index": Case(entry(arch="x86_64"), machine("haswell"), True),
    "arm64 build on aarch64 node": Case(entry(arch="arm64"), machine("neoverse_n1", arch="aarch64"), True),
    "aarch64 spelled in the index": Case(entry(arch="aarch64"), machine("neoverse_n1", arch="aarch64"), True),
    "arm64 build on amd64 node": Case(entry(arch="arm64"), machine("haswell"), False, "arm64 build; node is amd64"),
    "amd64 build on arm64 node": Case(
        entry(arch="amd64"), machine("neoverse_n1", arch="aarch64"), False, "amd64 build; node is arm64"
    ),
    "windows build on linux node": Case(
        entry(os="windows"), machine("haswell"), False, "windows build; node runs linux"
    ),
    "arm64 v8 on any arm64": Case(entry(arch="arm64", variant="v8"), machine("neoverse_n1", arch="aarch64"), True),
    "arm64 v8.2 on neoverse_n1": Case(
        entry(arch="arm64", variant="v8.2"), machine("neoverse_n1", arch="aarch64"), True
    ),
    "arm64 v9 on neoverse_n1": Case(
        entry(arch="arm64", variant="v9"), machine("neoverse_n1", arch="aarch64"), False, "armv9.0a build"
    ),
    "no platform at all": Case(entry(platform=False), machine("haswell"), True, "generic build"),
    "attestation (unknown/unknown)": Case(
        entry(arch="unknown", os="unknown"), machine("haswell"), False, "not a runnable"
    ),
    "attestation annotation": Case(
        entry(annotations={"vnd.docker.reference.type": "attestation-manifest"}),
        machine("haswell"),
        False,
        "attestation",
    ),
    "unknown feature": Case(
        entry(features="avx512_bf16"), machine("sapphirerapids"), False, "not one hetflow can check"
    ),
    "malformed annotation": Case(
        entry(annotations={"org.hetflow.gpu.sm": "ampere"}), machine("haswell", card()), False, "not a GPU architecture"
    ),
}


@pytest.mark.parametrize("case", OS_ARCH.values(), ids=OS_ARCH.keys())
def test_os_and_architecture(case: Case) -> None:
    run(case)


def test_nested_index_entry_is_not_followed() -> None:
    nested = entry("n").model_copy(update={"media_type": OCI_INDEX})
    ok, reasons = verdict(nested, machine("haswell"))
    assert not ok and "nested index" in reasons


@pytest.mark.parametrize(
    ("alias", "goarch"),
    [("x86_64", "amd64"), ("AMD64", "amd64"), ("aarch64", "arm64"), ("arm64", "arm64"), ("ppc64le", "ppc64le")],
)
def test_normalize_arch(alias: str, goarch: str) -> None:
    assert normalize_arch(alias) == goarch


# --- ranking ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranking:
    entries: tuple[Descriptor, ...]
    node: Node
    chosen: str | None


RANKING = {
    "generic is the fallback on an old node": Ranking(
        (entry("gen"), entry("v3", "x86-64-v3"), entry("gpu", "gpu:sm_80")), machine("core2"), "gen"
    ),
    "GPU build over CPU build on a GPU node": Ranking(
        (entry("gen"), entry("v3", "x86-64-v3"), entry("gpu", "gpu:sm_80,cuda>=12.2")),
        machine("haswell", card("8.0", "12.2")),
        "gpu",
    ),
    "CPU build on a GPU node whose driver is too old": Ranking(
        (entry("v3", "x86-64-v3"), entry("gpu", "gpu:sm_80,cuda>=12.4")), machine("haswell", card("8.0", "12.2")), "v3"
    ),
    "highest sm within the node's capability": Ranking(
        (entry("sm70", "gpu:sm_70"), entry("sm80", "gpu:sm_80"), entry("sm90", "gpu:sm_90")),
        machine("haswell", card("8.6")),
        "sm80",
    ),
    "newer CUDA the driver supports": Ranking(
        (
            entry("c118", "gpu:sm_80,cuda>=11.8"),
            entry("c122", "gpu:sm_80,cuda>=12.2"),
            entry("c124", "gpu:sm_80,cuda>=12.4"),
        ),
        machine("haswell", card("8.0", "12.3")),
        "c122",
    ),
    "microarchitecture over level over generic": Ranking(
        (entry("gen"), entry("v3", "x86-64-v3"), entry("hsw", "cpu:haswell")), machine("skylake"), "hsw"
    ),
    "deeper microarchitecture wins": Ranking(
        (entry("hsw", "cpu:haswell"), entry("skx", "cpu:skylake_avx512"), entry("icl", "cpu:icelake")),
        machine("cascadelake"),
        "skx",
    ),
    "higher level over lower": Ranking(
        (entry("v2", "x86-64-v2"), entry("v4", "x86-64-v4"), entry("v3", "x86-64-v3")), machine("skylake_avx512"), "v4"
    ),
    "variant v3 over plain amd64": Ranking((entry("plain"), entry("v3", variant="v3")), machine("zen3"), "v3"),
    "CPU-tuned GPU build over plain GPU build": Ranking(
        (entry("gpu", "gpu:sm_80"), entry("gpu-v3", "gpu:sm_80,x86-64-v3")), machine("haswell", card("8.0")), "gpu-v3"
    ),
    "ties keep index order": Ranking((entry("first"), entry("second")), machine("haswell"), "first"),
    "tied specific builds keep index order": Ranking(
        (entry("a3", "x86-64-v3"), entry("b3", variant="v3")), machine("haswell"), "a3"
    ),
    "right architecture among many": Ranking(
        (entry("arm", arch="arm64"), entry("ppc", arch="ppc64le"), entry("x86")), machine("haswell"), "x86"
    ),
    "nothing fits": Ranking(
        (entry("arm", arch="arm64"), entry("sm90", "gpu:sm_90"), entry("v4", "x86-64-v4")), machine("haswell"), None
    ),
    "empty index": Ranking((), machine("haswell"), None),
}


@pytest.mark.parametrize("case", RANKING.values(), ids=RANKING.keys())
def test_ranking(case: Ranking) -> None:
    result = resolve(index(*case.entries), case.node)
    assert name_of(result.chosen) == case.chosen, "\n".join(result.explain())
    assert len(result.verdicts) == len(case.entries)


def test_nothing_fits_lists_every_reason() -> None:
    node = machine("haswell")
    result = resolve(
        index(entry("arm", arch="arm64"), entry("sm90", "gpu:sm_90,cuda>=12.4"), entry("v4", "x86-64-v4,cpu:icelake")),
        node,
    )
    assert result.chosen is None
    lines = result.explain()
    assert lines[0] == "no build fits node haswell; 3 entries rejected"
    text = "\n".join(lines)
    for reason in (
        "arm64 build; node is amd64",
        "sm_90 build needs a GPU with compute capability 9.0; node has no GPU",
        "x86-64-v4 build needs AVX-512; node is x86-64-v3 (haswell)",
        "icelake build needs icelake or a newer CPU of its line; node is haswell",
    ):
        assert reason in text
    assert all(not v.ok and v.reasons for v in result.verdicts)


def test_explain_names_the_choice_and_the_others() -> None:
    result = resolve(index(entry("gen"), entry("v3", "x86-64-v3")), machine("haswell"))
    lines = result.explain()
    assert lines[0].startswith("chose sha256:") and "[x86-64-v3]" in lines[0] and "of 2 compatible" in lines[0]
    assert lines[1].lstrip().startswith("fits") and "generic build" in lines[1]
    assert lines[2].lstrip().startswith("chosen") and "node is x86-64-v3 (haswell)" in lines[2]


# --- reading and writing requirements ----------------------------------------------------------


def test_features_and_annotations_merge_to_the_stricter() -> None:
    desc = entry(
        features="x86-64-v2,gpu:sm_70,cpu:haswell",
        variant="v3",
        annotations={
            "org.hetflow.gpu.sm": "80",
            "org.hetflow.cuda": "12.2",
            "org.hetflow.cpu.microarchitecture": "skylake",
        },
    )
    req = requirements_of(desc)
    assert req == Requirements(
        os="linux", architecture="amd64", microarchitecture="skylake", x86_64_level=3, gpu_sm=(8, 0), cuda=(12, 2)
    )
    assert req.labels() == ["cpu:skylake", "x86-64-v3", "gpu:sm_80", "cuda>=12.2"]


def test_two_microarchitectures_of_different_lines_conflict() -> None:
    req = requirements_of(entry(features="cpu:zen3,cpu:icelake"))
    assert req.unknown and "no CPU is both" in req.unknown[0]


SPECS = {
    "generic": ("", [], {}, None),
    "level": ("x86-64-v3", ["x86-64-v3"], {"org.hetflow.cpu.level": "3"}, "v3"),
    "gpu": (
        "gpu:sm_80,cuda>=12.2",
        ["gpu:sm_80", "cuda>=12.2"],
        {"org.hetflow.gpu.sm": "80", "org.hetflow.cuda": "12.2"},
        None,
    ),
    "uarch and level": (
        "cpu:skylake_avx512,x86-64-v4",
        ["cpu:skylake_avx512", "x86-64-v4"],
        {"org.hetflow.cpu.microarchitecture": "skylake_avx512", "org.hetflow.cpu.level": "4"},
        "v4",
    ),
}


@pytest.mark.parametrize(("spec", "features", "annotations", "variant"), SPECS.values(), ids=SPECS.keys())
def test_writing_requirements_reads_back(
    spec: str, features: list[str], annotations: dict[str, str], variant: str | None
) -> None:
    req = parse_requirements(spec)
    platform = platform_for(req)
    assert features_for(req) == features
    assert annotations_for(req) == annotations
    assert platform.variant == variant and platform.features == features
    desc = Descriptor(mediaType=OCI_MANIFEST, digest="sha256:" + "0" * 64, size=1, platform=platform)
    assert requirements_of(desc).labels() == features  # from features alone
    only_annotations = desc.model_copy(update={"platform": None, "annotations": annotations or None})
    assert requirements_of(only_annotations).labels() == features  # from annotations alone


# --- invariants -------------------------------------------------------------------------------

FEATURE_POOL = [
    "",
    "x86-64-v2",
    "x86-64-v3",
    "x86-64-v4",
    "cpu:haswell",
    "cpu:zen3",
    "gpu:sm_80",
    "gpu:sm_90",
    "cuda>=12.4",
]
NODE_POOL = [
    machine("core2"),
    machine("haswell"),
    machine("zen3"),
    machine("skylake_avx512", card("8.0", "12.2")),
    machine("haswell", card("9.0", "12.4")),
]


@settings(max_examples=200, deadline=None)
@given(
    features=st.lists(st.sampled_from(FEATURE_POOL), min_size=0, max_size=6),
    archs=st.lists(st.sampled_from(["amd64", "arm64"]), min_size=6, max_size=6),
    node=st.sampled_from(NODE_POOL),
)
def test_chosen_fits_and_nothing_fitting_is_more_specific(features: list[str], archs: list[str], node: Node) -> None:
    entries = [entry(f"e{i}", f, arch=archs[i]) for i, f in enumerate(features)]
    result = resolve(index(*entries), node)
    fitting = [v for v in result.verdicts if v.ok]
    if not fitting:
        assert result.chosen is None
        assert all(v.reasons for v in result.verdicts)  # every rejection explains itself
        return
    best = max(v.specificity for v in fitting)
    chosen = next(v for v in result.verdicts if v.descriptor is result.chosen)
    assert chosen.ok and chosen.specificity == best
    assert chosen is next(v for v in fitting if v.specificity == best)  # first of the best
    if any(f == "" and a == "amd64" for f, a in zip(features, archs, strict=False)):
        assert result.chosen is not None  # a generic amd64 build always fits these nodes


def test_entries_alike_but_for_what_is_not_read_are_judged_alike_and_the_rest_apart() -> None:
    # resolve judges each platform once: a title or a date changes nothing, a read
    # annotation (sm, CUDA), a feature or a variant does.
    node = machine("haswell", card("8.0", "12.2"))
    sm = "org.hetflow.gpu.sm"
    entries = [
        entry("t1", "gpu:sm_80", annotations={"org.opencontainers.image.title": "one", sm: "80"}),
        entry("t2", "gpu:sm_80", annotations={"org.opencontainers.image.title": "two", sm: "80"}),
        entry("s9", "gpu:sm_80", annotations={"org.opencontainers.image.title": "one", sm: "90"}),
        entry("c9", "gpu:sm_80,cuda>=12.4", annotations={sm: "80"}),
        entry("v4", "gpu:sm_80", variant="v4", annotations={sm: "80"}),
        entry("ok", "gpu:sm_80", variant="v3", annotations={sm: "80"}),
    ]
    result = resolve(index(*entries), node)
    for desc, got in zip(entries, result.verdicts, strict=True):
        alone = check(desc, node)
        assert (got.ok, got.reasons, got.specificity) == (alone.ok, alone.reasons, alone.specificity), name_of(desc)
    assert [v.ok for v in result.verdicts] == [True, True, False, False, False, True]
    assert name_of(result.chosen) == "ok"

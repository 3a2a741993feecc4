"""build_index, inspect_image and resolve_image against the FakeRegistry and a fake local
store: the same flow the integration test runs against a real registry and podman."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from hetflow.errors import NoFitError
from hetflow.images import (
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    BadDocumentError,
    FakeRegistry,
    ImageError,
    ImageSource,
    LocalImage,
    NotFoundError,
    Platform,
    RegistryClient,
    Requirements,
    build_index,
    build_index_image,
    digest_of,
    inspect_image,
    parse_build_entry,
    parse_index,
    parse_requirements,
    resolve_image,
)
from hetflow.images.distribution.index_build import ANNOTATION_SOURCE
from tests.unit.test_images_match import card, machine

REPO = "hf/app"
REF = f"registry.test/{REPO}:latest"
BUILDS = {"generic": "", "v3": "x86-64-v3", "gpu": "gpu:sm_80,cuda>=12.2"}


def registry_client(registry: FakeRegistry) -> RegistryClient:
    return RegistryClient(registry.base_url, transport=registry.transport())


def registry_with_builds(auth: str = "none") -> tuple[FakeRegistry, dict[str, str]]:
    """A registry holding REPO:generic, :v3 and :gpu and an index of them as REPO:latest."""
    registry = FakeRegistry(auth=auth, users={"ci": "secret"})  # type: ignore[arg-type]
    digests = {build: registry.add_image(REPO, build, env={"BUILD": build}).digest for build in BUILDS}
    build_index_image(
        REF,
        [f"{b}={f}" for b, f in BUILDS.items()],
        ImageSource(transport=registry.transport(), username="ci", password="secret"),
    )
    return registry, digests


# --- build_index --------------------------------------------------------------------------------


def test_build_index_writes_features_variant_and_annotations_in_order() -> None:
    registry, digests = registry_with_builds()
    body, media_type = registry.manifests[registry.tags[(REPO, "latest")]]
    index = parse_index(body)
    assert media_type == OCI_INDEX
    assert [d.digest for d in index.manifests] == [digests["generic"], digests["v3"], digests["gpu"]]
    platforms = [d.platform.model_dump(by_alias=True, exclude_none=True) for d in index.manifests if d.platform]
    assert platforms == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "amd64", "os": "linux", "variant": "v3", "features": ["x86-64-v3"]},
        {"architecture": "amd64", "os": "linux", "features": ["gpu:sm_80", "cuda>=12.2"]},
    ]
    assert [d.annotations for d in index.manifests] == [
        {ANNOTATION_SOURCE: "generic"},
        {"org.hetflow.cpu.level": "3", ANNOTATION_SOURCE: "v3"},
        {"org.hetflow.gpu.sm": "80", "org.hetflow.cuda": "12.2", ANNOTATION_SOURCE: "gpu"},
    ]
    assert "features" not in json.loads(body)["manifests"][0]["platform"]  # generic: no empty list written


def test_build_index_is_deterministic() -> None:
    registry, _ = registry_with_builds()
    entries = [parse_build_entry(f"{b}={f}") for b, f in BUILDS.items()]
    with registry_client(registry) as client:
        first = build_index(client, REPO, entries)
        second = build_index(client, REPO, entries, tag="again")
    assert first.body == second.body and first.digest == second.digest == digest_of(first.body)
    assert registry.tags[(REPO, "again")] == registry.tags[(REPO, "latest")] == first.digest


def test_build_index_keeps_an_explicit_platform_and_takes_the_config_arch() -> None:
    registry = FakeRegistry()
    registry.add_image(REPO, "arm", architecture="arm64", variant="v8")
    registry.add_image(REPO, "x86")
    explicit = Platform(architecture="amd64", os="linux", variant="v2", features=["cpu:nehalem"])
    with registry_client(registry) as client:
        built = build_index(client, REPO, [("arm", Requirements()), ("x86", explicit)], media_type=DOCKER_MANIFEST_LIST)
    arm, x86 = built.index.manifests
    assert arm.platform == Platform(architecture="arm64", os="linux", variant="v8")
    assert x86.platform == explicit
    assert x86.annotations == {
        "org.hetflow.cpu.microarchitecture": "nehalem",
        "org.hetflow.cpu.level": "2",
        ANNOTATION_SOURCE: "x86",
    }
    assert built.media_type == DOCKER_MANIFEST_LIST and built.tag is None


BUILD_ERRORS = {
    "tag is an index": ([("latest", "")], "already an index"),
    "arch disagrees with the image": (
        [("v3", Requirements(architecture="arm64"))],
        "is an amd64 image, but its entry says arm64",
    ),
    "unknown feature": ([("v3", "avx9000")], "'avx9000' is not one hetflow can check"),
    "missing tag": ([("v9", "")], "manifest hf/app:v9 not found"),
    "no entries": ([], "at least one TAG=FEATURES"),
}


@pytest.mark.parametrize(("entries", "message"), BUILD_ERRORS.values(), ids=BUILD_ERRORS.keys())
def test_build_index_errors(entries: list[tuple[str, object]], message: str) -> None:
    registry, _ = registry_with_builds()
    with registry_client(registry) as client, pytest.raises(ImageError, match=message):
        build_index(client, REPO, entries)  # type: ignore[arg-type]


ENTRIES = {
    "level": ("v3=x86-64-v3", ("v3", parse_requirements("x86-64-v3"))),
    "gpu": ("gpu=gpu:sm_80,cuda>=12.2", ("gpu", Requirements(gpu_sm=(8, 0), cuda=(12, 2)))),
    "bare tag is generic": ("generic", ("generic", Requirements())),
    "generic word": ("base=generic", ("base", Requirements())),
}


@pytest.mark.parametrize(("text", "parsed"), ENTRIES.values(), ids=ENTRIES.keys())
def test_parse_build_entry(text: str, parsed: tuple[str, Requirements]) -> None:
    assert parse_build_entry(text) == parsed


@pytest.mark.parametrize("text", ["=x86-64-v3", "v3=cpu:nosuchcpu"])
def test_parse_build_entry_errors(text: str) -> None:
    with pytest.raises(ImageError, match="build entry"):
        parse_build_entry(text)


def test_build_index_image_needs_a_registry_tag() -> None:
    with pytest.raises(BadDocumentError, match="local podman storage"):
        build_index_image("localhost/app:1", ["v3"])
    with pytest.raises(BadDocumentError, match="leave the @digest out"):
        build_index_image(f"registry.test/app@sha256:{'0' * 64}", ["v3"])


# --- resolve_image from a registry ------------------------------------------------------------------

NODES = {
    "haswell CPU node gets the v3 build": (machine("haswell"), "v3"),
    "old core2 node gets the generic build": (machine("core2"), "generic"),
    "GPU node with cc 8.0 gets the GPU build": (machine("haswell", card("8.0", "12.2")), "gpu"),
}


@pytest.mark.parametrize(("node", "build"), NODES.values(), ids=NODES.keys())
def test_resolve_image_picks_a_build_per_node(node: object, build: str) -> None:
    registry, digests = registry_with_builds(auth="bearer")
    result = resolve_image(REF, node, ImageSource(transport=registry.transport(), username="ci", password="secret"))  # type: ignore[arg-type]
    assert result.chosen == digests[build]
    assert result.pinned == f"registry.test/{REPO}@{digests[build]}"
    assert result.is_index and result.source == "registry" and result.digest == registry.tags[(REPO, "latest")]
    assert [v.chosen for v in result.verdicts].count(True) == 1
    data = json.loads(json.dumps(result.to_json()))
    assert data["chosen"] == digests[build] and len(data["verdicts"]) == 3
    assert result.explain()[0].startswith("chose ")


def test_resolve_image_with_nothing_fitting_raises_only_when_asked() -> None:
    registry, _ = registry_with_builds()
    arm = machine("neoverse_n1", arch="aarch64")
    result = resolve_image(REF, arm, ImageSource(transport=registry.transport()))
    assert result.chosen is None and result.pinned is None
    assert all("amd64 build; node is arm64" in v.reasons for v in result.verdicts)
    with pytest.raises(NoFitError, match=r"no build of registry\.test/hf/app:latest fits node neoverse_n1") as info:
        result.require_chosen()
    assert str(info.value).count("amd64 build; node is arm64") == 3


def test_inspect_image_lists_builds_and_their_needs() -> None:
    registry, digests = registry_with_builds()
    result = inspect_image(REF, ImageSource(transport=registry.transport()))
    assert result.is_index and result.note is None
    assert [(e.digest, e.requirements) for e in result.entries] == [
        (digests["generic"], ["generic"]),
        (digests["v3"], ["x86-64-v3"]),
        (digests["gpu"], ["gpu:sm_80", "cuda>=12.2"]),
    ]
    assert json.loads(json.dumps(result.to_json()))["entries"][1]["platform"] == "linux/amd64/v3"


def test_a_single_manifest_is_not_an_index_but_still_checked() -> None:
    registry = FakeRegistry()
    single = registry.add_image(REPO, "arm", architecture="arm64")
    inspected = inspect_image(f"registry.test/{REPO}:arm", ImageSource(transport=registry.transport()))
    assert not inspected.is_index and inspected.note and inspected.note.startswith("not an index")
    assert [e.platform for e in inspected.entries] == ["linux/arm64"]
    on_arm = resolve_image(
        f"registry.test/{REPO}:arm", machine("neoverse_n1", arch="aarch64"), ImageSource(transport=registry.transport())
    )
    assert on_arm.chosen == single.digest and on_arm.note == inspected.note
    on_x86 = resolve_image(f"registry.test/{REPO}:arm", machine("haswell"), ImageSource(transport=registry.transport()))
    assert on_x86.chosen is None and on_x86.verdicts[0].reasons == ["arm64 build; node is amd64"]


def test_unknown_image_is_named() -> None:
    registry, _ = registry_with_builds()
    with pytest.raises(NotFoundError, match="manifest hf/nothing:latest not found"):
        inspect_image("registry.test/hf/nothing", ImageSource(transport=registry.transport()))


# --- local storage --------------------------------------------------------------------------------


class FakeLocal:
    """Local storage holding one manifest list and one plain image."""

    def __init__(self, lists: dict[str, bytes], images: dict[str, LocalImage]) -> None:
        self.lists, self.images = lists, images

    def manifest_list(self, name: str) -> bytes | None:
        return self.lists.get(name)

    def image(self, name: str) -> LocalImage | None:
        return self.images.get(name)


def local_store() -> FakeLocal:
    podman_list = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST_LIST,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": "sha256:" + "1" * 64,
                "size": 1,
                "platform": {"architecture": "amd64", "os": "linux"},
            },
            {
                "mediaType": OCI_MANIFEST,
                "digest": "sha256:" + "3" * 64,
                "size": 1,
                "platform": {"architecture": "amd64", "os": "linux", "variant": "v3", "features": ["gpu:sm_80"]},
            },
        ],
    }
    image = LocalImage(id="f" * 64, digest="sha256:" + "2" * 64, os="linux", architecture="amd64")
    return FakeLocal(
        {"localhost/t/list:1": json.dumps(podman_list, indent=4).encode()}, {"localhost/t/img:latest": image}
    )


def test_local_manifest_list() -> None:
    local = local_store()
    gpu_node = resolve_image("localhost/t/list:1", machine("haswell", card("8.0")), ImageSource(local=local))
    cpu_node = resolve_image("localhost/t/list:1", machine("haswell"), ImageSource(local=local))
    assert gpu_node.chosen == "sha256:" + "3" * 64 and cpu_node.chosen == "sha256:" + "1" * 64
    assert gpu_node.source == "local" and gpu_node.is_index and gpu_node.pinned == "localhost/t/list@sha256:" + "3" * 64


def test_local_plain_image_is_its_own_answer() -> None:
    result = resolve_image("localhost/t/img", machine("haswell"), ImageSource(local=local_store()))
    assert result.chosen == "sha256:" + "2" * 64 and result.image_id == "f" * 64
    assert result.pinned == "localhost/t/img:latest" and result.note and "not an index" in result.note
    inspected = inspect_image("localhost/t/img", ImageSource(local=local_store()))
    assert not inspected.is_index and inspected.image_id == "f" * 64


def test_missing_local_image_says_what_to_do() -> None:
    with pytest.raises(
        NotFoundError, match="no image localhost/t/none:latest in local podman storage; `podman images`"
    ):
        inspect_image("localhost/t/none", ImageSource(local=local_store()))


def test_results_render() -> None:
    registry, _ = registry_with_builds()
    console = Console(record=True, width=200)
    console.print(resolve_image(REF, machine("core2"), ImageSource(transport=registry.transport())).render())
    console.print(inspect_image(REF, ImageSource(transport=registry.transport())).render())
    text = console.export_text()
    assert "chosen" in text and "x86-64-v3 build needs AVX2, FMA and BMI2" in text and "gpu:sm_80, cuda>=12.2" in text


def test_resolving_loads_the_registry_client_only_when_a_registry_is_asked() -> None:
    """`hetflow plan` checks every image against every node class through ``resolve_image``;
    a local image needs no registry, so neither the client nor httpx (with the click and
    pygments its own CLI loads, about 0.2 s) is imported until a client is made."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from hetflow.images import NotFoundError, ResolveResult, parse_reference, resolve_image\n"
        "print('httpx' in sys.modules, 'hetflow.images.distribution.client' in sys.modules)\n"
        "from hetflow.images import RegistryClient\n"
        "print('httpx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["False False", "True"]

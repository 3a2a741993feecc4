"""A machine type's view of an index: which build, which bytes, which digest."""

from __future__ import annotations

import hashlib
import json

import pytest

from hetflow.images import DOCKER_MANIFEST_LIST, OCI_INDEX, Descriptor, parse_index
from hetflow.inventory import profile_node
from hetflow.registry import FakeRegistry
from hetflow.registry.matching.views import Filtered, NoBuildFits, filter_index, for_runtimes

BUILDS = {
    "generic": [],
    "v3": ["x86-64-v3"],
    "v4": ["x86-64-v4"],
    "sm75": ["x86-64-v3", "gpu:sm_75"],
    "sm80": ["x86-64-v3", "gpu:sm_80", "cuda>=12.2"],
}


def _index(docker_list: bool = False) -> tuple[FakeRegistry, bytes]:
    fake = FakeRegistry()
    digest = fake.push_builds("lab/app", "v1", BUILDS, docker_list=docker_list)
    return fake, fake.manifests["lab/app"][digest][0]


def _build_of(fake: FakeRegistry, digest: str) -> str:
    manifest = json.loads(fake.manifests["lab/app"][digest][0])
    config = json.loads(fake.blobs[manifest["config"]["digest"]])
    return str(config["config"]["Env"][0].removeprefix("BUILD="))


@pytest.mark.parametrize(
    ("profile", "build"),
    [
        ("x86-64-v2", "generic"),
        ("haswell-cpu", "v3"),
        ("zen3-cpu", "v3"),
        ("skylake-avx512-cpu", "v4"),
        ("t4-node", "sm75"),
        ("a100-node", "sm80"),
        ("h100-node", "sm80"),
    ],
)
def test_each_machine_type_sees_the_one_build_it_should_run(profile: str, build: str) -> None:
    fake, raw = _index()
    view = filter_index(raw, profile_node(profile))
    assert isinstance(view, Filtered)
    entries = json.loads(view.body)["manifests"]
    assert len(entries) == 1
    assert _build_of(fake, entries[0]["digest"]) == build


def test_the_view_has_its_own_digest_and_is_canonical() -> None:
    _, raw = _index()
    view = filter_index(raw, profile_node("a100-node"))
    assert isinstance(view, Filtered)
    assert view.digest == "sha256:" + hashlib.sha256(view.body).hexdigest()
    assert view.digest != "sha256:" + hashlib.sha256(raw).hexdigest()
    data = json.loads(view.body)
    assert view.body == json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    assert (data["schemaVersion"], data["mediaType"]) == (2, OCI_INDEX)


def test_the_same_index_and_type_give_the_same_bytes() -> None:
    _, raw = _index()
    first = filter_index(raw, profile_node("haswell-cpu"))
    # The same index written another way (other whitespace, other key order).
    rewritten = json.dumps(json.loads(raw), indent=None, sort_keys=False).encode()
    again = [filter_index(raw, profile_node("haswell-cpu")), filter_index(rewritten, profile_node("haswell-cpu"))]
    assert isinstance(first, Filtered)
    assert all(isinstance(v, Filtered) and v.body == first.body for v in again)


def test_alike_types_share_a_view_and_different_ones_do_not() -> None:
    _, raw = _index()
    views = {p: filter_index(raw, profile_node(p)) for p in ("haswell-cpu", "zen3-cpu", "x86-64-v2")}
    digests = {p: v.digest for p, v in views.items() if isinstance(v, Filtered)}
    assert digests["haswell-cpu"] == digests["zen3-cpu"]
    assert digests["haswell-cpu"] != digests["x86-64-v2"]


def test_a_docker_manifest_list_stays_one() -> None:
    _, raw = _index(docker_list=True)
    view = filter_index(raw, profile_node("x86-64-v2"))
    assert isinstance(view, Filtered)
    assert json.loads(view.body)["mediaType"] == DOCKER_MANIFEST_LIST


def test_index_fields_the_proxy_does_not_know_are_kept() -> None:
    _, raw = _index()
    data = json.loads(raw)
    data["annotations"] = {"org.opencontainers.image.source": "https://example.org/app"}
    data["artifactType"] = "application/x-test"
    data["manifests"][0]["annotations"] = {"org.example.note": "first"}
    view = filter_index(json.dumps(data).encode(), profile_node("x86-64-v2"))
    assert isinstance(view, Filtered)
    kept = json.loads(view.body)
    assert kept["annotations"] == data["annotations"]
    assert kept["artifactType"] == "application/x-test"
    assert kept["manifests"][0]["annotations"] == {"org.example.note": "first"}


def test_no_fit_lists_every_entry_and_why() -> None:
    _, raw = _index()
    view = filter_index(raw, profile_node("neoverse-n1-cpu"))
    assert isinstance(view, NoBuildFits)
    assert len(view.reasons) == len(BUILDS)
    assert all("amd64 build; node is arm64" in r for r in view.reasons)


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        pytest.param(
            {"architecture": "amd64", "os": "linux", "variant": "v3"},
            {"architecture": "amd64", "os": "linux", "features": ["x86-64-v3"]},
            id="amd64-level",
        ),
        pytest.param(
            {"architecture": "amd64", "os": "linux", "variant": "v3", "features": ["x86-64-v3", "gpu:sm_80"]},
            {"architecture": "amd64", "os": "linux", "features": ["x86-64-v3", "gpu:sm_80"]},
            id="feature-already-there",
        ),
        pytest.param(
            {"architecture": "arm64", "os": "linux", "variant": "v8.2"},
            {"architecture": "arm64", "os": "linux", "features": ["cpu:armv8.2a"]},
            id="arm64-version",
        ),
        pytest.param(
            {"architecture": "arm", "os": "linux", "variant": "v7"},
            {"architecture": "arm", "os": "linux", "variant": "v7"},
            id="arm32-untouched",
        ),
        pytest.param(
            {"architecture": "amd64", "os": "linux"}, {"architecture": "amd64", "os": "linux"}, id="no-variant"
        ),
    ],
)
def test_cpu_variants_move_into_features_for_literal_runtimes(platform: dict[str, object], expected: object) -> None:
    desc = Descriptor.model_validate(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + "a" * 64,
            "size": 1,
            "platform": platform,
        }
    )
    moved = for_runtimes(desc)
    assert moved.model_dump(by_alias=True, exclude_none=True)["platform"] == expected


def test_the_view_parses_as_an_index() -> None:
    _, raw = _index()
    view = filter_index(raw, profile_node("t4-node"))
    assert isinstance(view, Filtered)
    assert len(parse_index(view.body).manifests) == 1

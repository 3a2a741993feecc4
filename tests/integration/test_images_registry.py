"""A real registry on loopback (Debian's docker-registry), real pushes with podman: one
image with three builds, and hetflow picking a different one for each kind of node.

Nodes are built as values (a haswell CPU node, an old core2 node, a node with a GPU of
compute capability 8.0 whose GPU is fake: cuda_version is set by hand).  Nothing here
runs GPU code."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetflow.config import engine_env, find_engine
from hetflow.images.layout import read_layout
from hetflow.images.oci import OCI_INDEX
from hetflow.images.service import ImageSource, inspect_image, resolve_image
from tests.integration.registry import Registry, push_builds, require_tools, start_registry, tiny_build_image
from tests.unit.test_images_match import card, machine

pytestmark = pytest.mark.integration

REPO = "hetflow/app"
BUILDS = {"generic": "", "v3": "x86-64-v3", "gpu": "gpu:sm_80,cuda>=12.2"}
NODES = {
    "haswell": (machine("haswell"), "v3"),
    "core2": (machine("core2"), "generic"),
    "gpu-cc8.0": (machine("haswell", card("8.0", "12.2")), "gpu"),
}


def podman(*args: str) -> str:
    done = subprocess.run(
        [find_engine(), *args], env=engine_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"podman {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def skopeo_raw(ref: str) -> dict[str, object]:
    done = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data: dict[str, object] = json.loads(done.stdout)
    return data


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    require_tools("docker-registry", "podman", "skopeo")
    with start_registry(tmp_path_factory.mktemp("images")) as running:
        yield running


@pytest.fixture(scope="module")
def app(registry: Registry) -> dict[str, str]:
    """REPO:generic, :v3 and :gpu pushed with podman, and REPO:latest, their index.
    Returns {build: manifest digest} plus {"index": index digest}."""
    index_digest = push_builds(registry, REPO, BUILDS)
    with registry.client() as client:
        digests = {build: client.head_manifest(REPO, build).digest for build in BUILDS}
    return {**digests, "index": index_digest}


def test_the_index_holds_the_features(registry: Registry, app: dict[str, str]) -> None:
    raw = skopeo_raw(registry.ref(REPO))
    assert raw["mediaType"] == OCI_INDEX
    entries = raw["manifests"]
    assert isinstance(entries, list)
    assert [e["digest"] for e in entries] == [app["generic"], app["v3"], app["gpu"]]
    assert [e["platform"].get("features") for e in entries] == [None, ["x86-64-v3"], ["gpu:sm_80", "cuda>=12.2"]]
    assert entries[1]["platform"]["variant"] == "v3"
    assert entries[2]["annotations"]["org.hetflow.gpu.sm"] == "80"


@pytest.mark.parametrize(("node_name", "build"), [(k, v[1]) for k, v in NODES.items()], ids=NODES.keys())
def test_each_node_gets_its_build(registry: Registry, app: dict[str, str], node_name: str, build: str) -> None:
    node = NODES[node_name][0]
    result = resolve_image(registry.ref(REPO), node, ImageSource(insecure=True))
    assert result.chosen == app[build], "\n".join(result.explain())
    assert result.digest == app["index"]
    assert result.pinned == f"{registry.host}/{REPO}@{app[build]}"


def test_three_nodes_three_digests(registry: Registry, app: dict[str, str]) -> None:
    chosen = {resolve_image(registry.ref(REPO), node, ImageSource(insecure=True)).chosen for node, _ in NODES.values()}
    assert chosen == {app["generic"], app["v3"], app["gpu"]}


def test_the_pinned_build_is_the_image_that_was_pushed(registry: Registry, app: dict[str, str]) -> None:
    """Pull what hetflow chose for the core2 node by digest and ask it which build it is."""
    result = resolve_image(registry.ref(REPO), machine("core2"), ImageSource(insecure=True))
    assert result.pinned is not None
    podman("pull", "--tls-verify=false", "--quiet", result.pinned)
    try:
        out = podman("run", "--rm", "--network=none", result.pinned, "sh", "-c", "echo $BUILD")
    finally:
        # By name: the pulled image may share its id with the local build it came from.
        subprocess.run([find_engine(), "rmi", result.pinned], env=engine_env(), capture_output=True, check=False)
    assert out.strip() == "generic"


def test_inspect(registry: Registry, app: dict[str, str]) -> None:
    result = inspect_image(registry.ref(REPO), ImageSource(insecure=True))
    assert result.is_index and result.digest == app["index"]
    assert [e.requirements for e in result.entries] == [["generic"], ["x86-64-v3"], ["gpu:sm_80", "cuda>=12.2"]]
    single = inspect_image(registry.ref(REPO, "v3"), ImageSource(insecure=True))
    assert not single.is_index and single.digest == app["v3"] and single.note and "not an index" in single.note


def test_skopeo_copy_to_an_oci_layout_keeps_the_features(
    registry: Registry, app: dict[str, str], tmp_path: Path
) -> None:
    target = tmp_path / "layout"
    subprocess.run(
        ["skopeo", "copy", "--all", "--src-tls-verify=false", f"docker://{registry.ref(REPO)}", f"oci:{target}:latest"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    index = read_layout(target).image_index("latest")
    assert [d.digest for d in index.manifests] == [app["generic"], app["v3"], app["gpu"]]
    assert [d.platform.features if d.platform else None for d in index.manifests] == [
        [],
        ["x86-64-v3"],
        ["gpu:sm_80", "cuda>=12.2"],
    ]


def test_a_podman_built_manifest_list(registry: Registry, app: dict[str, str]) -> None:
    """The podman route: `manifest create/add/annotate --features`, then `manifest push
    --all`.  podman 4.3 ignores --features on `manifest add`, so they are set with
    `manifest annotate`; the Docker list format keeps them (the OCI format drops them)."""
    local = "localhost/hetflow-test/images-list:latest"
    subprocess.run([find_engine(), "manifest", "rm", local], env=engine_env(), capture_output=True, check=False)
    podman("manifest", "create", local)
    try:
        images = {build: tiny_build_image(build) for build in BUILDS}
        for build in BUILDS:
            podman("manifest", "add", local, f"containers-storage:{images[build]}")
        listed = json.loads(podman("manifest", "inspect", local))
        by_build = dict(zip(BUILDS, [m["digest"] for m in listed["manifests"]], strict=True))
        for build, features in BUILDS.items():
            if features:
                podman("manifest", "annotate", "--features", features, local, by_build[build])

        # Local storage: hetflow reads the list with `podman manifest inspect`.
        local_choice = resolve_image(local, machine("haswell", card("8.0", "12.2")))
        assert local_choice.source == "local" and local_choice.chosen == by_build["gpu"]

        target = registry.ref("hetflow/podman-list")
        podman("manifest", "push", "--all", "--tls-verify=false", "--quiet", local, f"docker://{target}")
        raw = skopeo_raw(target)
        assert [m["platform"].get("features") for m in raw["manifests"]] == [  # type: ignore[attr-defined]
            None,
            ["x86-64-v3"],
            ["gpu:sm_80", "cuda>=12.2"],
        ]
        chosen = {
            build: resolve_image(target, node, ImageSource(insecure=True)).chosen for node, build in NODES.values()
        }
        pushed = [m["digest"] for m in raw["manifests"]]  # type: ignore[attr-defined]
        assert chosen == dict(zip(BUILDS, pushed, strict=True))
    finally:
        subprocess.run([find_engine(), "manifest", "rm", local], env=engine_env(), capture_output=True, check=False)

"""The hardware-matched example (examples/hwmatch): three real builds of one C program
(gcc -march=x86-64, -march=x86-64-v3, and a "GPU" build standing for a CUDA sm_80
one), pushed to Debian's docker-registry on loopback as one index.

hetflow must pick the generic build for an x86-64-v2 machine, the v3 build for a
Haswell and the GPU build for an A100 node; the v3 build it pins must be the one
that was pushed (the binary in it says BUILD=v3), and `hetflow run` of the example
workflow must run every step from the index, pinned by digest to this machine's
build.  No GPU code runs: the GPU build is CPU code under a GPU label.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from demo.hwmatch import TEMPLATE, render_workflow
from demo.images import HWMATCH_BUILDS, build_hwmatch_images, hwmatch_gcc_args

from hetflow.config import engine_env, find_engine
from hetflow.errors import EngineError
from hetflow.images.service import ImageSource, build_index_image, resolve_image
from hetflow.inventory import discover
from hetflow.inventory.profiles import profile_node
from tests.integration.hfkit import Hetflow, step_out
from tests.integration.registry import Registry, push_image, require_tools, start_registry

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REPO = "hetflow-examples/whichbuild"
# machine description (a built-in profile) -> the build (image tag) it must get
EXPECTED = {"x86-64-v2": "generic", "haswell-cpu": "v3", "a100-node": "gpu"}
NAMES = {b.tag: b.name for b in HWMATCH_BUILDS}  # tag -> what the binary prints


def podman(*args: str) -> str:
    done = subprocess.run(
        [find_engine(), *args], env=engine_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def fields(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if re.match(r"[A-Za-z_]+=", line))


@pytest.fixture(scope="module")
def images() -> list[str]:
    require_tools("podman", "gcc")
    return build_hwmatch_images(EXAMPLES, log=lambda _: None)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory, images: list[str]) -> Iterator[tuple[Registry, dict[str, str]]]:
    """The three builds pushed as REPO:{generic,v3,gpu} and their index as REPO:latest,
    built the way `hetflow images build-index` builds it.  Yields the registry and
    {tag: manifest digest, "index": index digest}."""
    require_tools("docker-registry", "podman")
    with start_registry(tmp_path_factory.mktemp("hwmatch")) as registry:
        for build in HWMATCH_BUILDS:
            push_image(registry, build.image, REPO, build.tag)
        built = build_index_image(
            registry.ref(REPO), [b.index_entry for b in HWMATCH_BUILDS], ImageSource(insecure=True)
        )
        with registry.client() as client:
            digests = {b.tag: client.head_manifest(REPO, b.tag).digest for b in HWMATCH_BUILDS}
        yield registry, {**digests, "index": built.digest}


def test_the_builds_are_compiled_differently_and_agree(images: list[str]) -> None:
    """Each local image's binary says which build it is and what it was compiled for;
    all three compute the same checksum."""
    seen: dict[str, dict[str, str]] = {}
    checksums: set[str] = set()
    for build in HWMATCH_BUILDS:
        locked = ("--rm", "--network=none", "--read-only", "--user=1000:1000", "--cap-drop=all")
        out = podman("run", *locked, build.image, "whichbuild", "200000", "10")
        seen[build.tag] = fields(out)
        checksum = re.search(r"checksum=(\S+ \S+)", out)
        assert checksum is not None, out
        checksums.add(checksum.group(1))
        assert seen[build.tag]["BUILD"] == build.name
        assert seen[build.tag]["MARCH"] == build.march
    assert "avx2" in seen["v3"]["compiled_for"].split() and "fma" in seen["v3"]["compiled_for"].split()
    assert "avx2" not in seen["generic"]["compiled_for"].split()
    assert len(checksums) == 1 and checksums.pop().endswith(" ok"), checksums


@pytest.mark.parametrize(("machine", "tag"), EXPECTED.items(), ids=EXPECTED.keys())
def test_each_machine_description_gets_its_build(
    pushed: tuple[Registry, dict[str, str]], hf: Hetflow, machine: str, tag: str
) -> None:
    registry, digests = pushed
    result = resolve_image(registry.ref(REPO), profile_node(machine), ImageSource(insecure=True))
    assert result.chosen == digests[tag], "\n".join(result.explain())
    assert result.digest == digests["index"]
    assert result.pinned == f"{registry.host}/{REPO}@{digests[tag]}"
    # The CLI, with the profile name as --node, says the same.
    cli = hf("images", "resolve", registry.ref(REPO), "--node", machine, "--json")
    assert f'"chosen": "{digests[tag]}"' in cli.stdout


def test_the_pinned_v3_build_is_the_v3_binary(pushed: tuple[Registry, dict[str, str]]) -> None:
    registry, digests = pushed
    pinned = resolve_image(registry.ref(REPO), profile_node("haswell-cpu"), ImageSource(insecure=True)).pinned
    assert pinned == f"{registry.host}/{REPO}@{digests['v3']}"
    podman("pull", "--quiet", "--tls-verify=false", pinned)
    # No `podman rmi` afterwards: by digest it would remove the local v3 image too
    # (the pulled image is that image).
    out = podman("run", "--rm", "--network=none", pinned, "whichbuild", "100000", "10")
    assert fields(out)["BUILD"] == "v3"
    assert fields(out)["MARCH"] == "x86-64-v3"


def test_hetflow_run_pins_the_workflow_to_this_machines_build(
    pushed: tuple[Registry, dict[str, str]], hf: Hetflow, tmp_path: Path
) -> None:
    registry, digests = pushed
    node = discover(hf.home)
    chosen = resolve_image(registry.ref(REPO), node, ImageSource(insecure=True)).chosen
    if (node.cpu.x86_64_level or 0) >= 3 and not node.gpus:
        assert chosen == digests["v3"], "an x86-64-v3 machine without a GPU must get the v3 build"
    tag = next(t for t, d in digests.items() if d == chosen)

    workflow = tmp_path / "hwmatch.yaml"
    workflow.write_text(render_workflow((EXAMPLES / TEMPLATE).read_text(), registry.host))
    hf("run", str(workflow), "-p", "n=200000", "-p", "reps=10")
    run_id = hf.last_run()
    shown = hf.show(run_id)
    assert shown["state"] == "succeeded", shown
    pinned = f"{registry.host}/{REPO}@{chosen}"
    images = {a["image"] for step in shown["steps"] for a in step["attempt_history"]}
    assert images == {pinned}
    assert "@sha256:" in pinned
    report = (step_out(hf, run_id, "saxpy") / "report.txt").read_text()
    assert fields(report)["BUILD"] == NAMES[tag]


def test_template_needs_its_placeholder() -> None:
    with pytest.raises(Exception, match="REGISTRY"):
        render_workflow("apiVersion: hetflow/v1\n", "127.0.0.1:5000")


def test_missing_gcc_names_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, **kw: None if name == "gcc" else which(name, **kw))
    with pytest.raises(EngineError, match=r"apt-get install -y gcc libc6-dev"):
        build_hwmatch_images(EXAMPLES, log=lambda _: None)


def test_gcc_command() -> None:
    v3 = next(b for b in HWMATCH_BUILDS if b.tag == "v3")
    assert hwmatch_gcc_args(v3, "w.c", "w") == [
        "gcc", "-O2", "-static", "-march=x86-64-v3", '-DBUILD="v3"', '-DMARCH="x86-64-v3"', "-o", "w", "w.c",
    ]  # fmt: skip

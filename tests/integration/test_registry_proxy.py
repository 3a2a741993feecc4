"""The registry proxy with real clients nobody here wrote: podman and skopeo pull
through it from Debian's docker-registry on loopback.

Each machine type must get the build it can run (checked by running the pulled image:
its env says BUILD=...), under the view's own digest; auth failures, a corrupted
upstream blob and upstream errors must reach podman/skopeo as failures.  Pulls go into
a private podman storage (--root), so a layer the host already has is never skipped.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hetflow.cli.oci.registry import login_command
from hetflow.config import engine_env, find_engine
from hetflow.inventory.profiles import profile_node
from hetflow.registry import RunningProxy, start_in_thread
from hetflow.registry.settings import MachineTypeDecl, Settings
from tests.integration.registry import Registry, push_builds, require_tools, start_registry

REPO = "hf/app"
BUILDS = {"generic": "", "v3": "x86-64-v3", "gpu": "x86-64-v3,gpu:sm_80,cuda>=12.2"}
# machine type (a built-in profile) -> the build it must get
EXPECTED = {"x86-64-v2": "generic", "haswell-cpu": "v3", "a100-node": "gpu"}


@dataclass
class Podman:
    """podman with its own storage under a test folder (the run root must be a short
    path: podman refuses one over 50 characters, so it goes under /tmp), vfs driver."""

    root: Path

    @property
    def runroot(self) -> Path:
        return Path("/tmp") / f"hf-rr-{hashlib.sha256(str(self.root).encode()).hexdigest()[:12]}"

    def __call__(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        # vfs: no overlay mount is left behind in the test folder.
        storage = ["--root", str(self.root / "storage"), "--runroot", str(self.runroot), "--storage-driver", "vfs"]
        argv = [find_engine(), *storage, *args]
        done = subprocess.run(argv, env=engine_env(), capture_output=True, text=True, input=input, timeout=300)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done


def skopeo(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"skopeo {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


@pytest.fixture(autouse=True)
def _drop_runroots(tmp_path: Path) -> Iterator[None]:
    yield
    for path in Path("/tmp").glob("hf-rr-*"):
        if any(Podman(p).runroot == path for p in tmp_path.iterdir()):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Registry, str]]:
    require_tools("docker-registry", "podman", "skopeo")
    registry = start_registry(tmp_path_factory.mktemp("upstream"))
    try:
        yield registry, push_builds(registry, REPO, BUILDS)
    finally:
        registry.stop()


def _proxy(registry: Registry, state: Path, **changes: object) -> RunningProxy:
    types = tuple(MachineTypeDecl(profile=p) for p in EXPECTED)
    settings = Settings(upstream=registry.url, state_dir=state, machine_types=types, **changes)  # type: ignore[arg-type]
    return start_in_thread(settings)


@pytest.fixture
def proxy(upstream: tuple[Registry, str], tmp_path: Path) -> Iterator[RunningProxy]:
    running = _proxy(upstream[0], tmp_path / "state")
    try:
        yield running
    finally:
        running.stop()


def _authfile(proxy: RunningProxy, state: Path, machine_type: str, tmp_path: Path) -> str:
    """podman login with a predeclared type's token; returns the auth file."""
    authfile = tmp_path / f"auth-{machine_type}.json"
    token = (state / "tokens" / machine_type).read_text().strip()
    Podman(tmp_path / "podman")(
        "login", "--tls-verify=false", "--authfile", str(authfile), "-u", machine_type, "--password-stdin",
        proxy.host, input=token,
    )  # fmt: skip
    return str(authfile)


def _build_in(podman: Podman, image: str) -> str:
    return podman("run", "--rm", "--network", "none", image, "sh", "-c", "echo $BUILD").stdout.strip()


def test_podman_pulls_the_build_each_machine_type_can_run(proxy: RunningProxy, tmp_path: Path) -> None:
    image = f"{proxy.host}/{REPO}:latest"
    seen = {}
    for machine_type, build in EXPECTED.items():
        podman = Podman(tmp_path / machine_type)
        # `hetflow registry login` as a node of this hardware would run it.
        result = login_command(
            proxy.url, profile_node(machine_type), find_engine(), authfile=tmp_path / f"{machine_type}.json"
        )
        podman("pull", "--tls-verify=false", "--authfile", str(tmp_path / f"{machine_type}.json"), image)
        seen[machine_type] = _build_in(podman, image)
        assert seen[machine_type] == build, f"{machine_type} ({result.machine_type}) got {seen[machine_type]}"
    assert len(set(seen.values())) == len(EXPECTED)


def test_straight_from_upstream_podman_takes_the_first_entry(upstream: tuple[Registry, str], tmp_path: Path) -> None:
    # The problem the proxy solves (MACHINE.md): without it every host gets `generic`.
    registry, _ = upstream
    podman = Podman(tmp_path / "direct")
    podman("pull", "--tls-verify=false", registry.ref(REPO))
    assert _build_in(podman, registry.ref(REPO)) == "generic"


def test_skopeo_sees_the_views_digest_and_fetches_by_it(
    upstream: tuple[Registry, str], proxy: RunningProxy, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    auth = _authfile(proxy, state, "a100-node", tmp_path)
    raw = skopeo("inspect", "--raw", "--tls-verify=false", "--authfile", auth, f"docker://{proxy.host}/{REPO}:latest")
    body = raw.stdout.encode()
    view_digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert view_digest != upstream[1]
    assert len(json.loads(body)["manifests"]) == 1
    by_digest = skopeo(
        "inspect", "--tls-verify=false", "--authfile", auth, f"docker://{proxy.host}/{REPO}@{view_digest}"
    )
    info = json.loads(by_digest.stdout)
    assert info["Digest"] == view_digest and "BUILD=gpu" in info["Env"]
    # podman pulls by that digest too.
    podman = Podman(tmp_path / "bydigest")
    podman("pull", "--tls-verify=false", "--authfile", auth, f"{proxy.host}/{REPO}@{view_digest}")
    # The upstream's own index digest gets the upstream's bytes.
    whole = skopeo(
        "inspect", "--raw", "--tls-verify=false", "--authfile", auth, f"docker://{proxy.host}/{REPO}@{upstream[1]}"
    )
    assert "sha256:" + hashlib.sha256(whole.stdout.encode()).hexdigest() == upstream[1]
    assert len(json.loads(whole.stdout)["manifests"]) == len(BUILDS)


def test_auth_failures_reach_the_clients(proxy: RunningProxy, tmp_path: Path) -> None:
    state = tmp_path / "state"
    ref = f"docker://{proxy.host}/{REPO}:latest"
    empty = tmp_path / "empty.json"
    empty.write_text('{"auths": {}}')
    nobody = skopeo("inspect", "--raw", "--tls-verify=false", "--authfile", str(empty), ref, check=False)
    assert nobody.returncode != 0 and "unauthorized: no credentials: log in first" in nobody.stderr.lower()
    podman = Podman(tmp_path / "bad")
    bad = podman(
        "login", "--tls-verify=false", "--authfile", str(tmp_path / "bad.json"), "-u", "a100-node", "-p", "hft_wrong",
        proxy.host, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "invalid username/password" in bad.stderr.lower()
    # Type x86-64-v2 cannot read a100-node's view by its digest.
    gpu_auth = _authfile(proxy, state, "a100-node", tmp_path)
    cpu_auth = _authfile(proxy, state, "x86-64-v2", tmp_path)
    gpu_view = skopeo("inspect", "--raw", "--tls-verify=false", "--authfile", gpu_auth, ref).stdout.encode()
    digest = "sha256:" + hashlib.sha256(gpu_view).hexdigest()
    denied = skopeo(
        "inspect", "--raw", "--tls-verify=false", "--authfile", cpu_auth, f"docker://{proxy.host}/{REPO}@{digest}",
        check=False,
    )  # fmt: skip
    assert denied.returncode != 0 and "denied" in denied.stderr.lower()


def _message(stderr: str, host: str) -> str:
    """skopeo's error message, with the registry's address taken out."""
    match = re.search(r'msg="(.*)"', stderr)
    return (match[1] if match else stderr).replace(host, "HOST")


def test_upstream_errors_come_back_as_the_upstream_said_them(
    upstream: tuple[Registry, str], proxy: RunningProxy, tmp_path: Path
) -> None:
    registry, _ = upstream
    auth = _authfile(proxy, tmp_path / "state", "x86-64-v2", tmp_path)
    for ref in (f"{REPO}:nope", "hf/none:latest", f"{REPO}@sha256:{'1' * 64}"):
        direct = skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/{ref}", check=False)
        proxied = skopeo(
            "inspect", "--raw", "--tls-verify=false", "--authfile", auth, f"docker://{proxy.host}/{ref}", check=False
        )
        assert direct.returncode != 0 and proxied.returncode != 0
        said = _message(direct.stderr, registry.host)
        assert "manifest unknown" in said
        assert _message(proxied.stderr, proxy.host) == said


def test_the_view_is_the_same_bytes_after_a_restart(upstream: tuple[Registry, str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    views = []
    digest = ""
    for _ in range(2):
        running = _proxy(upstream[0], state)
        try:
            auth = _authfile(running, state, "haswell-cpu", tmp_path)
            if digest:  # first thing after the restart: by digest, before any tag request
                skopeo(
                    "inspect",
                    "--raw",
                    "--tls-verify=false",
                    "--authfile",
                    auth,
                    f"docker://{running.host}/{REPO}@{digest}",
                )
            got = skopeo(
                "inspect", "--raw", "--tls-verify=false", "--authfile", auth, f"docker://{running.host}/{REPO}:latest"
            )
            views.append(got.stdout)
            digest = "sha256:" + hashlib.sha256(got.stdout.encode()).hexdigest()
        finally:
            running.stop()
    assert views[0] == views[1]


def _blob_file(registry: Registry, digest: str) -> Path:
    hex_ = digest.removeprefix("sha256:")
    return registry.root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex_[:2] / hex_ / "data"


@pytest.mark.parametrize(
    "buffer",
    [pytest.param(8 * 1024 * 1024, id="buffer-8MiB"), pytest.param(0, id="buffer-0")],
)
def test_a_corrupted_upstream_blob_never_reaches_a_client_as_success(tmp_path: Path, buffer: int) -> None:
    require_tools("docker-registry", "podman", "skopeo")
    with start_registry(tmp_path / "upstream") as registry:
        push_builds(registry, REPO, BUILDS)
        with registry.client() as client:
            index = json.loads(client.get_manifest(REPO, "latest")[0])
            v3 = next(m for m in index["manifests"] if "x86-64-v3" in m["platform"].get("features", []))
            layer = json.loads(client.get_manifest(REPO, v3["digest"])[0])["layers"][0]["digest"]
        blob = _blob_file(registry, layer)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF  # same size, other bytes
        blob.write_bytes(bytes(data))
        running = _proxy(registry, tmp_path / "state", verify_buffer_bytes=buffer)
        try:
            auth = _authfile(running, tmp_path / "state", "haswell-cpu", tmp_path)
            ref = f"{running.host}/{REPO}:latest"
            copied = skopeo("copy", "--src-tls-verify=false", "--src-authfile", auth, f"docker://{ref}",
                            f"oci:{tmp_path / 'layout'}:x", check=False)  # fmt: skip
            assert copied.returncode != 0, copied.stdout
            podman = Podman(tmp_path / "pull")
            pulled = podman("pull", "--tls-verify=false", "--authfile", auth, "--retry", "0", ref, check=False)
            if pulled.returncode != 0 and "unknown flag: --retry" in pulled.stderr:
                pulled = podman("pull", "--tls-verify=false", "--authfile", auth, ref, check=False)
            assert pulled.returncode != 0, pulled.stdout
            assert podman("image", "exists", ref, check=False).returncode != 0
            cached = tmp_path / "state" / "cache" / "blobs" / "sha256" / layer.removeprefix("sha256:")
            assert not cached.exists()
        finally:
            running.stop()

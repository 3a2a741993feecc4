"""A real registry on loopback for integration tests, and multi-build test images in it.

    registry = start_registry(tmp_path)            # Debian's docker-registry on 127.0.0.1:PORT
    digest = push_builds(registry, "hf/app", {     # one tiny image per build, then an index
        "generic": "",
        "v3": "x86-64-v3",
        "gpu": "gpu:sm_80,cuda>=12.2",
    })                                             # -> 127.0.0.1:PORT/hf/app:latest
    ...
    registry.stop()

or as a context manager: ``with start_registry(tmp_path) as registry: ...``.

Each build is a busybox image (``demo.images.build_tiny_image``) whose env says
which build it is (``BUILD=v3``), so ``podman run IMAGE sh -c 'echo $BUILD'`` shows
which one a runtime pulled.  The builds are pushed with ``podman push
--tls-verify=false`` under their own tags (``hf/app:v3``) and assembled into an OCI
index by ``hetflow.images.distribution.index_build.build_index``, pushed as ``hf/app:latest``.

Tests that need these tools call ``require_tools()`` first: it skips when
docker-registry or podman is missing (``apt-get install -y docker-registry podman``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import pytest
from demo.images import build_tiny_image

from hetflow.config import engine_env, find_engine
from hetflow.images import Requirements, parse_requirements
from hetflow.images.distribution.client import RegistryClient
from hetflow.images.distribution.index_build import build_index
from tests.integration.hfkit import free_port

__all__ = ["Registry", "push_builds", "require_tools", "start_registry", "tiny_build_image"]

BuildSpec = Requirements | str | Iterable[str]


def require_tools(*tools: str) -> None:
    """Skip the calling test unless every tool is on PATH (default: the registry and podman)."""
    for tool in tools or ("docker-registry", "podman"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install -y {tool})")


@dataclass
class Registry:
    """A running ``docker-registry``: ``url`` is http://127.0.0.1:PORT, ``host`` is
    127.0.0.1:PORT (what image references start with)."""

    url: str
    host: str
    root: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    log: Path = field(repr=False)

    def client(self) -> RegistryClient:
        return RegistryClient(self.url)

    def ref(self, repo: str, tag: str = "latest") -> str:
        return f"{self.host}/{repo}:{tag}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def __enter__(self) -> Registry:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_registry(tmp_path: Path, *, timeout: float = 15) -> Registry:
    """Start ``docker-registry serve CONFIG`` on a free loopback port with its storage under
    ``tmp_path``; returns once ``/v2/`` answers.  Call ``stop()`` (or use ``with``)."""
    require_tools("docker-registry")
    root = Path(tmp_path) / "registry"
    root.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for _attempt in range(3):  # the free port may be taken between probing and binding
        port = free_port()
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{port}\n"
        )
        log = root / f"registry-{port}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
        registry = Registry(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", root, process, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{registry.url}/v2/", timeout=1).status_code == 200:
                    return registry
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        registry.stop()
        last_error = log.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"docker-registry did not start on loopback:\n{last_error}")


def _podman(*args: str) -> str:
    done = subprocess.run(
        [find_engine(), *args], env=engine_env(), capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def tiny_build_image(build: str) -> str:
    """The local busybox image for one build: ``localhost/hetflow-test/build-BUILD``, with
    ``BUILD=<build>`` in its env (so each build has its own manifest digest)."""
    name = f"localhost/hetflow-test/build-{re.sub(r'[^a-z0-9]+', '-', build.lower()).strip('-')}:latest"
    return build_tiny_image(name, env={"BUILD": build})


def push_image(registry: Registry, image: str, repo: str, tag: str) -> str:
    """``podman push --tls-verify=false IMAGE HOST/REPO:TAG``; returns the pushed reference."""
    target = registry.ref(repo, tag)
    _podman("push", "--tls-verify=false", "--quiet", image, f"docker://{target}")
    return target


def push_builds(
    registry: Registry, repo: str, builds: Mapping[str, BuildSpec], *, tag: str = "latest", variant: bool = True
) -> str:
    """Push one tiny image per build as ``REPO:<build>`` and an index of them, in the
    order given, as ``REPO:<tag>``; returns the index digest.  A build's spec is
    Requirements, feature text ("x86-64-v3,gpu:sm_80") or a list of features;
    "" is a generic build."""
    require_tools("podman")
    entries: list[tuple[str, Requirements]] = []
    for build, spec in builds.items():
        push_image(registry, tiny_build_image(build), repo, build)
        entries.append((build, spec if isinstance(spec, Requirements) else parse_requirements(spec)))
    with registry.client() as client:
        return build_index(client, repo, entries, tag=tag, variant=variant).digest

"""Integration tests: real podman containers, real device nodes (fake GPUs made with
mknod: these tests prove isolation, not GPU computation), the real CLI in subprocesses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from demo.images import build_mpi_image, build_tiny_image

from tests.integration.hfkit import BUSYBOX, HOSTILE, SERVERS, Hetflow

if TYPE_CHECKING:
    from tests.integration.ray_fixture import SharedCluster


@pytest.fixture(scope="session", autouse=True)
def command_servers() -> Iterator[None]:
    """The harness's fork servers (``hfkit.SERVERS``), ended before the session's check that
    nothing is left running (``tests.leftovers``, set up before this and so torn down after)."""
    try:
        yield
    finally:
        SERVERS.close()


@pytest.fixture(scope="session")
def busybox() -> str:
    return build_tiny_image(BUSYBOX)


@pytest.fixture(scope="session")
def hostile() -> str:
    """An image whose own ENV asks for every GPU and preloads a library."""
    return build_tiny_image(HOSTILE, env={"NVIDIA_VISIBLE_DEVICES": "all", "LD_PRELOAD": "/lib/evil.so"})


@pytest.fixture(scope="session")
def mpi_image() -> str:
    """The gang examples' image (Open MPI, mpi4py, sshd, examples/gang/app), built once."""
    return build_mpi_image(Path(__file__).resolve().parents[2] / "examples", log=lambda _: None)


_RAY_SHARED: list[SharedCluster] = []  # this process's shared Ray cluster, if a module asked for one


@pytest.fixture(scope="session")
def ray_main_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    """The Ray cluster that the modules of ``ray_fixture.ray_cluster`` share (``SharedCluster``);
    Ray is imported only by the processes that run one of them."""
    from tests.integration.ray_fixture import SharedCluster

    shared = SharedCluster(tmp_path_factory)
    _RAY_SHARED.append(shared)
    try:
        yield shared
    finally:
        _RAY_SHARED.remove(shared)
        shared.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A module that does not use the shared Ray cluster (its module does not import
    ``ray_cluster``) shuts it down before its first test."""
    if _RAY_SHARED and not hasattr(getattr(item, "module", None), "ray_cluster"):
        for shared in _RAY_SHARED:
            shared.close()


@pytest.fixture
def hf(tmp_path: Path, busybox: str) -> Hetflow:
    # HETFLOW_OCI_RUNTIME is kept: `HETFLOW_OCI_RUNTIME=crun pytest tests/integration` runs the suite on crun
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HETFLOW_", "SUDO_")) or k == "HETFLOW_OCI_RUNTIME"}
    env.update(
        HETFLOW_HOME=str(tmp_path / "home"), HETFLOW_RETRY_BACKOFF="0.2", HETFLOW_POLL_INTERVAL="0.1", COLUMNS="200"
    )
    return Hetflow(tmp_path / "home", env)

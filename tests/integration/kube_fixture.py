"""A local Kubernetes cluster for one test module (demo/kube/cluster.py): a real control plane
built from Go modules, kwok playing the nodes (two CPU nodes, an A100 and a T4 node through the
device plugin's nvidia.com/gpu with GFD labels, an H100 node through DRA), started once and
stopped at the end.

No skip: where the cluster cannot start (no Go to build it, a component that fails), the tests
fail with the reason."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from demo.kube.cluster import DEFAULT_NODES, LocalKube, start_cluster
from demo.kube.kubelet import RealNode, start_node
from demo.kube.objects import KwokNode
from kubernetes import client, config

from hetflow.execute.backends.kubernetes import KubernetesSettings
from tests.leftovers import session_folder

T = TypeVar("T")
REAL_NODE = "real-0"


@contextmanager
def local_kube(nodes: Sequence[KwokNode] = DEFAULT_NODES, prefix: str = "hfkube-") -> Iterator[LocalKube]:
    """A local cluster of ``nodes`` in a fresh short folder under /tmp, stopped and removed after."""
    base = session_folder(prefix)
    try:
        cluster = start_cluster(base, nodes)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def kube_cluster() -> Iterator[LocalKube]:
    with local_kube() as cluster:
        yield cluster


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A Kubernetes client of its own (not the module-global default) for ``kubeconfig``."""
    return config.new_client_from_config(config_file=str(kubeconfig))


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60) -> T:
    """Poll ``probe`` until it returns something; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class RealKube:
    """The control plane with one real node (containerd and a kubelet: demo/kube/kubelet.py)
    and no kwok node, so every pod runs as a real container here."""

    cluster: LocalKube
    node: RealNode

    def settings(self, **changes: object) -> KubernetesSettings:
        base: dict[str, object] = {"kubeconfig": str(self.cluster.kubeconfig), "image_pull_policy": "Never"}
        return KubernetesSettings.from_mapping({**base, "stop_timeout": 2, **changes})


@contextmanager
def real_kube(images: Sequence[str], prefix: str = "hfkr-") -> Iterator[RealKube]:
    base = session_folder(prefix)  # short: containerd's sockets live under it
    try:
        cluster = start_cluster(base / "c", nodes=())
        try:
            node = start_node(base / "n", cluster.kubeconfig, "", REAL_NODE, images=images)
            try:
                yield RealKube(cluster, node)
            finally:
                node.stop()
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def kube_real(busybox: str) -> Iterator[RealKube]:
    with real_kube((busybox,)) as real:
        yield real

"""A Ray cluster of unlike nodes in one process tree (``ray.cluster_utils.Cluster``), for
the Ray backend's tests:

    cpu-1     the head: 4 CPUs, no GPU            named by a resource (hetflow_node:cpu-1)
    gpu-a100  4 CPUs, 2 fake A100s (nvidia0-1)    named by a label (hetflow/node=gpu-a100)
    gpu-t4    2 CPUs, 1 fake T4 (nvidia0)         named by a label

The head also serves Ray Client (ray://), so tests can connect as a remote user would.

``ray_gang_cluster`` is another such cluster for gang steps, whose placement groups need
several nodes of ONE type (the planner places a gang on one node type):

    gang-head  the head: 2 CPUs, no GPU           node type gang-head
    gang-w1    2 CPUs, 2 fake T4s (nvidia0-1)     node type gang-t4, named by a label
    gang-w2    2 CPUs, 2 fake T4s (nvidia0-1)     node type gang-t4, named by a label

``ray_acc_cluster`` is one for shared and non-NVIDIA GPUs:

    acc-head   the head: 2 CPUs, no GPU           node type acc-head
    acc-a100   2 CPUs, 1 fake A100 (nvidia0)      node type gpu.a100, and {"mig-1g.10gb": 2}
    acc-amd    2 CPUs, 2 fake MI250X              accelerator_type:AMD-Instinct-MI250X and
               (dri/renderD128-129, kfd)          {"gpu_vendor:amd": 1}, as Ray names AMD GPUs

To Ray a GPU is a number; the device nodes are mknod'd fakes (make_fake_gpus), one folder
per node (``DEVS/{node}``), so a container gets real character devices and these tests
prove isolation, not GPU computation.  Starting Ray takes seconds: one cluster per module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray
from demo.images import build_tiny_image
from demo.slurm.cluster import FakeNode, make_drm_gpus
from ray.cluster_utils import Cluster

from hetflow.execute.backends.ray import NODE_LABEL, NODE_RESOURCE, NODE_TYPE_RESOURCE, RaySettings
from hetflow.execute.devices.migtable import MigInstance, mig_instances
from hetflow.inventory.fakes.gpus import make_fake_gpus
from tests.contract.backend_contract import BUSYBOX
from tests.integration.hfkit import free_port

# (name, CPUs, fake GPUs, GPU model for make_fake_gpus, Ray accelerator type, node type)
NODES = (
    ("cpu-1", 4, 0, None, None, "cpu.std"),
    ("gpu-a100", 4, 2, "a100", "A100", "gpu.a100"),
    ("gpu-t4", 2, 1, "t4", "T4", "gpu.t4"),
)
GANG_NODES = (
    ("gang-head", 2, 0, None, None, "gang-head"),
    ("gang-w1", 2, 2, "t4", "T4", "gang-t4"),
    ("gang-w2", 2, 2, "t4", "T4", "gang-t4"),
)
ACC_NODES = (
    ("acc-head", 2, 0, None, None, "acc-head"),
    ("acc-a100", 2, 1, "a100", "A100", "gpu.a100"),
    ("acc-amd", 2, 2, "amd:mi250x", "AMD-Instinct-MI250X", "gpu.mi250x"),
)
# more custom resources a node declares: its MIG instances, its GPU vendor
EXTRA_RESOURCES = {"acc-a100": {"mig-1g.10gb": 2.0}, "acc-amd": {"gpu_vendor:amd": 1.0}}
# a node whose fake GPU is made from a HETFLOW_FAKE_GPUS entry of its own: acc-a100's in MIG
# mode with the two 1g.10gb instances it declares (their nvidia-caps nodes; to Ray still 1 GPU)
FAKE_SPECS = {"acc-a100": "a100-80g:1:mig=1g.10gb+1g.10gb"}
Node = tuple[str, int, int, str | None, str | None, str]


@dataclass(frozen=True)
class RayCluster:
    address: str  # the head's GCS: HOST:PORT
    client_address: str  # Ray Client: ray://127.0.0.1:PORT
    devs: Path  # DEVS/<node>/nvidiaN
    migs: Mapping[str, tuple[MigInstance, ...]] = field(default_factory=dict)  # node -> its fake MIG instances
    nodes: Cluster | None = field(default=None, compare=False)  # the cluster itself: add_node, remove_node

    def settings(self) -> RaySettings:
        # stop_timeout 2: busybox `sleep` as PID 1 ignores SIGTERM, so a cancel waits it out
        return RaySettings(
            address=self.address, device_dir=f"{self.devs}/{{node}}", stop_timeout=2, mig_devices=self.migs
        )


def _node_args(
    name: str, cpus: int, gpus: int, model: str | None, accel: str | None, ntype: str, head: bool
) -> dict[str, Any]:
    resources = {NODE_TYPE_RESOURCE + ntype: 1.0, **EXTRA_RESOURCES.get(name, {})}
    if accel:
        resources[f"accelerator_type:{accel}"] = float(gpus)
    args: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "resources": resources}
    if head:
        resources[NODE_RESOURCE + name] = 1.0
    else:
        args["labels"] = {NODE_LABEL: name}
    return args


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    yield from _cluster(tmp_path_factory, NODES)


@pytest.fixture(scope="module")
def ray_acc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    yield from _cluster(tmp_path_factory, ACC_NODES)


@pytest.fixture(scope="module")
def ray_gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    yield from _cluster(tmp_path_factory, GANG_NODES)


def _cluster(tmp_path_factory: pytest.TempPathFactory, nodes: tuple[Node, ...]) -> Iterator[RayCluster]:
    build_tiny_image(BUSYBOX)
    devs = tmp_path_factory.mktemp("raydevs")
    migs: dict[str, tuple[MigInstance, ...]] = {}
    for name, _, gpus, model, _, _ in nodes:
        (devs / name).mkdir()
        if gpus and model and model.startswith("amd:"):  # render nodes and kfd (demo.slurm.cluster)
            make_drm_gpus(FakeNode(name, drm=f"{model[4:]}:{gpus}", drm_vendor="amd"), devs / name)
        elif gpus:
            made, _ = make_fake_gpus(FAKE_SPECS.get(name, f"{model}:{gpus}"), devs / name)
            if instances := mig_instances(made):
                migs[name] = instances
    head, *others = nodes
    client_port = free_port()
    try:
        head_args = {**_node_args(*head, head=True), "ray_client_server_port": client_port}
        cluster = Cluster(initialize_head=True, head_node_args=head_args)
        for node in others:
            cluster.add_node(**_node_args(*node, head=False))
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="hetflow-tests", log_to_driver=False)
    except Exception as exc:  # no skip: a machine that cannot start Ray fails these tests
        pytest.fail(f"Ray could not start a {len(nodes)}-node test cluster: {type(exc).__name__}: {exc}")
    try:
        yield RayCluster(cluster.address, f"ray://127.0.0.1:{client_port}", devs, migs, cluster)
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]

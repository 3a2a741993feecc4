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
prove isolation, not GPU computation.

Starting a cluster takes 10-25 s on a loaded machine, so ``ray_cluster``'s is shared by the
modules that use it one after another in a test process (``SharedCluster``; ``pytest
tests/integration/test_*ray*.py`` starts it once): each such module connects this process's one
Ray driver to it (``connect``) and at its end ends the run actors it left (``end_run_actors``:
their placement groups and tasks go with them), so the next module finds it as a new one.  A
module that does not use it shuts it down first (under ``--dist loadfile`` an xdist worker's
next file is rarely another Ray one, and an idle cluster would go on costing CPU).  The gang
and accelerator layouts, and test_faults_ray's cluster (its tests add and remove nodes), stay
one per module.  No node starts the dashboard
or a log monitor: nothing here reads them (drivers connect with ``log_to_driver=False``), and
they were ~40% of a cluster's start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray
from demo.images import build_tiny_image
from demo.slurm.cluster import FakeNode, make_drm_gpus
from ray.cluster_utils import Cluster
from ray.exceptions import RayError

from hetflow.execute.backends.ray import NODE_LABEL, NODE_RESOURCE, NODE_TYPE_RESOURCE, RaySettings
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.devices.migtable import MigInstance, mig_instances
from hetflow.inventory.fakes.gpus import make_fake_gpus
from hetflow.state import Store
from tests.contract.backend_contract import BUSYBOX
from tests.integration.hfkit import Hetflow, free_port

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
# Ray's services these tests never use (the head's dashboard is turned off in _node_args)
QUIET = {"include_log_monitor": False}
NAMESPACE = "hetflow-tests"  # the test process's driver's (the backend's run actors: "hetflow")


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
    args: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "resources": resources, **QUIET}
    if head:
        resources[NODE_RESOURCE + name] = 1.0
        args["include_dashboard"] = False
    else:
        args["labels"] = {NODE_LABEL: name}
    return args


class SharedCluster:
    """``NODES``, started when a module asks for it and kept for the next one of this test
    process; closed (``close``) when a module that does not use it comes, or at the session's
    end (conftest's session fixture ``ray_main_cluster`` holds it and its hook closes it)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.factory = tmp_path_factory
        self._running: Generator[RayCluster, None, None] | None = None
        self.cluster: RayCluster | None = None

    def get(self) -> RayCluster:
        if self.cluster is None:
            self._running = _cluster(self.factory, NODES)
            self.cluster = next(self._running)
        return self.cluster

    def close(self) -> None:
        running, self._running, self.cluster = self._running, None, None
        if running is not None:
            running.close()  # _cluster's finally: the driver, then the cluster


@pytest.fixture(scope="module")
def ray_cluster(ray_main_cluster: SharedCluster) -> Iterator[RayCluster]:
    """The process's ``NODES`` cluster, this module's driver connected to it; the run actors
    the module left are ended with it."""
    cluster = ray_main_cluster.get()
    connect(cluster.address)
    try:
        yield cluster
    finally:
        end_run_actors()


@pytest.fixture(scope="module")
def ray_acc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    yield from _connected(_cluster(tmp_path_factory, ACC_NODES))


@pytest.fixture(scope="module")
def ray_gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    yield from _connected(_cluster(tmp_path_factory, GANG_NODES))


def connect(address: str, namespace: str = NAMESPACE) -> None:
    """This process's one Ray driver, connected to the cluster at ``address`` (Ray allows one
    connection per process: another module's is closed first)."""
    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        if ctx.gcs_address == address and ctx.namespace == namespace:
            return
        ray.shutdown()
    ray.init(address=address, namespace=namespace, log_to_driver=False)


def end_run_actors() -> None:
    """End the backend's run actors left on the connected cluster (each a worker process that
    would linger for its idle timeout); their tasks and placement groups end with them."""
    if not ray.is_initialized():
        return
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == "hetflow" and actor["name"].startswith("run-"):
            with contextlib.suppress(ValueError, RayError):  # it ended meanwhile
                ray.kill(ray.get_actor(actor["name"], namespace="hetflow"), no_restart=True)


def run_state(hf: Hetflow, run_id: str) -> str:
    """The run's state as ``hetflow show`` gives it (its row in the store), read in this process:
    a wait that polls it starts no CLI process (one every 0.1 s was most of a core while waiting)."""
    return Store(hf.home / "state.db", read_only=True).run(run_id).state


def step_log(hf: Hetflow, run_id: str, step: str, attempt: int = 1) -> str:
    """The attempt's log as the step writes it (what ``hetflow logs`` shows), "" before it has one;
    read in this process, for the same reason as ``run_state``."""
    workdir = Store(hf.home / "state.db", read_only=True).run(run_id).workdir
    try:
        return RunPaths(Path(workdir)).log(step, attempt).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _connected(clusters: Generator[RayCluster, None, None]) -> Iterator[RayCluster]:
    """A module's own cluster (``_cluster``), this process's driver connected to it while it lives."""
    with contextlib.closing(clusters):  # closed: the cluster is shut down
        cluster = next(clusters)
        try:
            connect(cluster.address)
        except Exception as exc:  # no skip: a machine that cannot start Ray fails these tests
            pytest.fail(f"could not connect to the Ray test cluster at {cluster.address}: {exc}")
        try:
            yield cluster
        finally:
            ray.shutdown()


def _cluster(tmp_path_factory: pytest.TempPathFactory, nodes: tuple[Node, ...]) -> Generator[RayCluster, None, None]:
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
    except Exception as exc:  # no skip: a machine that cannot start Ray fails these tests
        pytest.fail(f"Ray could not start a {len(nodes)}-node test cluster: {type(exc).__name__}: {exc}")
    try:
        yield RayCluster(cluster.address, f"ray://127.0.0.1:{client_port}", devs, migs, cluster)
    finally:
        if ray.is_initialized():
            ray.shutdown()  # a driver still connected (to this cluster or another) goes first
        cluster.shutdown()  # type: ignore[no-untyped-call]

"""The Ray backend passes the backend contract on a 3-node Ray cluster (ray_fixture), and
gives each container exactly the GPUs Ray assigned: fake GPUs (mknod'd device nodes), so
these tests prove isolation and placement, not GPU computation.  The contract's node
failures remove one of two spare workers the ``node_fault`` fixture adds for the test (as
test_faults_ray does), so the module's three nodes stay as they are."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest
import ray
from ray.cluster_utils import Cluster

from hetflow.config import engine_env
from hetflow.errors import EngineError, UsageError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray import RayBackend, RayNode, RaySettings, accelerator_type, task_request
from hetflow.execute.settings import Settings
from tests.contract.backend_contract import (
    GATE,
    BackendContract,
    OrderingContract,
    gated,
    job,
    open_gate,
    wait_done,
    wait_until,
)
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract, NodeFault
from tests.integration.ray_fixture import RayCluster, _node_args, ray_cluster

__all__ = ["ray_cluster"]  # the module fixture, used by the fixtures below

A100 = "NVIDIA A100-SXM4-40GB"
T4 = "Tesla T4"
# What a container saw: its nvidia device nodes, and what CUDA would number them.
SEE = "ls /dev | grep nvidia > /out/devs; echo $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES > /out/env"


@pytest.fixture(scope="module")
def backend(ray_cluster: RayCluster) -> RayBackend:
    b = RayBackend(ray_cluster.settings())
    b.check()
    return b


@pytest.fixture
def fresh_backend(ray_cluster: RayCluster) -> RayBackend:
    """Another hetflow process's backend: nothing shared but the cluster (same Ray
    connection, since Ray has one per process; see test_jobs_outlive_their_driver)."""
    return RayBackend(ray_cluster.settings())


SPARE = "contract-spare"  # the node type of the node_fault fixture's workers


class RayNodeFault:
    """Two spare workers of one node type, the contract's jobs placed on them; a failed one is
    removed (its raylet killed), as test_faults_ray removes a worker."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.workers = {n: cluster.add_node(**_node_args(n, 3, 0, None, None, SPARE, head=False)) for n in NAMES}
        cluster.wait_for_nodes()

    def place(self, job: Job) -> Job:
        return dataclasses.replace(job, node_class=SPARE)

    def fail(self, node: str) -> None:
        self.cluster.remove_node(self.workers.pop(node))

    def close(self) -> None:
        for worker in self.workers.values():
            self.cluster.remove_node(worker)


NAMES = ("spare-1", "spare-2")


@pytest.fixture
def node_fault(ray_cluster: RayCluster, backend: RayBackend) -> Iterator[NodeFault]:
    assert ray_cluster.nodes is not None
    fault = RayNodeFault(ray_cluster.nodes)
    # The module's backend keeps the node list 5 s (a submit of 100 steps asks once): the
    # spares joined after it last asked, so it asks again (else "no Ray node offers
    # hetflow/node-type:contract-spare" when a test ran just before).
    spare = f"hetflow/node-type:{SPARE}"
    deadline = time.monotonic() + 60
    while not any(spare in n.resources for n in backend.nodes(refresh=True)):
        assert time.monotonic() < deadline, "the spare workers never showed in Ray's node list"
        time.sleep(0.2)
    try:
        yield fault
    finally:
        fault.close()


def rid() -> str:
    return f"r{time.time_ns() % 10**9}"


def ray_job(name: str, out: Path, script: str, run_id: str, **kw: object) -> Job:
    return dataclasses.replace(job(name, out, script, run_id=run_id), **kw)  # type: ignore[arg-type]


def seen(out: Path) -> tuple[set[str], str]:
    return set((out / "devs").read_text().split()), (out / "env").read_text().strip()


class TestRayBackend(BackendContract, OrderingContract, GangContract, NodeFailureContract):
    LACKS: ClassVar[Mapping[str, str]] = {
        "ordering": "Ray holds no DAG order: the runner submits a step once its parents ended "
        "(holds_dependencies False)",
    }

    def test_capabilities(self, backend: RayBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == ("ray", False, True, True)

    def test_two_one_gpu_jobs_on_the_a100_node_see_disjoint_gpus(self, backend: RayBackend, tmp_path: Path) -> None:
        r = rid()
        names = [f"hf-{r}-g{i}-1" for i in range(2)]
        for i, name in enumerate(names):  # gated: each holds its GPU until both have run (not for 2 s)
            backend.submit(ray_job(name, tmp_path / f"g{i}", gated(SEE), r, gpus=1, gpu_model=A100))
        wait_until(backend, r, lambda st: all(n in st and st[n].status == "RUNNING" for n in names), "both running")
        for i in range(2):
            open_gate(tmp_path / f"g{i}")
        states = wait_done(backend, r, names)
        assert all(states[n].exit_code == 0 and states[n].node == "gpu-a100" for n in names), states
        (d0, env0), (d1, env1) = seen(tmp_path / "g0"), seen(tmp_path / "g1")
        assert d0 - {"nvidiactl"} and d1 - {"nvidiactl"} and not (d0 & d1) - {"nvidiactl"}, (d0, d1)
        assert len(d0) == len(d1) == 2 and "nvidiactl" in d0 & d1
        assert env0 == env1 == "0 0"  # each numbers its one GPU 0, as CUDA would
        assert {states[n].gpus for n in names} == {(0,), (1,)}
        backend.release(names)

    def test_a_job_without_gpus_sees_none_even_on_a_gpu_node(self, backend: RayBackend, tmp_path: Path) -> None:
        r = rid()
        name = f"hf-{r}-cpu-1"
        backend.submit(ray_job(name, tmp_path, f"ls /dev > /out/all; {SEE}", r, node="gpu-a100"))
        states = wait_done(backend, r, [name])
        assert states[name].exit_code == 0 and states[name].node == "gpu-a100"
        assert not [d for d in (tmp_path / "all").read_text().split() if d.startswith("nvidia")]
        assert (tmp_path / "env").read_text().strip() == "void"
        backend.release([name])

    def test_a_job_asking_for_a_t4_lands_on_the_t4_node(self, backend: RayBackend, tmp_path: Path) -> None:
        r = rid()
        name = f"hf-{r}-t4-1"
        backend.submit(ray_job(name, tmp_path, SEE, r, gpus=1, gpu_model=T4))
        states = wait_done(backend, r, [name])
        assert (states[name].exit_code, states[name].node, states[name].gpus) == (0, "gpu-t4", (0,))
        assert seen(tmp_path) == ({"nvidia0", "nvidiactl"}, "0 0")
        backend.release([name])

    @pytest.mark.parametrize("node", ["cpu-1", "gpu-t4"], ids=["by-resource-name", "by-label"])
    def test_a_pinned_job_runs_on_its_node(self, backend: RayBackend, tmp_path: Path, node: str) -> None:
        r = rid()
        name = f"hf-{r}-pin-1"
        backend.submit(ray_job(name, tmp_path, "true", r, node=node))
        states = wait_done(backend, r, [name])
        assert (states[name].exit_code, states[name].node) == (0, node)
        backend.release([name])

    @pytest.mark.parametrize(
        ("kw", "words"),
        [
            (
                {"gpus": 1, "gpu_model": "NVIDIA H100 80GB HBM3"},
                "GPUs (accelerator_type:H100); no Ray node offers it (GPU types: A100, T4)",
            ),
            ({"node": "gpu-9"}, "no Ray node has that name (nodes: cpu-1, gpu-a100, gpu-t4)"),
            ({"gpus": 3, "gpu_model": A100}, "more than any Ray node has"),
            ({"gpus": 1, "node": "cpu-1"}, "more than node cpu-1 has"),
            ({"node_class": "gpu.h100"}, "no Ray node offers hetflow/node-type:gpu.h100"),
        ],
        ids=["unknown-gpu-model", "unknown-node", "too-many-gpus", "gpu-on-cpu-node", "unknown-node-type"],
    )
    def test_a_job_no_node_can_run_is_refused_with_the_reason(
        self, backend: RayBackend, tmp_path: Path, kw: dict[str, object], words: str
    ) -> None:
        with pytest.raises(EngineError, match=re.escape(words)):
            backend.submit(ray_job(f"hf-{rid()}-no-1", tmp_path, "true", "no", **kw))

    def test_a_pending_job_says_what_it_waits_for(self, backend: RayBackend, tmp_path: Path) -> None:
        r = rid()
        hold, wait = f"hf-{r}-hold-1", f"hf-{r}-wait-1"
        # gated, not `sleep 30`: a stop held up past 30 s (podman's lock, on a loaded machine) let it end 0
        backend.submit(ray_job(hold, tmp_path / "h", GATE, r, gpus=1, gpu_model=T4))
        backend.submit(ray_job(wait, tmp_path / "w", "true", r, gpus=1, gpu_model=T4))
        wait_until(backend, r, lambda st: hold in st and st[hold].status == "RUNNING", f"{hold} running")
        st = backend.poll(r)[wait]
        assert (st.running, st.status) == (True, "PENDING") and "1 GPU, accelerator_type:T4" in st.reason
        backend.cancel([hold, wait])
        states = wait_done(backend, r, [hold, wait], timeout=60)
        assert states[hold].exit_code == 137 and states[wait].exit_code == 137
        assert (states[hold].status, states[wait].status) == ("CANCELLED", "CANCELLED")
        assert not container_exists(hold)  # stopped, and removed (--rm)
        backend.release([hold, wait])
        assert backend.poll(r) == {}

    @pytest.mark.parametrize("via", ["gcs", "client"], ids=["driver-on-gcs-address", "driver-via-ray-client"])
    def test_jobs_outlive_their_driver(
        self, ray_cluster: RayCluster, backend: RayBackend, tmp_path: Path, via: str
    ) -> None:
        """A hetflow process submits and exits (its Ray driver disconnects); this one,
        another driver, adopts the job by name and sees it finish."""
        r = rid()
        name = f"hf-{r}-orphan-1"
        address = ray_cluster.address if via == "gcs" else ray_cluster.client_address
        script = textwrap.dedent(f"""
            from pathlib import Path
            from hetflow.execute.backends.ray import RayBackend, RaySettings
            from tests.contract.backend_contract import gated, job
            b = RayBackend(RaySettings(address={address!r}))
            b.submit(job({name!r}, Path({str(tmp_path)!r}), gated("echo done > /out/x"), run_id={r!r}))
            print("result:", b.poll({r!r})[{name!r}].status)
        """)
        # a bound for a hung child only: a Ray client's start took over 60 s on a loaded machine
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert result(proc.stdout) in (["PENDING"], ["RUNNING"]), proc.stdout
        st = backend.poll(r)[name]
        assert st.running, st  # the driver is gone, the job is not (it waits for the gate)
        open_gate(tmp_path)
        states = wait_done(backend, r, [name])
        assert states[name].exit_code == 0 and (tmp_path / "x").read_text() == "done\n"
        assert not container_exists(name)  # podman run --rm
        backend.release([name])

    def test_a_run_actor_ends_itself_when_idle(self, ray_cluster: RayCluster, tmp_path: Path) -> None:
        b = RayBackend(dataclasses.replace(ray_cluster.settings(), idle_timeout=1))
        r = rid()
        name = f"hf-{r}-idle-1"
        b.submit(ray_job(name, tmp_path, "true", r))
        wait_done(b, r, [name])
        assert f"run-{r}" in run_actors()
        b.release([name])
        deadline = time.time() + 60
        while f"run-{r}" in run_actors():
            assert time.time() < deadline, "the idle run actor is still there"
            time.sleep(0.5)
        assert b.poll(r) == {}


def result(stdout: str) -> list[str]:
    """The words a child script printed after "result:"; Ray's own warnings may come before or
    after, even on the same line (a raylet warning without its line break was seen in a suite run)."""
    lines = [line.rpartition("result: ")[2] for line in stdout.splitlines() if "result: " in line]
    return lines[-1].split() if lines else []


def container_exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], env=engine_env(), check=False).returncode == 0


def run_actors() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "hetflow"}


def test_start_local_runs_jobs_in_a_private_ray(ray_cluster: RayCluster, tmp_path: Path) -> None:
    """ray.start_local: a Ray of this process's own (not the cluster `ray start` recorded),
    with the resources the settings give it."""
    devs = ray_cluster.devs / "gpu-t4"
    script = textwrap.dedent(f"""
        from pathlib import Path
        import dataclasses, ray
        from hetflow.execute.backends.ray import RayBackend, RaySettings
        from tests.contract.backend_contract import job, wait_done
        s = RaySettings(start_local=True, num_cpus=2, num_gpus=1, resources={{"accelerator_type:T4": 1}},
                        device_dir={str(devs)!r})
        b = RayBackend(s)
        b.check()
        j = dataclasses.replace(job("hf-loc-g-1", Path({str(tmp_path)!r}), {SEE!r}, run_id="loc"),
                                gpus=1, gpu_model="Tesla T4")
        b.submit(j)
        st = wait_done(b, "loc", [j.name])[j.name]
        print("result:", len(ray.nodes()), st.exit_code, st.gpus)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result(proc.stdout) == ["1", "0", "(0,)"], proc.stdout
    assert seen(tmp_path) == ({"nvidia0", "nvidiactl"}, "0 0")


# --- the pure parts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "ray_type"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA L4", "L4"),
        ("a100", "A100"),
        ("NVIDIA GeForce RTX 4090", "GeForce-RTX-4090"),
    ],
    ids=lambda v: str(v),
)
def test_gpu_models_map_to_rays_accelerator_types(model: str, ray_type: str) -> None:
    assert accelerator_type(model) == ray_type


def test_an_untyped_cluster_places_by_resources_alone(tmp_path: Path) -> None:
    """A cluster whose nodes carry no node-type resource ignores the plan's node type (a
    plan of this machine names its own); a node pin falls back to it only when typed."""
    nodes = [RayNode("n1", "n1", {"CPU": 8.0, "memory": 1e10})]
    j = ray_job("hf-x-s-1", tmp_path, "true", "x", node_class="n1", node="n1")
    req = task_request(j, nodes)
    assert (req.resources, req.node_id, req.num_gpus) == ({}, "n1", 0)


@pytest.mark.parametrize(
    ("mapping", "expect"),
    [
        ({}, RaySettings()),
        ({"address": "ray://head:10001"}, RaySettings(address="ray://head:10001")),
        (
            {"start_local": "true", "num_cpus": "2", "num_gpus": "4", "resources": '{"accelerator_type:A100": 4}'},
            RaySettings(start_local=True, num_cpus=2, num_gpus=4, resources={"accelerator_type:A100": 4.0}),
        ),
        ({"device_dir": "/x/{node}", "stop_timeout": "3"}, RaySettings(device_dir="/x/{node}", stop_timeout=3)),
        # a YAML mapping in the config file reaches the backend as str(dict)
        ({"resources": str({"accelerator_type:T4": 2})}, RaySettings(resources={"accelerator_type:T4": 2.0})),
    ],
    ids=["defaults", "client-address", "local-cluster", "devices", "resources-from-yaml"],
)
def test_settings_come_from_hetflows_config(mapping: dict[str, str], expect: RaySettings) -> None:
    assert RaySettings.from_backend(Settings(backend="ray", sections={"ray": mapping})) == expect


@pytest.mark.parametrize(
    ("mapping", "words"),
    [
        ({"adress": "auto"}, "unknown key(s) adress"),
        ({"num_cpus": "two"}, "num_cpus='two' is not valid"),
        ({"resources": "[1, 2]"}, "resources='[1, 2]' is not valid"),
        ({"engine": "docker"}, "engine 'docker' is not supported"),
    ],
    ids=["misspelt-key", "bad-number", "resources-not-a-mapping", "docker"],
)
def test_bad_settings_say_what_to_change(mapping: dict[str, str], words: str) -> None:
    engine = mapping.pop("engine", "podman")
    with pytest.raises(UsageError, match=re.escape(words)):
        RaySettings.from_mapping(mapping, engine=engine)


def test_an_unreachable_cluster_says_what_to_do() -> None:
    script = textwrap.dedent("""
        from hetflow.errors import EngineError
        from hetflow.execute.backends.ray import RayBackend, RaySettings
        try:
            RayBackend(RaySettings(address="127.0.0.1:1")).check()
        except EngineError as e:
            print(e)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in proc.stdout and "ray start --head" in proc.stdout, (
        proc.stdout + proc.stderr[-2000:]
    )

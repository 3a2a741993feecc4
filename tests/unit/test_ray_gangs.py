"""The Ray backend's gang arithmetic (ray/gangs.py): bundles, strategy, what the cluster can
ever hold, and each replica's launch contract from the nodes Ray reserved.  No Ray cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray.gangs import (
    NODE_ENV,
    PACK,
    STRICT_SPREAD,
    bundle_nodes,
    gang_request,
    hosts_of,
    mpi_ssh_config,
    node_addresses,
    replica_specs,
    shortfall,
    strategy,
)
from hetflow.execute.backends.ray.translate import MARKER, NODE_LABEL, NODE_RESOURCE, NODE_TYPE_RESOURCE, RayNode
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.execute.gang.mpilaunch import MPI_MOUNT, resolve_hosts
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang

GIB = 1 << 30
T4 = "accelerator_type:T4"


def node(name: str, cpus: float = 4, gpus: float = 2, ntype: str = "t4", **extra: float) -> RayNode:
    res = {"CPU": cpus, "GPU": gpus, "memory": 8.0 * GIB, NODE_TYPE_RESOURCE + ntype: 1.0, T4: gpus, **extra}
    return RayNode(f"id-{name}", name, {k: v for k, v in res.items() if v})


def gang_job(replicas: int = 2, *, per_node: int | None = 1, launcher: str = "torch", **kw: object) -> Job:
    gang = Gang(replicas=replicas, per_node=per_node, launcher=launcher, port=29700)  # type: ignore[arg-type]
    ranks = tuple(
        ContainerSpec(replica_name("hf-r1-train-1", i), "img", ("run",), "1000:1000", {}, {"STEP": "x", "RANK": "no"})
        for i in range(replicas)
    )
    job = Job("hf-r1-train-1", "r1", "train", 1, ranks[0], cpus=1.5, memory=GIB, gpus=1, gpu_model="Tesla T4")
    return replace(job, ranks=ranks, gang=gang, node_class="t4", nodes=replicas, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("per_node", "want"),
    [(1, STRICT_SPREAD), (None, PACK), (2, PACK)],
    ids=["one-per-node-is-strict-spread", "no-limit-packs", "two-per-node-packs"],
)
def test_strategy(per_node: int | None, want: str) -> None:
    assert strategy(Gang(replicas=4, per_node=per_node)) == want


def test_a_bundle_per_replica_with_its_share_and_the_placement_markers() -> None:
    req = gang_request(gang_job(3), [node("a"), node("b"), node("c")])
    assert (req.replicas, req.strategy) == (3, STRICT_SPREAD)
    assert (
        req.bundles()
        == [{"CPU": 1.5, "GPU": 1.0, "memory": float(GIB), T4: MARKER, NODE_TYPE_RESOURCE + "t4": MARKER}] * 3
    )
    assert req.task.node_id is None and not req.label_selector


def test_a_cpu_gang_bundle_leaves_out_zero_gpus() -> None:
    req = gang_request(replace(gang_job(2), gpus=0, gpu_model=None), [node("a"), node("b")])
    assert "GPU" not in req.bundle and req.bundle["CPU"] == 1.5


@pytest.mark.parametrize(
    ("nodes", "per_node", "ok"),
    [
        ([node("a"), node("b")], 1, True),
        ([node("a")], 1, False),  # two replicas, one per node, one node
        ([node("a"), node("b", ntype="a100")], 1, False),  # the other node is not of the type
        ([node("a", gpus=1), node("b", gpus=2)], None, True),  # PACK: 1 + 2 GPUs hold 2 replicas
        ([node("a", gpus=1)], None, False),  # PACK: 1 GPU, 2 replicas of 1 GPU
        ([node("a", cpus=2, gpus=4)], 2, False),  # PACK: 2 CPUs hold one replica of 1.5
        ([node("a", cpus=3, gpus=4)], 2, True),
    ],
    ids=[
        "spread-two-nodes",
        "spread-one-node",
        "spread-other-type",
        "pack-across",
        "pack-too-few-gpus",
        "pack-too-few-cpus",
        "pack-on-one",
    ],
)
def test_a_gang_the_cluster_can_never_hold_is_refused(nodes: list[RayNode], per_node: int | None, ok: bool) -> None:
    job = gang_job(2, per_node=per_node)
    if ok:
        gang_request(job, nodes)
    else:
        with pytest.raises(EngineError, match="is a gang that needs"):
            gang_request(job, nodes)


def test_a_node_type_of_one_node_pins_every_bundle_to_it() -> None:
    labelled = node("solo", gpus=4)
    req = gang_request(replace(gang_job(2, per_node=None), node="solo", node_class=None), [labelled, node("x")])
    assert req.label_selector == {NODE_LABEL: "solo"}
    by_resource = node("head", gpus=4, **{NODE_RESOURCE + "head": 1.0})
    req = gang_request(replace(gang_job(2, per_node=None), node="head", node_class=None), [by_resource])
    assert req.bundle[NODE_RESOURCE + "head"] == MARKER and not req.label_selector


def test_shortfall_counts_only_the_nodes_a_label_selector_allows() -> None:
    req = gang_request(gang_job(2, per_node=None), [node("a"), node("b")])
    assert shortfall(req, [node("a"), node("b")]) == ""
    pinned = replace(req, label_selector={NODE_LABEL: "a"})
    assert shortfall(pinned, [node("a", gpus=1), node("b", gpus=4)]).endswith(
        "have room for 1 (1 of 2 hold one replica)"
    )
    assert shortfall(pinned, [node("a", gpus=2), node("b")]) == ""


def test_bundle_nodes_in_rank_order_and_all_placed() -> None:
    assert bundle_nodes({1: "n2", 0: "n1"}, 2) == ["n1", "n2"]
    with pytest.raises(ValueError, match=r"\[1\]"):
        bundle_nodes({0: "n1", 1: "f" * 56}, 2)  # Ray's nil node id: not placed yet
    with pytest.raises(ValueError):
        bundle_nodes({0: "n1"}, 2)


def test_node_addresses_from_ray_nodes() -> None:
    rows = [{"NodeID": "a", "NodeManagerAddress": "10.0.0.1"}, {"NodeID": "b", "NodeManagerAddress": ""}]
    assert node_addresses(rows) == {"a": "10.0.0.1"}


def test_torch_replicas_are_told_the_nodes_ray_chose() -> None:
    job = gang_job(3, per_node=None)
    assert job.gang is not None
    ids = ["nA", "nB", "nA"]  # PACK put ranks 0 and 2 together
    specs = replica_specs(job.ranks, job.gang, ids, {"nA": "10.0.0.1", "nB": "10.0.0.2"}, {"nA": "w1", "nB": "w2"})
    envs = [s.env for s in specs]
    assert [e["MASTER_ADDR"] for e in envs] == ["10.0.0.1"] * 3
    assert [e["MASTER_PORT"] for e in envs] == ["29700"] * 3
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]  # hetflow's win over the step's RANK=no
    assert [(e["NODE_RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [
        ("0", "0", "2"),
        ("1", "0", "1"),
        ("0", "1", "2"),
    ]
    assert [e[NODE_ENV] for e in envs] == ["w1", "w2", "w1"]
    assert all(e["STEP"] == "x" and e["WORLD_SIZE"] == "3" for e in envs)
    assert [s.name for s in specs] == [s.name for s in job.ranks]


def test_mpi_replicas_get_only_hetflows_names() -> None:
    job = gang_job(2, launcher="mpi")
    assert job.gang is not None
    specs = replica_specs(job.ranks, job.gang, ["a", "b"], {"a": "h1", "b": "h2"}, {})
    assert "MASTER_ADDR" not in specs[1].env
    assert (specs[1].env["HETFLOW_RANK"], specs[1].env["HETFLOW_NODE_RANK"], specs[1].env[NODE_ENV]) == ("1", "1", "b")


def test_replica_specs_needs_a_node_per_replica() -> None:
    job = gang_job(2)
    assert job.gang is not None
    with pytest.raises(ValueError):
        replica_specs(job.ranks, job.gang, ["a"], {"a": "h"}, {})


def test_the_mpi_ssh_config_is_found_by_its_mount() -> None:
    spec = ContainerSpec("c", "img", (), "1:1", {}, {}, mounts=(Mount("/w/run/mpi/", MPI_MOUNT),))
    assert mpi_ssh_config(spec) == "/w/run/mpi/ssh_config"
    assert mpi_ssh_config(replace(spec, mounts=(Mount("/w", "/out"),))) is None


def test_the_mpi_hosts_are_each_replicas_node_address() -> None:
    config = (
        "Host hetflow-rank-0\n  HostName hetflow-host-0\n  Port 29700\nHost hetflow-rank-1\n  HostName hetflow-host-1\n"
    )
    hosts = hosts_of(["nB", "nA"], {"nA": "10.0.0.1", "nB": "10.0.0.2"})
    assert hosts == ["10.0.0.2", "10.0.0.1"]
    resolved = resolve_hosts(config, hosts)
    assert "HostName 10.0.0.2\n  Port 29700" in resolved and resolved.endswith("HostName 10.0.0.1\n")

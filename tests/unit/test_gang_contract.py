"""The gang launch contract (``execute.gang.replicas.LAUNCH_CONTRACT``): the environment each rank sees
is the same for this machine, Slurm, Ray, the Kubernetes export and the live Kubernetes backend, by
one table.

Each row is a launcher, a layout (where the replicas landed) and a producer; the expected
environment is written out here by hand, so a producer (or the definition) that drifts fails.
Slurm's row runs the task script's own bash over the host files its tasks write; Kubernetes'
reads the exported pods, and the live backend's the Indexed Job it creates, resolving each
replica's completion index."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.kubernetes import KubernetesSettings, Placement, job_objects, object_name
from hetflow.execute.backends.ray.gangs import NODE_ENV, replica_specs
from hetflow.execute.backends.slurm.gang import contract_script
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.gang.replicas import layout, replica_env
from hetflow.spec import Gang
from tests.contract.backend_contract import gang_job
from tests.unit.test_kubernetes import RUN, export

PORT = 29400
NAMES = {
    "HETFLOW_RANK",
    "HETFLOW_WORLD_SIZE",
    "HETFLOW_NODE_RANK",
    "HETFLOW_LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
}
# Where each of 3 replicas runs: one per node, or two on the first node and one on the second.
LAYOUTS = {"spread": ["n0", "n1", "n2"], "packed": ["n0", "n0", "n1"]}
ADDRESS = {"n0": "10.0.0.1", "n1": "10.0.0.2", "n2": "10.0.0.3"}
# (node rank, local rank, replicas on its node) of ranks 0, 1, 2 in each layout
PLACES = {"spread": [(0, 0, 1), (1, 0, 1), (2, 0, 1)], "packed": [(0, 0, 2), (0, 1, 2), (1, 0, 1)]}

Env = dict[str, str]
Producer = Callable[[str, str, Path], list[Env]]  # (launcher, layout, tmp) -> each rank's env


def expected(launcher: str, where: str, master: str) -> list[Env]:
    out = []
    for rank, (node_rank, local_rank, local_size) in enumerate(PLACES[where]):
        env = {
            "HETFLOW_RANK": str(rank),
            "HETFLOW_WORLD_SIZE": "3",
            "HETFLOW_NODE_RANK": str(node_rank),
            "HETFLOW_LOCAL_RANK": str(local_rank),
        }
        if launcher == "torch":
            env |= {
                "MASTER_ADDR": master,
                "MASTER_PORT": str(PORT),
                "RANK": str(rank),
                "WORLD_SIZE": "3",
                "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(local_size),
                "NODE_RANK": str(node_rank),
            }
        if launcher == "mpi":
            env["WORLD_SIZE"] = "3"
        out.append(env)
    return out


def contract_of(env: dict[str, Any]) -> Env:
    return {k: v for k, v in env.items() if k in NAMES}


def local(launcher: str, where: str, tmp: Path) -> list[Env]:
    """This machine: what the launcher gives each replica (``Launcher._gang_specs``)."""
    nodes = LAYOUTS[where]
    ranks = layout([ADDRESS[n] for n in nodes], nodes)
    return [contract_of(replica_env(Gang(replicas=3, launcher=launcher, port=PORT), ranks, r)) for r in range(3)]


def ray(launcher: str, where: str, tmp: Path) -> list[Env]:
    """Ray: the replicas' containers once the placement group's bundles have nodes."""
    template = ContainerSpec("c", "img", (), "1:1", {}, {"KEEP": "1"})
    gang = Gang(replicas=3, launcher=launcher, port=PORT)
    specs = replica_specs((template,) * 3, gang, LAYOUTS[where], ADDRESS, {"n0": "w0", "n1": "w1", "n2": "w2"})
    assert [s.env[NODE_ENV] for s in specs] == [f"w{n[1]}" for n in LAYOUTS[where]]
    return [contract_of(s.env) for s in specs]


def slurm(launcher: str, where: str, tmp: Path) -> list[Env]:
    """Slurm: the task script's bash, run over the host files each task writes."""
    nodes = LAYOUTS[where]
    for r, n in enumerate(nodes):
        (tmp / f"j.r{r}.host").write_text(f"{ADDRESS[n]} {n}\n")
    out = []
    for rank, node in enumerate(nodes):
        script = (
            f"set -eu\njobdir={tmp}; name=j; world=3; rank={rank}; node={node}; port={PORT}; SLURM_JOB_ID=77\n"
            f"{contract_script(launcher)}printf '%s\\n' \"${{contract[@]}}\"\n"
        )
        words = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
        assert words[::2] == ["--env"] * (len(words) // 2)
        env = dict(w.split("=", 1) for w in words[1::2])
        assert (env["HETFLOW_NODE"], env["HETFLOW_SLURM_JOB"]) == (node, "77")
        out.append(contract_of(env))
    return out


GANG_STEP = """\
g:
  image: busybox
  command: [train]
  resources: {cpus: 1, memory: 1Gi}
  gang: {replicas: 3, launcher: %s, port: %d}
"""
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def kubernetes(launcher: str, where: str, tmp: Path) -> list[Env]:
    """The Kubernetes export: each replica's pod, its completion index resolved."""
    objects = export(GANG_STEP % (launcher, PORT))
    if launcher == "mpi":
        (job,) = (o for o in objects if o["kind"] == "MPIJob")
        pods = [job["spec"]["mpiReplicaSpecs"][k]["template"]["spec"] for k in ("Launcher", "Worker")]
        envs = [{e["name"]: e["value"] for e in p["containers"][0]["env"]} for p in pods]
        assert contract_of(envs[0]) == contract_of(envs[1])  # the launcher's are what -x passes on
        return [contract_of(envs[1])] * 3
    (job,) = (o for o in objects if o["kind"] == "Job" and o["metadata"]["labels"].get("hetflow.step") == "g")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return [contract_of({e["name"]: indexed(e, r) for e in container["env"]}) for r in range(3)]


LIVE_JOB = "hf-live-g-1"


def live_job(launcher: str, tmp: Path) -> Any:
    """The live backend's objects for a gang of 3 as the launcher hands it a cluster engine's."""
    made = gang_job(LIVE_JOB, tmp, ["train"] * 3, run_id="live", cluster=True)
    gang = Gang(replicas=3, launcher=launcher, port=PORT)
    objects = job_objects(replace(made, gang=gang), KubernetesSettings.from_mapping({}), Placement())
    (job,) = (o for o in objects if o["kind"] == "Job")
    return job


def kubernetes_live(launcher: str, where: str, tmp: Path) -> list[Env]:
    """The live Kubernetes backend: the Indexed Job it creates, each index's env resolved."""
    (container,) = live_job(launcher, tmp)["spec"]["template"]["spec"]["containers"]
    return [contract_of({e["name"]: indexed(e, r) for e in container["env"]}) for r in range(3)]


def indexed(e: dict[str, Any], rank: int) -> str:
    """An env entry's value in the pod of completion index ``rank``."""
    if "value" in e:
        return str(e["value"])
    assert e["valueFrom"] == {"fieldRef": {"fieldPath": INDEX}}, e
    return str(rank)


PRODUCERS: dict[str, Producer] = {
    "local": local,
    "slurm": slurm,
    "ray": ray,
    "kubernetes": kubernetes,
    "kubernetes-live": kubernetes_live,
}
ROWS = [
    pytest.param(producer, launcher, where, id=f"{producer}-{launcher}-{where}")
    for producer in PRODUCERS
    for launcher in ("none", "torch", "mpi")
    for where in LAYOUTS
    if not producer.startswith("kubernetes") or where == "spread"  # a pod is a node: one layout
    if producer != "kubernetes-live" or launcher != "mpi"  # refused: the export's MPIJob runs it (below)
]


@pytest.mark.parametrize(("producer", "launcher", "where"), ROWS)
def test_every_rank_sees_the_launch_contract(producer: str, launcher: str, where: str, tmp_path: Path) -> None:
    got = PRODUCERS[producer](launcher, where, tmp_path)
    if producer == "kubernetes-live":
        name = object_name(LIVE_JOB)
        want = expected(launcher, where, f"{name}-0.{name}")  # replica 0's pod, by the headless Service
    elif producer == "kubernetes":
        master = f"hf-{RUN}-g-0.hf-{RUN}-g"  # replica 0's pod, by the headless Service's DNS name
        want = expected(launcher, where, master)
        if launcher == "mpi":  # mpirun -x passes the launcher's variables: only the gang-wide ones
            want = [{"HETFLOW_WORLD_SIZE": "3", "WORLD_SIZE": "3"}] * 3
    else:
        want = expected(launcher, where, ADDRESS["n0"])
    assert got == want


def test_the_live_kubernetes_backend_refuses_an_mpi_gang_saying_where_it_runs(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"through the MPI operator.*hetflow export kubernetes"):
        live_job("mpi", tmp_path)

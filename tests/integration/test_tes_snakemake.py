"""Snakemake 9 through ``hetflow tes serve``, end to end: the Snakemake of
``make snakemake-tes-venv`` (9.27.1 with snakemake-executor-plugin-tes 0.1.3, in its own
virtual env) runs a Snakefile of a fan-out (three items) and a gather with ``--executor tes``
against a real server, its files in a real S3-compatible server (moto) through
``--default-storage-provider s3``.  The plugin runs Snakemake itself in each task's container
(the image of ``build_snakemake_image``), which fetches and stores the job's files through its
S3 plugin: so the server gives its tasks a network (tes.yaml ``task_network: true``) and moto
listens on this machine's outward address, which the host and the containers both reach.  The
same Snakefile runs with the server on the local Slurm test cluster (``slurm_fixture``), each
task's executor a Slurm job.

Not here: a GPU rule.  Plugin 0.1.3 sends a task's cpu_cores, ram_gb and disk_gb only, and its
py-tes 0.4.2 (TES 1.0) has no backend_parameters, so a rule's ``resources: gpu=1`` never reaches
the server: there is nothing to place on a GPU (docs/guides/tes-snakemake.md)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tes
import yaml
from demo.images import build_snakemake_image
from demo.slurm.cluster import CLUSTER_FILE, LocalSlurm

from tests.integration.s3server import CREDENTIALS, container_reachable_address, s3_server
from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)
from tests.integration.teskit import serving

VENV = Path(__file__).resolve().parents[2] / "build" / "snakemake-tes-venv"
SNAKEMAKE = VENV / "bin" / "snakemake"
pytestmark = [
    pytest.mark.integration,
    # a skip before any fixture (the Slurm cluster's is the module's, made first)
    pytest.mark.skipif(
        not SNAKEMAKE.is_file(),
        reason=f"no {SNAKEMAKE}: run `make snakemake-tes-venv` (Snakemake 9.27.1 + snakemake-executor-plugin-tes)",
    ),
]
ITEMS = ("a", "b", "c")

SNAKEFILE = f"""\
ITEMS = {list(ITEMS)!r}

rule all:
    input: "results/gathered.txt"

rule item:
    output: "results/part_{{item}}.txt"
    shell: "echo item {{wildcards.item}} from $(hostname) > {{output}}"

rule gather:
    input: expand("results/part_{{item}}.txt", item=ITEMS)
    output: "results/gathered.txt"
    shell: "cat {{input}} | cut -d' ' -f1-2 > {{output}}"
"""


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    address = container_reachable_address()
    if address is None:
        pytest.skip("this machine has no outward IPv4 address for the tasks' containers to reach the S3 server on")
    with s3_server(tmp_path / "moto.log", host=address) as url:
        yield url


@pytest.fixture
def s3(endpoint: str) -> Any:
    import boto3

    keys = {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    return boto3.client("s3", endpoint_url=endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"], **keys)


def snakemake(workflow: Path, tes_url: str, endpoint: str, image: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(SNAKEMAKE), "--executor", "tes", "--tes-url", tes_url, "--jobs", "3",
        "--default-storage-provider", "s3", "--default-storage-prefix", "s3://snk/wf",
        "--storage-s3-endpoint-url", endpoint,
        "--storage-s3-access-key", CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "--storage-s3-secret-key", CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "--container-image", image, "--seconds-between-status-checks", "2",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("AWS_")}
    # plugin 0.1.3 prints $GITHUB_WORKSPACE/funnel.log (its own CI's) when a task fails: without one
    # a failed task would end Snakemake with a KeyError instead of the task's error
    (workflow / "funnel.log").write_text("(hetflow's test: the task's logs are in the TES server's GET /tasks/ID)\n")
    env.update(GITHUB_WORKSPACE=str(workflow), **CREDENTIALS)
    return subprocess.run(argv, cwd=workflow, env=env, capture_output=True, text=True, timeout=900)


def failure(task: tes.Task) -> str:
    """The end of the task's last executor's stderr (Snakemake's own log in the container)."""
    logs = task.logs[-1].logs if task.logs else None
    return (logs[-1].stderr or "")[-2000:] if logs else ""


def run_workflow(tmp_path: Path, endpoint: str, s3: Any, config: str, backend: str | None = None) -> list[tes.Task]:
    """The Snakefile run by Snakemake against a server with ``config`` on ``backend``: it ends
    0, the gathered file in S3 is right, and each of its tasks is a hetflow run that succeeded;
    the tasks, as the server gives them."""
    image = build_snakemake_image(log=lambda _: None)
    s3.create_bucket(Bucket="snk")
    workflow = tmp_path / "workflow"
    workflow.mkdir()
    (workflow / "Snakefile").write_text(SNAKEFILE)
    with serving(tmp_path, config=config, env=CREDENTIALS, backend=backend) as server:
        done = snakemake(workflow, f"{server.url}/ga4gh/tes", endpoint, image)
        client = tes.HTTPClient(server.url, timeout=30)
        tasks = [client.get_task(t.id, view="FULL") for t in client.list_tasks(view="MINIMAL").tasks]
        listed = server.hetflow("ps", "--all", "--json")
    # Snakemake says only "command exited with non-zero exit code": the failed tasks' logs say why
    failed = [(t.name, t.state, t.logs and t.logs[-1].system_logs, failure(t)) for t in tasks if t.state != "COMPLETE"]
    assert done.returncode == 0, (done.stderr[-3000:], failed)

    body = s3.get_object(Bucket="snk", Key="wf/results/gathered.txt")["Body"].read()
    assert body == b"".join(f"item {i}\n".encode() for i in ITEMS)
    # each item ran in a container of its own (its hostname in its part)
    hosts = {s3.get_object(Bucket="snk", Key=f"wf/results/part_{i}.txt")["Body"].read().split()[-1] for i in ITEMS}
    assert len(hosts) == len(ITEMS), hosts

    # four tasks (three items, the gather; "all" is local), each Snakemake in the image, COMPLETE
    assert len(tasks) == len(ITEMS) + 1, [t.name for t in tasks]
    assert all(t.state == "COMPLETE" for t in tasks), [(t.name, t.state, t.logs) for t in tasks]
    assert {t.executors[0].image for t in tasks} == {image}
    # and each one a hetflow run in the server's store, that succeeded
    assert listed.returncode == 0, listed.stderr
    runs = {r["name"]: r for r in json.loads(listed.stdout)}
    assert set(runs) == {f"tes-{t.id}" for t in tasks}, runs
    assert {r["state"] for r in runs.values()} == {"succeeded"}, runs
    return tasks


def test_a_fan_out_and_gather_runs_through_the_tes_server(tmp_path: Path, endpoint: str, s3: Any) -> None:
    run_workflow(tmp_path, endpoint, s3, "task_network: true\n")


def test_the_same_snakefile_runs_with_the_server_on_slurm(
    tmp_path: Path,
    endpoint: str,
    s3: Any,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    settings = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    config = yaml.safe_dump({"run_settings": settings, "max_running": 3, "task_network": True})
    tasks = run_workflow(tmp_path, endpoint, s3, config, backend="slurm")
    # every task's executor was a Slurm job on one of the cluster's nodes, as Slurm reported it
    nodes = {n.name for n in slurm_cluster.nodes}
    for task in tasks:
        ran = [line.split() for line in task.logs[-1].system_logs if line.startswith("exec-0 ran on node ")]
        assert len(ran) == 1 and ran[0][4] in nodes, task.logs[-1].system_logs

"""Slurm's limits and kill reach the step's container, on a local test cluster of its own
with Slurm's cgroup plugins (proctrack/cgroup, task/cgroup, cgroup.conf ConstrainRAMSpace:
``demo.slurm.cluster.slurm_conf(cgroups=True)``; this machine has cgroup v1).  The job
script starts the container with ``--cgroup-parent`` = the job's cgroup
(``backends.slurm.cgroup``), so the job's memory limit holds it and scancel's kill, which
proctrack/cgroup sends to every process of the job's cgroup, reaches it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from demo.images import build_tiny_image
from demo.slurm.cluster import FakeNode, LocalSlurm

from hetflow.config import engine_env
from hetflow.execute.backends.slurm import SlurmBackend
from tests.contract.backend_contract import BUSYBOX, job, wait_done
from tests.integration.slurm_fixture import local_cluster

MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    build_tiny_image(BUSYBOX)
    with local_cluster((FakeNode("hf-cg", memory_mb=2000),), prefix="hfcg-", cgroups=True) as c:
        yield c


def _job_id(c: LocalSlurm, r: str, name: str) -> str:
    return (c.workdir / r / f"{name}.jobid").read_text().strip()


def test_the_jobs_memory_limit_holds_its_container(cluster: LocalSlurm, tmp_path: Path) -> None:
    # Slurm gives the job 64 MiB; the container itself has no limit of its own, and holds
    # 200 MB in a shell variable: the job's cgroup, its parent, kills it (exit 137)
    backend = SlurmBackend(cluster.settings())
    r = f"m{time.time_ns() % 10**9}"
    name = f"hf-{r}-big-1"
    script = "cat /proc/self/cgroup > /out/cg; x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo held > /out/held"
    j = job(name, tmp_path, script, run_id=r)
    backend.submit(replace(j, memory=64 * MIB, container=replace(j.container, memory=0)))
    st = wait_done(backend, r, [name])[name]
    assert st.exit_code == 137, st
    assert not (tmp_path / "held").exists()
    job_id = _job_id(cluster, r, name)
    assert f"/slurm_hf-cg/uid_0/job_{job_id}/" in (tmp_path / "cg").read_text()  # under the job's cgroup
    backend.release([name])


def test_scancel_reaches_the_container_through_the_jobs_cgroup(cluster: LocalSlurm, tmp_path: Path) -> None:
    backend = SlurmBackend(cluster.settings())
    r = f"c{time.time_ns() % 10**9}"
    name = f"hf-{r}-slow-1"
    backend.submit(job(name, tmp_path, "echo up > /out/up; sleep 300", run_id=r))
    deadline = time.time() + 60
    while not (tmp_path / "up").exists():
        assert time.time() < deadline, backend.poll(r)
        time.sleep(0.2)
    env = engine_env()
    pid = subprocess.run(
        ["podman", "inspect", "--format", "{{.State.Pid}}", name], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    # the container's process, seen from the host, is in the job's cgroup: what scancel kills
    assert f"/job_{_job_id(cluster, r, name)}/" in Path(f"/proc/{pid}/cgroup").read_text()
    backend.cancel([name], grace=0)
    st = wait_done(backend, r, [name])[name]
    assert st.exit_code in (137, 143), st  # killed or stopped, as scancel's signals go
    ps = ["podman", "ps", "--filter", f"name=^{name}$", "--format", "{{.Names}}"]
    assert subprocess.run(ps, env=env, capture_output=True, text=True).stdout.split() == []
    backend.release([name])

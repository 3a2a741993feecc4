"""A local Slurm cluster for one test module: two slurmd with different fake GPUs
(hf-a100: gpu:a100:2, hf-t4: gpu:t4:1), started once and stopped at the end; a node's
failure (``kill_slurmd``) and its return (``restart_slurmd``).

No skip: where Slurm cannot start (not installed, not root), the tests fail with the reason."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from demo.slurm.cluster import DEFAULT_NODES, FakeNode, LocalSlurm, start_cluster

from hetflow.errors import EngineError
from tests.integration.hfkit import write
from tests.leftovers import session_folder


@contextmanager
def local_cluster(
    nodes: Sequence[FakeNode] = DEFAULT_NODES, prefix: str = "hfslurm-", *, cgroups: bool = False
) -> Iterator[LocalSlurm]:
    """A local Slurm cluster of ``nodes`` in a fresh folder, stopped and removed after;
    ``cgroups``: with Slurm's cgroup plugins (``demo.slurm.cluster.slurm_conf``)."""
    # A short folder: slurmd's step sockets live under it (Unix sockets: 108 bytes).
    base = session_folder(prefix)  # its slurmstepd, which slurmd gives no environment, are the session's
    try:
        cluster = start_cluster(base, nodes, cgroups=cgroups, timeout=120)
    except EngineError:
        # once more, on new ports: the tests run on several workers, and another module's
        # cluster starting at the same moment may have taken a port between its choice and its use
        cluster = start_cluster(base, nodes, cgroups=cgroups, timeout=120)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[LocalSlurm]:
    with local_cluster() as cluster:
        yield cluster


def slurm_config(tmp_path: Path, cluster: LocalSlurm, cluster_file: str, **slurm: object) -> str:
    """A hetflow config file that runs on ``cluster``, planned on the cluster file text
    ``cluster_file``; ``slurm`` adds or overrides backend settings (stop_timeout, ...)."""
    settings = {
        "backend": "slurm",
        "cluster": write(tmp_path, cluster_file, "cluster.yaml"),
        "workdir": str(cluster.workdir / "runs"),
        "slurm": {
            "partition": cluster.partition,
            "slurm_conf": str(cluster.conf_path),
            "device_dir": cluster.device_dir,
            "stop_timeout": 5,
            **slurm,
        },
    }
    return write(tmp_path, yaml.safe_dump(settings), "config.yaml")


def scontrol(c: LocalSlurm, *args: str, check: bool = True) -> None:
    subprocess.run(["scontrol", *args], env={**os.environ, **c.env}, check=check, capture_output=True, timeout=30)


def node_state(c: LocalSlurm, node: str) -> str:
    out = subprocess.run(
        ["sinfo", "--noheader", "-n", node, "--format=%T"], env={**os.environ, **c.env}, capture_output=True, text=True
    )
    return out.stdout.strip()


def kill_slurmd(c: LocalSlurm, node: str) -> None:
    pid = int((c.base / "run" / f"slurmd-{node}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    scontrol(c, "update", f"NodeName={node}", "State=DOWN", "Reason=hetflow-test: slurmd killed")


def restart_slurmd(c: LocalSlurm, node: str) -> None:
    env = {**os.environ, **c.env}
    subprocess.run(["slurmd", "-f", str(c.conf_path), "-N", node], env=env, check=True, timeout=30)
    # ReturnToService=2 may bring it back as it registers: RESUME is then refused, harmlessly
    scontrol(c, "update", f"NodeName={node}", "State=RESUME", check=False)
    deadline = time.time() + 60
    while time.time() < deadline and node_state(c, node).rstrip("*~#") not in ("idle", "mixed", "allocated"):
        time.sleep(0.3)
    assert node_state(c, node).rstrip("*~#") in ("idle", "mixed", "allocated"), node_state(c, node)

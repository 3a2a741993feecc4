"""A local Slurm cluster for one test module: two slurmd with different fake GPUs
(hf-a100: gpu:a100:2, hf-t4: gpu:t4:1), started once and stopped at the end.

No skip: where Slurm cannot start (not installed, not root), the tests fail with the reason."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from demo.slurm_cluster import DEFAULT_NODES, FakeNode, LocalSlurm, start_cluster

from hetflow.errors import EngineError
from tests.integration.hfkit import write
from tests.leftovers import session_folder


@contextmanager
def local_cluster(
    nodes: Sequence[FakeNode] = DEFAULT_NODES, prefix: str = "hfslurm-", *, cgroups: bool = False
) -> Iterator[LocalSlurm]:
    """A local Slurm cluster of ``nodes`` in a fresh folder, stopped and removed after;
    ``cgroups``: with Slurm's cgroup plugins (``demo.slurm_cluster.slurm_conf``)."""
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

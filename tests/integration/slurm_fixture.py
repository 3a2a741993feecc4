"""A local Slurm cluster for one test module: two slurmd with different fake GPUs
(hf-a100: gpu:a100:2, hf-t4: gpu:t4:1), started once and stopped at the end.

No skip: where Slurm cannot start (not installed, not root), the tests fail with the reason."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from demo.slurm_cluster import LocalSlurm, start_cluster


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[LocalSlurm]:
    # A short folder: slurmd's step sockets live under it (Unix sockets: 108 bytes).
    base = Path(tempfile.mkdtemp(prefix="hfslurm-", dir="/tmp"))
    cluster = start_cluster(base)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)

"""The CUDA+CPU CWL workflow (``cwlkit``) handed to the local two-node Slurm cluster with
``hetflow run x.cwl --config`` (backend: slurm): the CUDA job gets one GPU through Slurm's
gres on a GPU node and only that GPU in its container, the CPU job none; the store records
the node Slurm chose.  The cluster's GPUs are FAKE (mknod'd device nodes): placement and
isolation, not CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demo.slurm.cluster import CLUSTER_FILE, LocalSlurm

from tests.integration.cwlkit import hetflow, model_lines, write_workflow
from tests.integration.hfkit import Hetflow
from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)

pytestmark = pytest.mark.integration


def test_the_cuda_job_gets_a_slurm_gpu_and_the_cpu_job_none(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    config = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    workflow = write_workflow(tmp_path)
    proc = hetflow(tmp_path, hf.env, "run", "-q", "--config", config, str(workflow), str(tmp_path / "inputs.yml"))
    model = model_lines(proc)
    # one fake GPU device node, numbered as on its node; inside, CUDA counts from 0
    assert len(model) == 4 and model[0].startswith("nvidia") and model[0][6:].isdigit(), model
    assert model[1:] == ["cuda=0 nv=0", "0", "prepared 7"]  # the CPU job saw no GPU
    run = json.loads(hf("ps", "--all", "--json").stdout)[0]
    shown = hf.show(run["id"])
    assert shown["state"] == "succeeded", shown
    steps = {s["step"]: s for s in shown["steps"]}
    gpu_nodes = {n.name for n in slurm_cluster.nodes}
    assert steps["train"]["node"] in gpu_nodes and len(steps["train"]["gpus"]) == 1, steps["train"]
    assert steps["prep"]["node"] in gpu_nodes and steps["prep"]["gpus"] == [], steps["prep"]

"""Application checkpoints on a real local Ray cluster: the task stops the step's container
with the step's ``stop_grace`` (not the backend's stop_timeout), the step saves on SIGTERM to
$HETFLOW_CHECKPOINT_DIR, and the resumed attempt finds it."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.hfkit import Hetflow, write
from tests.integration.ray_fixture import RayCluster, ray_cluster, step_log  # noqa: F401  (module fixture)
from tests.integration.test_app_checkpoint_slurm import SAVES
from tests.integration.test_run_ray import CLUSTER


def test_a_stopped_ray_step_saves_on_sigterm_and_its_resume_finds_it(
    hf: Hetflow,
    tmp_path: Path,
    ray_cluster: RayCluster,  # noqa: F811
) -> None:
    # the backend's own stop timeout (1 s) would kill the step during its 3 s save: its 20 s wins
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 1},
    }
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, SAVES)).stdout.strip()
    hf.wait_for(lambda: "started" in step_log(hf, run_id, "train"), timeout=180)

    hf("stop", run_id)

    assert "saved in /checkpoint" in hf("logs", run_id, "train").stdout
    folder = Path(hf.show(run_id)["workdir"]) / "checkpoints" / "train" / "app"
    assert (folder / "saved").read_text() == "7\n"

    hf("resume", "-q", run_id, timeout=300)

    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    assert "resumed from 7" in hf("logs", run_id, "train").stdout

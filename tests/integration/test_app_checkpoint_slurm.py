"""Application checkpoints on a real (local, two-slurmd) Slurm cluster: the step's
$HETFLOW_CHECKPOINT_DIR is on the cluster's shared work directory, `hetflow stop` reaches the
container with SIGTERM and the step's ``stop_grace`` (scancel --signal=TERM, then scancel),
and the resumed attempt finds what the stopped one saved."""

from __future__ import annotations

from pathlib import Path

from demo.slurm.cluster import CLUSTER_FILE as CLUSTER
from demo.slurm.cluster import LocalSlurm

from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)

SAVES = f"""apiVersion: hetflow/v1
name: appckpt
steps:
  train:
    image: {BUSYBOX}
    checkpoint: {{mode: app}}
    stop_grace: 20s
    resources: {{cpus: 1, memory: 256Mi}}
    estimate: 2s
    command:
      - sh
      - -c
      - >-
        d="$HETFLOW_CHECKPOINT_DIR";
        if [ -f "$d/saved" ]; then echo "resumed from $(cat "$d/saved")"; exit 0; fi;
        trap 'echo saving; sleep 3; echo 7 > "$d/saved"; echo "saved in $d"; exit 143' TERM;
        echo started; sleep 120 & wait
"""


def test_a_stopped_slurm_step_saves_on_sigterm_and_its_resume_finds_it(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    # the backend's own stop timeout (1 s) would kill the step during its 3 s save: its 20 s wins
    config = slurm_config(tmp_path, slurm_cluster, CLUSTER, stop_timeout=1)
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, SAVES)).stdout.strip()
    hf.wait_for(lambda: "started" in hf("logs", run_id, "train", check=False).stdout, timeout=120)

    hf("stop", run_id)

    assert "saved in /checkpoint" in hf("logs", run_id, "train").stdout
    folder = Path(hf.show(run_id)["workdir"]) / "checkpoints" / "train" / "app"
    assert (folder / "saved").read_text() == "7\n"  # on the cluster's shared work directory

    hf("resume", "-q", run_id, timeout=300)  # the run keeps its backend settings

    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    assert "resumed from 7" in hf("logs", run_id, "train").stdout

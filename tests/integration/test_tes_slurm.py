"""``hetflow tes serve --backend slurm``: py-tes hands a task to the TES server, whose
executors run as Slurm jobs on the local test cluster (two slurmd on this machine,
``slurm_fixture``), made through the backend registry from the same settings file
``hetflow run --backend slurm --config FILE`` reads; a file input goes in, the second
executor reads what the first wrote, and the output comes back to the file root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tes
import yaml
from demo.slurm.cluster import CLUSTER_FILE, LocalSlurm

from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)
from tests.integration.teskit import ENDED, serving, until

pytestmark = pytest.mark.integration


def test_a_two_executor_task_with_a_file_input_and_output_completes_on_slurm(
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("from the host\n")
    settings = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    config = yaml.safe_dump({"run_settings": settings, "max_running": 2})
    with serving(tmp_path, config=config, backend="slurm", data=data) as server:
        client = tes.HTTPClient(server.url, timeout=30)
        first, second = "tr a-z A-Z < /data/in.txt > /work/up.txt; echo one", "cat /work/up.txt; echo two"
        task = tes.Task(
            name="on-slurm",
            executors=[
                tes.Executor(image="alpine", command=["sh", "-c", first]),
                tes.Executor(image="alpine", command=["sh", "-c", second], stdout="/work/out.txt"),
            ],
            inputs=[tes.Input(url=f"file://{data}/in.txt", path="/data/in.txt")],
            outputs=[tes.Output(url=f"file://{data}/out.txt", path="/work/out.txt")],
        )  # fmt: skip
        task_id = client.create_task(task)
        until(lambda: client.get_task(task_id, view="MINIMAL").state in ENDED, "the task ends", timeout=300)
        done = client.get_task(task_id, view="FULL")
        assert done.state == "COMPLETE", done.logs
        assert [e.exit_code for e in done.logs[-1].logs] == [0, 0]
        assert done.logs[-1].logs[0].stdout == "one\n"
        assert (data / "out.txt").read_text() == "FROM THE HOST\ntwo\n"
        # each executor was a Slurm job on one of the cluster's nodes, as Slurm reported it
        ran = [line for line in done.logs[-1].system_logs if " ran on node " in line]
        assert [line.split()[0] for line in ran] == ["exec-0", "exec-1"], done.logs[-1].system_logs
        assert all(line.split()[4] in {n.name for n in slurm_cluster.nodes} for line in ran), ran
        # and the run's attempts say so too (hetflow show, the dashboard's TES tasks tab)
        (run_id,) = [line.split()[-1] for line in done.logs[-1].system_logs if line.startswith("hetflow run ")]
        shown = json.loads(server.hetflow("show", run_id, "--json").stdout)
        nodes = {s["step"]: s["node"] for s in shown["steps"]}
        assert nodes == {f"exec-{i}": ran[i].split()[4] for i in range(2)}, nodes

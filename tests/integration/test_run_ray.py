"""`hetflow run --backend ray`: the same workflow, planned on a cluster file and run as Ray
tasks on a Ray cluster of unlike nodes (ray.cluster_utils); the GPUs are FAKE (mknod'd)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.ray import RayBackend
from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.racechain import RAY_POLL, REPEATS, run_chain
from tests.integration.ray_fixture import RayCluster, ray_cluster, step_log  # noqa: F401  (module fixture)
from tests.integration.test_data_fanout import check_cluster_fan
from tests.integration.test_run_slurm import MIB, PACKED, USAGE, WORKFLOW

# Node types named after the Ray nodes (a class of one is pinned to the node of its name).
CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: local-ray
bandwidth: 10Gbit/s
nodeTypes:
  - {name: cpu-1, count: 1, cores: 4, memory: 3Gi, price: 0.5}
  - {name: gpu-a100, count: 1, cores: 4, memory: 3Gi, price: 4.0,
     gpus: {model: NVIDIA A100-SXM4-40GB, count: 2, memory: 40Gi, computeCapability: "8.0"}}
  - {name: gpu-t4, count: 1, cores: 2, memory: 3Gi, price: 0.8,
     gpus: {model: Tesla T4, count: 1, memory: 16Gi, computeCapability: "7.5"}}
"""


def test_workflow_runs_on_ray(hf: Hetflow, tmp_path: Path, ray_cluster: RayCluster) -> None:  # noqa: F811
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    hf("run", "-q", "--config", config, write(tmp_path, WORKFLOW), timeout=300)
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded"
    steps = {s["step"]: s for s in data["steps"]}
    assert (steps["use"]["variant"], steps["use"]["node"]) == ("gpu", "gpu-a100")
    out = Path(data["workdir"]) / "steps" / "use" / "out"
    assert (out / "r.txt").read_text() == "data\n"
    nvidia = [d for d in (out / "dev.txt").read_text().split() if d.startswith("nvidia") and d[6:].isdigit()]
    assert len(nvidia) == 1  # exactly the GPU Ray assigned
    assert len(steps["use"]["gpus"]) == 1 and steps["gen"]["gpus"] == [], steps  # GPUS: the one Ray gave (issue 37)
    assert json.loads(hf("ps", "--all", "--json").stdout)[0]["state"] == "succeeded"
    assert "gen-ran" in hf("logs", data["id"], "gen").stdout


def test_data_fanout_and_publish_on_ray(hf: Hetflow, tmp_path: Path, ray_cluster: RayCluster) -> None:  # noqa: F811
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    check_cluster_fan(hf, tmp_path, write(tmp_path, yaml.safe_dump(settings), "config.yaml"))


@pytest.mark.parametrize("repeat", range(REPEATS), ids=lambda r: f"run-{r}")
def test_a_chain_never_starts_a_step_before_its_input_is_in_place(
    hf: Hetflow,
    tmp_path: Path,
    ray_cluster: RayCluster,  # noqa: F811
    repeat: int,
) -> None:
    """issue 30: Ray does not hold dependencies, so the executor submits a child only after it
    accepted its parent's outputs (``Runner._schedule``); a slow poll only slows the chain."""
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    run_chain(hf, tmp_path, write(tmp_path, yaml.safe_dump(settings), "config.yaml"), RAY_POLL)


def test_step_times_are_the_tasks_and_usage_is_measured_on_the_node(
    hf: Hetflow,
    tmp_path: Path,
    ray_cluster: RayCluster,  # noqa: F811
) -> None:
    """show's STARTED/ENDED are when the Ray task ran (the held step's after its parent's end,
    not its submission); the trace has the container's peak memory (near the 64 MiB it
    allocated) and CPU time, measured by the task on its node."""
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    hf("run", "-q", "--no-cache", "--config", config, write(tmp_path, USAGE), timeout=300)
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    hog = {r["step"]: r for r in json.loads(hf("trace", run_id, "--json").stdout)}["hog"]
    assert steps["first"]["ended"] <= steps["hog"]["started"] <= hog["start"] <= hog["end"], (steps, hog)
    assert hog["end"] <= steps["hog"]["ended"] and hog["submit"] < steps["hog"]["started"], (steps, hog)
    assert 64 * MIB <= hog["peak_rss"] <= 64 * MIB + 48 * MIB, hog
    assert hog["cpu_time"] > 0, hog


def test_small_items_are_packed_into_few_ray_tasks(hf: Hetflow, tmp_path: Path, ray_cluster: RayCluster) -> None:  # noqa: F811
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    hf("run", "-q", "--config", config, write(tmp_path, PACKED.format(items=30, batch=10), "packed.yaml"), timeout=300)
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded"
    store = Store(hf.home / "state.db")
    tasks = {a.container for s in store.steps(data["id"]) for a in store.attempts(data["id"], s.step)}
    assert len(tasks) == 4 and sum(t.endswith("-batch") for t in tasks) == 3  # 30 items in 3 tasks, and the gather
    assert (Path(data["workdir"]) / "steps" / "gather" / "out" / "n.txt").read_text().strip() == "30"
    assert "item 17" in hf("logs", data["id"], "work.17").stdout


# issue 37: `quick` ends before the stop (the executor, polling every 120 s, has not seen it),
# `saves` ends during it (SIGTERM: it writes its output and exits 0 within its stop_grace),
# `holds` is stopped (busybox sleep ignores SIGTERM: killed after the backend's stop timeout)
STOPPED_WF = f"""apiVersion: hetflow/v1
name: raystop
steps:
  quick:
    image: {BUSYBOX}
    command: [sh, -c, "echo quick > /out/r.txt"]
    resources: {{cpus: 1, memory: 128Mi}}
    outputs: [r.txt]
  saves:
    image: {BUSYBOX}
    command: [sh, -c, "trap 'echo saved > /out/r.txt; exit 0' TERM; echo up; while :; do sleep 1; done"]
    resources: {{cpus: 1, memory: 128Mi}}
    outputs: [r.txt]
    stop_grace: 30s
  holds:
    image: {BUSYBOX}
    command: [sleep, "600"]
    resources: {{cpus: 1, memory: 128Mi}}
"""


def test_stop_settles_the_tasks_that_ended_before_or_during_it(
    hf: Hetflow,
    tmp_path: Path,
    ray_cluster: RayCluster,  # noqa: F811
) -> None:
    """issue 37: a Ray task that ended before ``hetflow stop`` (not yet collected by the
    executor) or during it (exit 0 with its outputs in its stop grace) is recorded succeeded,
    its outputs accepted; only the one the stop ended is stopped; nothing stays running."""
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {"address": ray_cluster.address, "device_dir": f"{ray_cluster.devs}/{{node}}", "stop_timeout": 2},
    }
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    wf = write(tmp_path, STOPPED_WF)
    slow_poll = {"HETFLOW_POLL_INTERVAL": "120"}  # the executor sees no end before the stop
    run_id = hf("run", "-d", "--no-cache", "--config", config, wf, extra_env=slow_poll).stdout.strip().split()[-1]
    executor = hf.show(run_id)["pid"]
    backend = RayBackend(ray_cluster.settings())

    def tasks() -> dict[str, JobState]:
        return {s.name.split("-")[-2]: s for s in backend.poll(run_id).values()}

    def ready() -> bool:
        t = tasks()
        quick_done = "quick" in t and not t["quick"].running and t["quick"].exit_code == 0
        return quick_done and "up" in step_log(hf, run_id, "saves") and "holds" in t

    hf.wait_for(ready, timeout=240)
    assert {s["step"]: s["state"] for s in hf.show(run_id)["steps"]}["quick"] == "running"  # not collected yet

    hf("stop", run_id, timeout=180)

    data = hf.show(run_id)
    states = {s["step"]: (s["state"], s["exit_code"]) for s in data["steps"]}
    assert data["state"] == "stopped", data
    assert states["quick"] == states["saves"] == ("succeeded", 0) and states["holds"][0] == "stopped", states
    out = Path(data["workdir"]) / "steps"
    assert (out / "quick" / "out" / "r.txt").read_text() == "quick\n"
    assert (out / "saves" / "out" / "r.txt").read_text() == "saved\n"
    with contextlib.suppress(ProcessLookupError):
        os.kill(executor, signal.SIGKILL)  # asleep in its 120 s poll: it would only find the run stopped

"""`hetflow run --backend slurm`: the same workflow, planned on a cluster file and handed to a
real (local, two-slurmd) Slurm cluster; ps, show, logs and stop read it the same way.
The cluster's GPUs are FAKE (mknod'd device nodes): placement and isolation, not CUDA."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from demo.slurm.cluster import CLUSTER_FILE as CLUSTER
from demo.slurm.cluster import LocalSlurm

from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.racechain import REPEATS, SLURM_POLL, run_chain
from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)
from tests.integration.test_data_fanout import check_cluster_fan
from tests.integration.test_data_frozen import WAITS_THEN_READS, running, started

WORKFLOW = f"""apiVersion: hetflow/v1
name: slurmdag
steps:
  gen:
    image: {BUSYBOX}
    command: [sh, -c, "echo data > /out/d.txt; echo gen-ran"]
    resources: {{cpus: 1, memory: 256Mi}}
    estimate: 2s
    outputs: [d.txt]
  use:
    inputs: {{d: gen/d.txt}}
    outputs: [r.txt, dev.txt]
    variants:
      gpu:
        image: {BUSYBOX}
        command: [sh, -c, "cat /in/d/d.txt > /out/r.txt; ls /dev > /out/dev.txt"]
        resources: {{cpus: 1, memory: 256Mi, gpus: 1}}
        gpu: {{min_compute_capability: "8.0"}}
        estimate: 1s
      cpu:
        image: {BUSYBOX}
        command: [sh, -c, "cat /in/d/d.txt > /out/r.txt; ls /dev > /out/dev.txt"]
        resources: {{cpus: 1, memory: 256Mi}}
        estimate: 60s
"""


# fan-out items packed several to a job (issue 26); Slurm's and Ray's tests run it
PACKED = f"""apiVersion: hetflow/v1
name: packed
steps:
  work:
    image: {BUSYBOX}
    foreach: {{{{range: {{items}}}}}}
    command: [sh, -c, "echo item {{{{{{{{ item }}}}}}}}; echo {{{{{{{{ item }}}}}}}} > /out/o.txt"]
    resources: {{{{cpus: 1, memory: 64Mi}}}}
    estimate: 1s
    outputs: [o.txt]
    batch: {{batch}}
  gather:
    image: {BUSYBOX}
    needs: [work]
    inputs: {{{{parts: work/o.txt}}}}
    command: [sh, -c, "cat /in/parts/*/o.txt | wc -l > /out/n.txt"]
    resources: {{{{cpus: 1, memory: 64Mi}}}}
    outputs: [n.txt]
"""


def _config(tmp_path: Path, cluster: LocalSlurm) -> str:
    return slurm_config(tmp_path, cluster, CLUSTER)


def test_workflow_runs_on_slurm_and_reads_back_the_same(hf: Hetflow, tmp_path: Path, slurm_cluster: LocalSlurm) -> None:  # noqa: F811
    config = _config(tmp_path, slurm_cluster)
    hf("run", "-q", "--config", config, write(tmp_path, WORKFLOW), timeout=300)
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded"
    steps = {s["step"]: s for s in data["steps"]}
    # the plan put the GPU variant on the node whose GPUs qualify (cc 8.0): the A100 node
    assert (steps["use"]["variant"], steps["use"]["node"]) == ("gpu", "hf-a100")
    out = Path(data["workdir"]) / "steps" / "use" / "out"
    assert (out / "r.txt").read_text() == "data\n"
    nvidia = [d for d in (out / "dev.txt").read_text().split() if d.startswith("nvidia") and d[6:].isdigit()]
    assert len(nvidia) == 1  # exactly the one GPU Slurm allocated
    runs = json.loads(hf("ps", "--all", "--json").stdout)
    assert runs[0]["id"] == data["id"] and runs[0]["state"] == "succeeded"
    assert "gen-ran" in hf("logs", data["id"], "gen").stdout


def test_stop_cancels_the_slurm_jobs(hf: Hetflow, tmp_path: Path, slurm_cluster: LocalSlurm) -> None:  # noqa: F811
    config = _config(tmp_path, slurm_cluster)
    slow = WORKFLOW.replace("echo data > /out/d.txt", "sleep 60; echo data > /out/d.txt")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, slow, "slow.yaml")).stdout.strip()
    hf.wait_for(lambda: {s["step"]: s["state"] for s in hf.show(run_id)["steps"]}["gen"] == "running", timeout=120)
    out = hf("stop", run_id).stdout
    assert f"run {run_id} stopped" in out
    data = hf.show(run_id)
    assert data["state"] == "stopped"
    assert {s["step"]: s["state"] for s in data["steps"]} == {"gen": "stopped", "use": "stopped"}


def test_kill9_of_hetflow_then_resume_adopts_the_slurm_jobs(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    import os
    import signal

    config = _config(tmp_path, slurm_cluster)
    slow = WORKFLOW.replace("echo data > /out/d.txt", "sleep 8; echo data > /out/d.txt")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, slow, "slow.yaml")).stdout.strip()
    hf.wait_for(lambda: {s["step"]: s["state"] for s in hf.show(run_id)["steps"]}["gen"] == "running", timeout=120)
    pid = hf.show(run_id)["pid"]
    os.kill(pid, signal.SIGKILL)  # the executor dies; Slurm keeps the jobs (gen running, use held by afterok)
    hf("resume", "-q", run_id, timeout=300)
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert [s["attempts"] for s in data["steps"]] == [1, 1]  # adopted by name, nothing submitted twice
    assert (Path(data["workdir"]) / "steps" / "use" / "out" / "r.txt").read_text() == "data\n"


def test_data_fanout_and_publish_on_slurm(hf: Hetflow, tmp_path: Path, slurm_cluster: LocalSlurm) -> None:  # noqa: F811
    check_cluster_fan(hf, tmp_path, _config(tmp_path, slurm_cluster))


def test_a_queued_job_is_shown_queued_and_one_whose_id_was_never_recorded_is_adopted_on_resume(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """issue 12: `use` waits in Slurm's queue behind `gen` (afterok): show says queued, not
    running.  Then hetflow dies, and the job ids it recorded are lost too (as if it died
    between sbatch and writing them): resume finds the jobs by their names in squeue and
    adopts them instead of submitting them again."""
    import os
    import signal

    config = _config(tmp_path, slurm_cluster)
    slow = WORKFLOW.replace("echo data > /out/d.txt", "sleep 8; echo data > /out/d.txt")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, slow, "slow.yaml")).stdout.strip()

    def shown() -> dict[str, tuple[str, bool]]:
        return {s["step"]: (s["state"], s["queued"]) for s in hf.show(run_id)["steps"]}

    hf.wait_for(lambda: shown() == {"gen": ("running", False), "use": ("running", True)}, timeout=120)
    table = hf("show", run_id).stdout
    assert any(line.split()[:2] == ["use", "queued"] for line in table.splitlines()), table
    use = {s["step"]: s for s in hf.show(run_id)["steps"]}["use"]
    # Slurm's reason (Dependency, on gen's job) and no start: Slurm has not started it
    assert (use["reason"], use["started"]) == (f"pending: waiting for hf-{run_id}-gen-1", None), use
    pid = hf.show(run_id)["pid"]
    os.kill(pid, signal.SIGKILL)
    recorded = [p for root in (hf.home, slurm_cluster.base) for p in root.rglob(f"{run_id}/*.jobid")]
    assert len(recorded) == 2
    for p in recorded:
        p.unlink()
    hf("resume", "-q", run_id, timeout=300)
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert [s["attempts"] for s in data["steps"]] == [1, 1]  # found by name, nothing submitted twice
    jobs = subprocess.run(
        ["squeue", "--me", "--noheader", "--states=all", "--format=%j"],
        env={**os.environ, **slurm_cluster.env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(j for j in jobs if j.startswith(f"hf-{run_id}-")) == [f"hf-{run_id}-gen-1", f"hf-{run_id}-use-1"]


@pytest.mark.parametrize("repeat", range(REPEATS), ids=lambda r: f"run-{r}")
def test_a_chain_never_starts_a_step_before_its_input_is_in_place(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
    repeat: int,
) -> None:
    """issue 30: with the executor polling every HETFLOW_RACE_POLL seconds, Slurm starts each
    child (afterok) long before hetflow sees its parent end; the parent's job has put its
    outputs in place itself (``backends.slurm.publish``), so every step succeeds at once."""
    run_chain(hf, tmp_path, _config(tmp_path, slurm_cluster), SLURM_POLL)


def test_a_job_that_exited_0_without_its_outputs_fails_as_locally_and_its_child_never_runs(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """The job ends non-zero rather than release its child onto a missing input; hetflow
    says it as it does locally, with the container's own exit code 0."""
    lazy = WORKFLOW.replace("echo data > /out/d.txt; echo gen-ran", "echo gen-ran")
    config = _config(tmp_path, slurm_cluster)
    proc = hf("run", "-q", "--config", config, write(tmp_path, lazy), check=False, timeout=300)
    data = hf.show(hf.last_run())
    steps = {s["step"]: s for s in data["steps"]}
    assert proc.returncode == 1 and steps["gen"]["state"] == "failed", proc.stdout
    assert steps["gen"]["reason"].startswith("exited 0 but did not write declared output(s) d.txt under /out"), steps
    assert steps["gen"]["exit_code"] == 0 and steps["use"]["state"] in ("skipped", "stopped"), steps
    assert not (Path(data["workdir"]) / "steps" / "gen" / "out").exists()


# A step that allocates 64 MiB (dd's block buffer, filled from /dev/zero 8 times) behind one
# that holds it in Slurm's queue for a while.
USAGE = f"""apiVersion: hetflow/v1
name: slurmuse
steps:
  first:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 2"]
    resources: {{cpus: 1, memory: 128Mi}}
    estimate: 2s
    outputs: []
  hog:
    needs: [first]
    image: {BUSYBOX}
    command: [sh, -c, "dd if=/dev/zero of=/dev/null bs=64M count=8"]
    resources: {{cpus: 1, memory: 256Mi}}
    estimate: 2s
"""
MIB = 1 << 20


def slurm_times(cluster: LocalSlurm, job_name: str) -> tuple[float, float]:
    """Slurm's own StartTime and EndTime of a finished job (MinJobAge keeps it in squeue)."""
    env = {**os.environ, **cluster.env, "SLURM_TIME_FORMAT": "%s"}
    args = ["squeue", "--me", "--states=all", "--noheader", "--format=%S|%e", f"--name={job_name}"]
    start, end = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout.split("|")
    return float(start), float(end)


def test_step_times_are_slurms_and_usage_is_measured_on_the_node(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """show's STARTED/ENDED are Slurm's StartTime/EndTime, to the fraction (the held step's is
    after its submission); the trace has the container's peak memory (near the 64 MiB it allocated)
    and CPU time, measured by the job script on the node."""
    hf("run", "-q", "--no-cache", "--config", _config(tmp_path, slurm_cluster), write(tmp_path, USAGE), timeout=300)
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    trace = {r["step"]: r for r in json.loads(hf("trace", run_id, "--json").stdout)}
    for name in ("first", "hog"):  # Slurm keeps whole seconds: the job's own stamps give the fraction
        start, end = slurm_times(slurm_cluster, f"hf-{run_id}-{name}-1")
        assert abs(steps[name]["started"] - start) < 1 and abs(steps[name]["ended"] - end) < 1, (name, start, end)
    hog = trace["hog"]
    # held, then started; a start is Slurm's whole second where the job's own stamp is over a
    # second later (a loaded node): the hog started within that second, after first ended
    assert hog["submit"] < steps["first"]["ended"] < steps["hog"]["started"] + 1, (hog, steps)
    assert steps["hog"]["started"] - 1 <= hog["start"] <= hog["end"] <= steps["hog"]["ended"] + 1, hog
    assert 64 * MIB <= hog["peak_rss"] <= 64 * MIB + 48 * MIB, hog
    assert hog["cpu_time"] > 0, hog


def test_small_items_are_packed_into_few_slurm_jobs_with_per_item_state(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """250 fan-out items and a gather with ``batch: 100``: 4 sbatch calls (Slurm's own count of
    the run's jobs), not 251; every item's state, exit code, log and output is its own."""
    wf = PACKED.format(items=250, batch=100)
    hf("run", "-q", "--config", _config(tmp_path, slurm_cluster), write(tmp_path, wf, "packed.yaml"), timeout=600)
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded" and len(data["steps"]) == 251
    jobs = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"], env=slurm_cluster.env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    names = [line.split("JobName=", 1)[1].split()[0] for line in jobs if f"hf-{data['id']}-" in line]
    assert len(names) == 4 and sum(n.endswith("-batch") for n in names) == 3  # 100 + 100 + 50, and the gather
    workdir = Path(data["workdir"])
    assert (workdir / "steps" / "gather" / "out" / "n.txt").read_text().strip() == "250"
    assert (workdir / "steps" / "work.137" / "out" / "o.txt").read_text() == "137\n"
    assert "item 137" in hf("logs", data["id"], "work.137").stdout


def test_a_data_file_edited_while_a_slurm_step_runs_is_not_cached_and_the_step_says_so(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """What ran is what was hashed, on Slurm: the executor looks at the step's data again when
    the job has ended (issue 37; the local test: test_data_frozen.py)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("one\n")
    wf = write(tmp_path, WAITS_THEN_READS.replace("name: during", "name: slurmwatch"))
    with running(hf, "run", "-q", "--config", _config(tmp_path, slurm_cluster), wf) as proc:
        out = started(hf, "a", slurm_cluster.workdir / "runs")
        (tmp_path / "d" / "x").write_text("two\n")
        (out / "go").touch()
        assert proc.wait(timeout=300) == 0, proc.stdout.read() if proc.stdout else ""
    a = next(s for s in hf.show(hf.last_run())["steps"] if s["step"] == "a")
    assert (a["state"], "ran on changed data: data.d changed while it ran" in a["reason"]) == ("succeeded", True), a
    assert json.loads(hf("cache", "ls", "--json").stdout)["entries"] == []

"""The exported driver's DAG logic, run for real: its sh script against a fake kubectl.

The fake keeps the Jobs in a JSON file.  `get jobs` prints them as the driver's jsonpath
would; `patch job` (un-suspend) "runs" the step the way its pod would: it writes the
step's declared outputs into the staging directory and marks the Job Complete (or
Failed, or leaves it running for a few polls).  Each release is logged with the parents
that had been accepted by then, so the tests can check the DAG order exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hetflow.export.kubernetes import export_kubernetes
from hetflow.spec.models import Workflow
from hetflow.spec.validate.checks import edges_of
from tests.unit.builders import load_steps
from tests.unit.test_kubernetes import RUN, container, driver, example, plan_for

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")

# The driver image's shell is busybox ash (alpine); Debian's is dash.  Each that is here.
SHELLS = [
    pytest.param(argv, id=argv[0], marks=pytest.mark.skipif(shutil.which(argv[0]) is None, reason=f"no {argv[0]}"))
    for argv in (("sh",), ("busybox", "sh"), ("bash", "--posix"))
]

FAKE_KUBECTL = """\
import json, os, sys
path = os.environ["FAKE_KUBE_STATE"]
with open(path) as f:
    state = json.load(f)
args = sys.argv[1:]
assert args[:2] == ["-n", os.environ["NS"]], args
work = os.environ["HETFLOW_WORKDIR"]

def run(job):
    out = os.path.join(work, "attempts", job["step"], "1", "out")
    os.makedirs(out, exist_ok=True)  # the pod's clean container
    if job["outcome"] == "fail":
        job["conditions"] = "FailureTarget Failed"
        return
    if job["outcome"] != "no-outputs":
        for o in job["outputs"]:
            os.makedirs(os.path.dirname(os.path.join(out, o)), exist_ok=True)
            with open(os.path.join(out, o), "w") as f:
                f.write(job["step"])
    job["conditions"] = "SuccessCriteriaMet Complete" if job["kind"] == "job" else "Created Succeeded"

KIND = {"jobs": "job", "mpijobs": "mpijob"}
if args[2] == "get":
    assert args[3] in KIND and args[4:6] == ["-l", "hetflow.run=%s,hetflow.role=step" % os.environ["RUN"]], args
    if state["api_errors"] > 0:
        state["api_errors"] -= 1
        with open(path, "w") as f:
            json.dump(state, f)
        sys.exit("the server is currently unable to handle the request")
    for name, job in state["jobs"].items():
        if job["kind"] != KIND[args[3]]:
            continue
        if not job["suspend"] and not job["conditions"]:
            job["polls"] -= 1
            if job["polls"] <= 0:
                run(job)
        print("%s suspend=%s conditions=%s" % (name, "true" if job["suspend"] else "false", job["conditions"]))
elif args[2] == "patch":
    job = state["jobs"][args[4]]
    body = {"job": '{"spec":{"suspend":false}}', "mpijob": '{"spec":{"runPolicy":{"suspend":false}}}'}
    assert args[3] == job["kind"] and args[5:] == ["--type=merge", "-p", body[job["kind"]]], args
    done = [p for p in job["parents"] if os.path.exists(os.path.join(work, "steps", p, "done"))]
    state["log"].append({"step": job["step"], "parents_done": done, "kind": job["kind"]})
    job["suspend"] = False
else:
    sys.exit("unexpected kubectl call: %s" % args)
with open(path, "w") as f:
    json.dump(state, f)
"""


@dataclass
class Outcome:
    returncode: int
    stdout: str
    released: list[str]  # steps, in release order
    log: list[dict[str, Any]]
    work: Path
    parents: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)  # step -> what was patched: job | mpijob


def run_driver(
    tmp_path: Path,
    workflow: Workflow,
    *,
    outcomes: dict[str, str] | None = None,
    polls: dict[str, int] | None = None,
    api_errors: int = 0,
    state_file: Path | None = None,
    shell: tuple[str, ...] = ("sh",),
    cluster_file: str = "hetero-16.yaml",
) -> Outcome:
    from hetflow.plan.sizing.cluster import load_cluster

    cluster = load_cluster(Path(__file__).resolve().parents[2] / "examples" / "clusters" / cluster_file)
    objects = export_kubernetes(workflow, cluster, plan_for(workflow, cluster), run_id=RUN, uid=1, gid=1)
    script = container(driver(objects), "driver")["command"][2]
    edges = edges_of(workflow)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"#!{sys.executable}\n{FAKE_KUBECTL}")
    kubectl.chmod(0o755)
    state_file = state_file or tmp_path / "jobs.json"
    if not state_file.exists():
        jobs = {
            o["metadata"]["name"]: {
                "step": (s := o["metadata"]["labels"]["hetflow.step"]),
                "parents": edges[s],
                "outputs": list(workflow.steps[s].outputs),
                "kind": o["kind"].lower(),
                "suspend": o["spec"]["runPolicy"]["suspend"] if o["kind"] == "MPIJob" else o["spec"]["suspend"],
                "conditions": "",
                "outcome": (outcomes or {}).get(s, "ok"),
                "polls": (polls or {}).get(s, 1),
            }
            for o in objects
            if o["kind"] in ("Job", "MPIJob") and o["metadata"]["labels"]["hetflow.role"] == "step"
        }
        state_file.write_text(json.dumps({"jobs": jobs, "log": [], "api_errors": api_errors}))
    work = tmp_path / "claim" / "runs" / RUN
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "NS": "lab",
        "RUN": RUN,
        "HETFLOW_WORKDIR": str(work),
        "HETFLOW_POLL_SECONDS": "0",
        "FAKE_KUBE_STATE": str(state_file),
    }
    proc = subprocess.run([*shell, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert not proc.stderr.strip() or "unable to handle" in proc.stderr, proc.stderr
    state = json.loads(state_file.read_text())
    kinds = {e["step"]: e["kind"] for e in state["log"]}
    return Outcome(proc.returncode, proc.stdout, [e["step"] for e in state["log"]], state["log"], work, edges, kinds)


@pytest.mark.parametrize("shell", SHELLS)
def test_circuit_runs_in_dag_order(tmp_path: Path, shell: tuple[str, ...]) -> None:
    workflow, _ = example("circuit")
    out = run_driver(tmp_path, workflow, polls={"place": 3, "litho": 5}, shell=shell)
    assert out.returncode == 0, out.stdout
    assert sorted(out.released) == sorted(workflow.steps)  # each released exactly once
    for entry in out.log:  # ... and only once every parent's outputs were accepted
        assert sorted(entry["parents_done"]) == sorted(out.parents[entry["step"]]), entry
    # litho (slow) is released with route and still runs when simulate starts: side by side
    assert out.released.index("litho") < out.released.index("simulate")
    assert out.stdout.strip().endswith(f"run {RUN}: all 7 steps done")
    for name, step in workflow.steps.items():
        for o in step.outputs:
            assert (out.work / "steps" / name / "out" / o).read_text() == name
        assert (out.work / "steps" / name / "done").exists()
        assert not (out.work / "attempts" / name / "1").exists()  # moved into place, not copied


BRANCHES = """\
a:
  image: busybox
  outputs: [x]
b:
  image: busybox
  inputs: {x: a/x}
  outputs: [y]
b2:
  image: busybox
  needs: [b]
c:
  image: busybox
  needs: [a]
  outputs: [z]
d:
  image: busybox
  needs: [c]
"""


@pytest.mark.parametrize("shell", SHELLS)
def test_failed_step_stops_its_descendants_only(tmp_path: Path, shell: tuple[str, ...]) -> None:
    out = run_driver(tmp_path, load_steps(BRANCHES).workflow, outcomes={"b": "fail"}, shell=shell)
    assert out.returncode == 3
    assert sorted(out.released) == ["a", "b", "c", "d"]  # b2 stays suspended: no pod, nothing held
    assert f"run {RUN} failed: b" in out.stdout
    assert "not started, as a step before them failed: b2" in out.stdout
    assert f"step b failed; see kubectl logs job/hf-{RUN}-b" in out.stdout
    assert (out.work / "steps" / "d" / "done").exists()


def test_missing_outputs_fail_the_step(tmp_path: Path) -> None:
    out = run_driver(tmp_path, load_steps(BRANCHES).workflow, outcomes={"c": "no-outputs"})
    assert out.returncode == 3
    assert "step c exited 0 but did not write: z" in out.stdout
    assert "d" not in out.released
    assert not (out.work / "steps" / "c" / "done").exists()


def test_api_errors_are_retried(tmp_path: Path) -> None:
    out = run_driver(tmp_path, load_steps(BRANCHES).workflow, api_errors=3)
    assert out.returncode == 0, out.stdout
    assert sorted(out.released) == ["a", "b", "b2", "c", "d"]


def test_a_restarted_driver_picks_up_where_it_was(tmp_path: Path) -> None:
    workflow = load_steps(BRANCHES).workflow
    first = run_driver(tmp_path, workflow, outcomes={"b": "fail"})
    assert first.returncode == 3
    again = run_driver(tmp_path, workflow, state_file=tmp_path / "jobs.json")
    assert again.returncode == 3  # the failure is remembered, nothing is released twice
    assert again.released == first.released
    assert "step b failed" not in again.stdout  # reported once, by the first driver pod


def test_a_driver_restarted_after_success_does_nothing(tmp_path: Path) -> None:
    workflow = load_steps(BRANCHES).workflow
    first = run_driver(tmp_path, workflow)
    again = run_driver(tmp_path, workflow, state_file=tmp_path / "jobs.json")
    assert (first.returncode, again.returncode) == (0, 0)
    assert again.released == first.released
    assert again.stdout.strip() == f"run {RUN}: all 5 steps done"

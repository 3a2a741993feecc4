"""What a kill leaves behind, found and removed (issue 37): a run killed just after it was
recorded succeeded leaves nothing once resumed (or after ``doctor --repair``); the monitors of
containers podman no longer lists (conmon and runc init, alive for ever) and a copy into the
cache a kill cut in half are found by ``hetflow doctor`` and removed by ``--repair``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from hetflow.execute.backends.local.orphans import launchers
from tests.integration.hfkit import BUSYBOX, Hetflow, monitor_trees, podman, processes, run_containers, write
from tests.integration.test_crash import HOLD_FIRST_CREATE

TWO = f"""apiVersion: hetflow/v1
name: leftovers
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo a > /out/done"]
    outputs: [done]
  b:
    needs: [a]
    image: {BUSYBOX}
    command: [sh, -c, "echo b > /out/done"]
    outputs: [done]
"""
# podman, except that `podman rm` waits until the test lets it go: the executor's removals of
# its finished containers are held, so the moment after the run is recorded succeeded is one
# a kill can land in every time
HOLD_RM = """#!/bin/sh
for a in "$@"; do
  if [ "$a" = rm ]; then
    touch {dir}/removing
    while [ ! -e {dir}/go ]; do sleep 0.1; done
    break
  fi
done
exec {podman} "$@"
"""


def _findings(hf: Hetflow) -> set[tuple[str, str]]:
    return {(f["kind"], f["name"]) for f in json.loads(hf("doctor", "--json").stdout)["leftovers"]}


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("then", ["resume", "doctor --repair"])
def test_a_run_killed_just_after_it_succeeded_leaves_nothing_after_resume_or_doctor(
    hf: Hetflow, tmp_path: Path, then: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "podman"
    wrapper.write_text(HOLD_RM.format(dir=tmp_path, podman=shutil.which("podman")))
    wrapper.chmod(0o755)
    # runc named: no runtime probe (it would run `podman rm` through the wrapper)
    held = {"HETFLOW_ENGINE": str(wrapper), "HETFLOW_OCI_RUNTIME": "runc"}
    run_id = hf("run", "-d", write(tmp_path, TWO), extra_env=held).stdout.strip()
    executor = hf.show(run_id)["pid"]
    hf.wait_for(lambda: hf.show(run_id)["state"] == "succeeded" and (tmp_path / "removing").exists(), timeout=120)
    os.killpg(executor, signal.SIGKILL)  # the executor and the `podman rm` it waits for
    hf.wait_for(lambda: _gone(executor))
    (tmp_path / "go").touch()
    left = [f"hf-{run_id}-a-1", f"hf-{run_id}-b-1"]
    assert run_containers(run_id) == left  # what the kill left: both exited containers
    assert {("container", n) for n in left} <= _findings(hf)

    said = hf("resume", run_id) if then == "resume" else hf("doctor", "--repair")

    assert run_containers(run_id) == [], said.stdout
    assert not any(run_id in name for _, name in _findings(hf))
    assert hf.show(run_id)["state"] == "succeeded"


ONE = f"""apiVersion: hetflow/v1
name: orphan
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo ran > /out/done"]
    outputs: [done]
"""


def test_doctor_ends_the_monitors_of_containers_podman_no_longer_lists(hf: Hetflow, tmp_path: Path) -> None:
    """The `podman run` clients killed with the executor mid-create, then the container removed
    (as an older hetflow's resume did): podman lists nothing while its conmon and runc init
    live on.  doctor names them and --repair ends them; nothing else is touched."""
    runtime = tmp_path / "hold-first-create"
    runtime.write_text(HOLD_FIRST_CREATE.format(dir=tmp_path))
    runtime.chmod(0o755)
    run_id = hf("run", "-d", write(tmp_path, ONE), extra_env={"HETFLOW_OCI_RUNTIME": str(runtime)}).stdout.strip()
    hf.wait_for(lambda: (tmp_path / "created").exists(), timeout=120)
    executor, name = hf.show(run_id)["pid"], f"hf-{run_id}-a-1"
    clients = launchers("podman", [name])
    for pid in [executor, *clients]:
        os.killpg(pid, signal.SIGKILL)  # each leads a session of its own: a cgroup-wide kill
    (tmp_path / "go").touch()
    hf.wait_for(lambda: not any(argv[1:2] == [str(runtime)] for _, argv in processes().values()))
    podman("rm", "-f", name)
    assert run_containers(run_id) == [] and len(monitor_trees(f"hf-{run_id}-")) == 2  # conmon, runc init

    assert ("process", name) in _findings(hf)
    hf("doctor", "--repair")

    hf.wait_for(lambda: monitor_trees(f"hf-{run_id}-") == [])
    assert _findings(hf) == set()


BIG = f"""apiVersion: hetflow/v1
name: big
steps:
  big:
    image: {BUSYBOX}
    command: [sh, -c, "head -c 1073741824 /dev/zero > /out/big"]
    outputs: [big]
    resources: {{memory: 2Gi}}
"""


def test_doctor_removes_a_copy_into_the_cache_that_a_kill_cut_short(hf: Hetflow, tmp_path: Path) -> None:
    """The cache's objects are copies (the cache may be on another file system): an executor
    killed mid-copy leaves the copy's partial file, which doctor names and --repair removes
    (a copy whose process lives is left alone)."""
    run_id = hf("run", "-d", write(tmp_path, BIG)).stdout.strip()
    executor = hf.show(run_id)["pid"]
    objects = hf.home / "cache" / "objects"
    partial: list[Path] = []
    deadline = time.monotonic() + 300
    while not partial and time.monotonic() < deadline and not _gone(executor):
        partial = list(objects.glob("*/.*.tmp*"))  # the copy has begun: kill now, mid-copy
    os.killpg(executor, signal.SIGKILL)
    assert partial, "the executor ended before its copy into the cache was seen"
    hf.wait_for(lambda: _gone(executor))
    assert partial[0].exists()

    assert ("cache", str(partial[0])) in _findings(hf)
    hf("doctor", "--repair")

    assert not partial[0].exists() and list(objects.glob("*/.*.tmp*")) == []
    assert _findings(hf) == set()
    hf("resume", "-q", run_id, timeout=300)  # collects the step's container, kept for it
    assert hf.show(run_id)["state"] == "succeeded" and run_containers(run_id) == []
    assert (objects / partial[0].parent.name / partial[0].name[1:65]).stat().st_size == 1 << 30  # whole now

"""A step publishes all or nothing (issue 37, invariant 3): real `hetflow run` processes, real
podman containers of busybox.

- Every target is checked before any is replaced: a step publishing ``data.bin`` and
  ``who.txt``, where the user edited ``who.txt``, fails naming ``who.txt`` and leaves
  ``data.bin`` as it was (and its record); several refused files are all named.  The same for
  outputs taken from the cache, and for ``mode: overwrite`` over a folder.
- What a killed publish left in the user's folder (``.NAME.*.hetflow-tmp``, kept copies) is
  reported by ``hetflow doctor`` and removed by ``doctor --repair`` or by ``hetflow resume``
  of that run; a kill between two renames is rolled back from the kept copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, write

PAIR = f"""
apiVersion: hetflow/v1
name: pair
params: {{v: one}}
steps:
  make:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    command: [sh, -c, "echo data-{{{{ params.v }}}} > /out/data.bin; echo who-{{{{ params.v }}}} > /out/who.txt"]
    outputs: [data.bin, who.txt]
    publish: {{to: results}}
"""


def leftovers(folder: Path) -> list[str]:
    """Files a publish stages or keeps beside its targets."""
    return sorted(p.name for p in folder.iterdir() if ".hetflow-" in p.name and p.name != ".hetflow-publish.lock")


def reason(hf: Hetflow, step: str = "make") -> str:
    return str({s["step"]: s for s in hf.show(hf.last_run())["steps"]}[step]["reason"])


def test_a_refused_target_leaves_every_target_as_it_was(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, PAIR)
    res = tmp_path / "results"
    hf("run", wf)
    first = hf.last_run()
    assert (res / "data.bin").read_text() == "data-one\n"
    (res / "who.txt").write_text("edited by the user\n")
    proc = hf("run", wf, "-p", "v=two", check=False)
    assert proc.returncode != 0
    why = reason(hf)
    assert "who.txt" in why and "changed since run" in why and "data.bin" not in why, why
    # data.bin was checked (it may be replaced) but is not replaced while who.txt is refused
    assert (res / "data.bin").read_text() == "data-one\n"
    assert (res / "who.txt").read_text() == "edited by the user\n"
    record = Store(hf.home / "state.db").published(str((res / "data.bin").resolve()))
    assert record is not None and record.run_id == first
    assert leftovers(res) == []
    # two refused files: the message names each
    (res / "data.bin").write_text("edited too\n")
    hf("run", wf, "-p", "v=three", check=False)
    why = reason(hf)
    assert "'data.bin'" in why and "'who.txt'" in why, why
    assert (res / "data.bin").read_text() == "edited too\n"


def test_cached_outputs_publish_all_or_nothing_too(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, PAIR)
    res = tmp_path / "results"
    hf("run", wf)
    hf("run", wf, "-p", "v=two")  # the workflow's own result is replaced
    assert (res / "data.bin").read_text() == "data-two\n"
    (res / "who.txt").write_text("edited by the user\n")
    proc = hf("run", wf, check=False)  # v=one again: served from the cache, then published
    assert proc.returncode != 0
    make = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["make"]
    assert make["attempts"] == 0 and "cached outputs could not be published" in make["reason"]
    assert "who.txt" in make["reason"]
    assert (res / "data.bin").read_text() == "data-two\n"
    assert leftovers(res) == []


def test_overwrite_over_a_folder_is_refused_before_anything_is_replaced(hf: Hetflow, tmp_path: Path) -> None:
    res = tmp_path / "results"
    (res / "who.txt").mkdir(parents=True)
    (res / "who.txt" / "keep").write_text("a folder of the user's\n")
    (res / "data.bin").write_text("the user's own\n")
    proc = hf("run", write(tmp_path, PAIR.replace("{to: results}", "{to: results, mode: overwrite}")), check=False)
    assert proc.returncode != 0
    why = reason(hf)
    assert "who.txt" in why and "folder" in why, why
    assert (res / "data.bin").read_text() == "the user's own\n"
    assert (res / "who.txt" / "keep").exists()
    assert leftovers(res) == []


def kill_executor(hf: Hetflow, run_id: str) -> None:
    pid = hf.show(run_id)["pid"]
    os.kill(pid, signal.SIGKILL)
    hf.wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])


@pytest.mark.parametrize("cleaner", ["resume", "doctor"])
def test_what_a_killed_publish_left_is_removed_by_resume_and_doctor(hf: Hetflow, tmp_path: Path, cleaner: str) -> None:
    res = tmp_path / "results"
    res.mkdir()
    # The test holds the folder's publish lock: the executor stages its files beside the
    # targets, then waits for the lock; it is killed there, its staged files in the folder.
    fd = os.open(res / ".hetflow-publish.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        run_id = hf("run", "-d", write(tmp_path, PAIR)).stdout.strip()
        hf.wait_for(lambda: any(n.endswith(".hetflow-tmp") for n in leftovers(res)), timeout=120)
        kill_executor(hf, run_id)
    finally:
        os.close(fd)
    assert leftovers(res)
    found = json.loads(hf("doctor", "--json").stdout)["leftovers"]
    published = [f for f in found if f["kind"] == "publish"]
    assert published and all(f["run_id"] == run_id for f in published), found
    assert any("results" in f["name"] for f in published), published
    assert leftovers(res)  # doctor without --repair only lists
    if cleaner == "doctor":
        hf("doctor", "--repair")
        assert leftovers(res) == []
        assert not [f for f in json.loads(hf("doctor", "--json").stdout)["leftovers"] if f["kind"] == "publish"]
    hf("resume", run_id, "-q", timeout=120)
    assert hf.show(run_id)["state"] == "succeeded"
    assert (res / "data.bin").read_text() == "data-one\n" and (res / "who.txt").read_text() == "who-one\n"
    assert leftovers(res) == []


# A publish killed (SIGKILL) between its two renames: data.bin already replaced, who.txt not.
KILLED_MIDWAY = """
import os, signal, sys
from pathlib import Path
from hetflow.execute.data.publishing.publish import Publishing
from hetflow.spec import Publish, Step
from hetflow.state import Store

out, home, to = map(Path, sys.argv[1:4])
done, rename = [], os.replace

def replace(src, dst):
    if Path(dst).parent == to and not Path(dst).name.startswith("."):  # a target, not a kept copy
        if done:
            os.kill(os.getpid(), signal.SIGKILL)
        done.append(dst)
    rename(src, dst)

os.replace = replace
step = Step(image="i", outputs=("data.bin", "who.txt"), publish=(Publish(to=str(to)),))
Publishing(Store(home / "state.db"), sys.argv[4], "pair")("make", step, out, os.getuid(), os.getgid())
"""


def test_a_publish_killed_between_two_renames_is_rolled_back(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, PAIR)
    res = tmp_path / "results"
    hf("run", wf)
    first = hf.last_run()
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.bin").write_text("data-killed\n")
    (out / "who.txt").write_text("who-killed\n")
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(KILLED_MIDWAY))
    proc = subprocess.run(
        [sys.executable, str(script), str(out), str(hf.home), str(res), "run-killed"],
        env=hf.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (res / "data.bin").read_text() == "data-killed\n"  # half the set was in place
    found = [f for f in json.loads(hf("doctor", "--json").stdout)["leftovers"] if f["kind"] == "publish"]
    assert [f["run_id"] for f in found] == ["run-killed"], found
    hf("doctor", "--repair")
    assert (res / "data.bin").read_text() == "data-one\n" and (res / "who.txt").read_text() == "who-one\n"
    assert leftovers(res) == []
    record = Store(hf.home / "state.db").published(str((res / "data.bin").resolve()))
    assert record is not None and record.run_id == first
    hf("run", wf, "-p", "v=two")  # the records still say the workflow's own result: replaced
    assert (res / "who.txt").read_text() == "who-two\n"

"""The state store and run folders are the submitting user's alone (issue 38: state.db, which
holds every run's env: values and params, was 0644, and run folders 0755), while the containers,
which run as the submitter (SUDO_UID here), still reach every folder they read and write."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

pytestmark = pytest.mark.integration

WORKFLOW = f"""
apiVersion: hetflow/v1
name: private
params: {{word: hello}}
data:
  docs: docs/*.txt
templates:
  bb: {{image: {BUSYBOX}, resources: {{cpus: 0.5, memory: 64Mi}}}}
steps:
  count:
    use: bb
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    env: {{API_KEY: not-for-other-users}}
    command: [sh, -c, "id -u > /out/uid; wc -w < /in/doc/{{{{ item.name }}}} > /out/n.txt"]
    outputs: [n.txt, uid]
  total:
    use: bb
    inputs: {{n: count/n.txt}}
    command: [sh, -c, "s=0; for f in /in/n/*/n.txt; do s=$((s+$(cat $f))); done; echo {{{{ params.word }}}} $s >/out/t"]
    outputs: [t]
    publish: {{to: results}}
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_store_and_run_folders_are_private_and_containers_still_reach_theirs(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    for name, words in {"a": 3, "b": 5}.items():
        (tmp_path / "docs" / f"{name}.txt").write_text(" ".join(["w"] * words) + "\n")
    hf("run", write(tmp_path, WORKFLOW), extra_env={"SUDO_UID": "1234", "SUDO_GID": "2345"})
    run_id = hf.last_run()
    assert hf.show(run_id)["state"] == "succeeded"
    assert (step_out(hf, run_id, "count.0") / "uid").read_text().strip() == "1234"
    assert (step_out(hf, run_id, "total") / "t").read_text() == "hello 8\n"
    assert (tmp_path / "results" / "t").read_text() == "hello 8\n"
    # Before issue 38: state.db was 0644 and run folders 0755 (umask 022).
    store = hf.home / "state.db"
    for path in (store, store.with_name("state.db-wal"), store.with_name("state.db-shm")):
        if path.exists():
            assert mode(path) == 0o600, f"{path.name} is {oct(mode(path))}"
    workdir = Path(hf.show(run_id)["workdir"])
    assert mode(workdir) == 0o700 and mode(workdir.parent) == 0o700
    assert "not-for-other-users" in (workdir / "workflow.yaml").read_text()  # what the mode keeps in
    assert hf("logs", run_id, "total").returncode == 0  # the submitter still reads it all


def test_a_store_an_older_hetflow_made_world_readable_is_made_private_when_opened(hf: Hetflow) -> None:
    hf.home.mkdir(parents=True)
    store = hf.home / "state.db"
    Store(store).close()
    os.chmod(store, 0o644)
    hf("ps", "--all")
    assert mode(store) == 0o600
    for path in (store.with_name("state.db-wal"), store.with_name("state.db-shm")):
        if path.exists():
            assert mode(path) == 0o600, f"{path.name} is {oct(mode(path))}"

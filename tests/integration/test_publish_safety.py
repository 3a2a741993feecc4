"""Publishing that is safe and unsurprising, and cache objects no run can change (issue 22):
real `hetflow run` processes, real podman containers of busybox.

- Two runs publishing different bytes to one folder at the same moment: the outcome obeys
  the rule (a workflow replaces its own recorded, unchanged result; nothing else), never two
  successes with one result silently lost.
- A rerun after a change replaces the workflow's own earlier result; a file the user put
  there or edited since is refused unless ``mode: overwrite``.
- Editing a run's output in place changes neither the cache's object nor another run's output.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

# The step writes its value, says it is ready (a file in its own /out, which the test sees on
# the host), and waits for the test's "go": both runs then publish at the same moment.  32 MiB
# of zeros after the value make checking the target (hashing it) take long enough that, without
# the lock, both runs would check before either renames.
GATED = f"""
apiVersion: hetflow/v1
name: pub
params: {{v: one}}
steps:
  make:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    command: [sh, -c, "{{ echo {{{{ params.v }}}}; head -c 33554432 /dev/zero; }} > /out/r.txt; touch /out/ready;
      while [ ! -e /out/go ]; do sleep 0.05; done; rm /out/ready /out/go"]
    outputs: [r.txt]
    publish: {{to: results}}
"""

PLAIN = f"""
apiVersion: hetflow/v1
name: pub
params: {{v: one}}
steps:
  make:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    command: [sh, -c, "echo {{{{ params.v }}}} > /out/r.txt"]
    outputs: [r.txt]
    publish: {{to: results}}
"""


def first_line(path: Path) -> str:
    with path.open() as f:
        return f.readline().strip()


def sha_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def runs(hf: Hetflow) -> list[dict[str, object]]:
    return list(json.loads(hf("ps", "--all", "--json").stdout))


def race(tmp_path: Path, publishers: list[tuple[Hetflow, str]]) -> list[subprocess.Popen[str]]:
    """Start one `hetflow run` per (home, value) at once, wait until every container is ready
    to finish, then let them all go together."""
    wf = write(tmp_path, GATED)
    fast = {"HETFLOW_POLL_INTERVAL": "0.02"}  # both runners see their container end at once
    procs = [hf.popen("run", wf, "-p", f"v={value}", "--no-cache", extra_env=fast) for hf, value in publishers]
    homes = {hf.home for hf, _ in publishers}

    def ready() -> list[Path]:
        return [p for home in homes for p in home.rglob("attempts/make/*/out/ready")]

    publishers[0][0].wait_for(lambda: len(ready()) == len(publishers), timeout=90)
    for marker in ready():
        (marker.parent / "go").touch()
    for p in procs:
        p.wait(timeout=90)
    return procs


@pytest.mark.parametrize("seed", [1, 2, 3], ids=["seed1", "seed2", "seed3"])
def test_concurrent_runs_of_one_workflow_never_lose_a_result_silently(hf: Hetflow, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    target = tmp_path / "results" / "r.txt"
    for round_ in range(2):  # the second round replaces the first round's recorded result
        values = [f"v{seed}-{round_}-{rng.randrange(10**6)}" for _ in range(2)]
        procs = race(tmp_path, [(hf, v) for v in values])
        ended = runs(hf)[:2]
        by_value = {first_line(step_out(hf, str(r["id"]), "make") / "r.txt"): r for r in ended}
        assert set(by_value) == set(values)
        # one workflow, one store: the later publisher replaces the earlier one's file, by the rule
        assert [p.returncode for p in procs] == [0, 0], [p.stdout.read() if p.stdout else "" for p in procs]
        there = first_line(target)
        record = Store(hf.home / "state.db").published(str(target.resolve()))
        assert record is not None and record.sha256 == sha_of(target)
        winner = by_value[there]
        assert record.run_id == winner["id"]
        loser = next(r for v, r in by_value.items() if v != there)
        said = [e.message for e in Store(hf.home / "state.db").events(str(winner["id"])) if e.kind == "published"]
        # the success of the run whose file is gone is accounted for: the other run says it replaced it
        assert any(f"replaced this workflow's result from run {loser['id']}" in m for m in said), said


def test_concurrent_runs_with_separate_stores_one_wins_one_fails_clearly(hf: Hetflow, tmp_path: Path) -> None:
    other_home = tmp_path / "home2"
    other = Hetflow(other_home, {**hf.env, "HETFLOW_HOME": str(other_home)})
    procs = race(tmp_path, [(hf, "mine"), (other, "theirs")])
    codes = [p.returncode for p in procs]
    assert sorted(codes)[0] == 0 and sorted(codes)[1] != 0, codes  # exactly one success
    winner, loser = (hf, other) if codes[0] == 0 else (other, hf)
    won = step_out(winner, winner.last_run(), "make") / "r.txt"
    assert sha_of(tmp_path / "results" / "r.txt") == sha_of(won)
    make = {s["step"]: s for s in loser.show(loser.last_run())["steps"]}["make"]
    assert make["state"] == "failed" and "r.txt already exists and was not published by hetflow" in make["reason"]


def test_a_rerun_replaces_its_own_result_but_never_a_users_file(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, PLAIN)
    target = tmp_path / "results" / "r.txt"
    hf("run", wf)
    assert target.read_text() == "one\n"
    # change one input and rerun: the workflow's own earlier result is replaced, no error
    hf("run", wf, "-p", "v=two")
    assert target.read_text() == "two\n"
    # a file edited since hetflow published it is refused, the edit kept
    target.write_text("edited by hand\n")
    proc = hf("run", wf, "-p", "v=three", check=False)
    assert proc.returncode != 0
    make = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["make"]
    assert "r.txt already exists and changed since run" in make["reason"] and "mode: overwrite" in make["reason"]
    assert target.read_text() == "edited by hand\n"
    hf("run", write(tmp_path, PLAIN.replace("{to: results}", "{to: results, mode: overwrite}")), "-p", "v=three")
    assert target.read_text() == "three\n"
    # a file hetflow never published is refused too, and kept
    (tmp_path / "users").mkdir()
    (tmp_path / "users" / "r.txt").write_text("the user's own\n")
    proc = hf("run", write(tmp_path, PLAIN.replace("{to: results}", "{to: users}")), check=False)
    make = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["make"]
    assert proc.returncode != 0 and "r.txt already exists and was not published by hetflow" in make["reason"]
    assert (tmp_path / "users" / "r.txt").read_text() == "the user's own\n"
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".hetflow-tmp")]


def test_editing_a_cached_runs_output_changes_no_other_run_nor_the_cache(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, PLAIN.replace("    publish: {to: results}\n", ""))
    hf("run", wf)
    first = hf.last_run()
    hf("run", wf)
    second = hf.last_run()
    assert {s["step"]: s["attempts"] for s in hf.show(second)["steps"]} == {"make": 0}  # from the cache
    mine, theirs = step_out(hf, second, "make") / "r.txt", step_out(hf, first, "make") / "r.txt"
    with mine.open("a") as f:  # an in-place edit, as `>>` or an editor that writes in place does
        f.write("appended\n")
    assert theirs.read_text() == "one\n"
    objects = [p for p in (hf.home / "cache" / "objects").rglob("*") if p.is_file()]
    assert [p.read_text() for p in objects] == ["one\n"]
    assert os.stat(mine).st_ino not in {os.stat(p).st_ino for p in [*objects, theirs]}
    # the object still verifies: a third run is served from the cache with the original bytes
    hf("run", wf)
    third = hf.last_run()
    assert {s["step"]: s["attempts"] for s in hf.show(third)["steps"]} == {"make": 0}
    assert (step_out(hf, third, "make") / "r.txt").read_text() == "one\n"

"""What ran is what was hashed (issue 37's first invariant), with real podman containers and
host data edited under the run: after a failure and before ``resume``, while a step runs, and
between submit and a step's launch.  ``--dry-run``, ``resume`` and ``run`` must agree, and the
cache must never keep a result under a key its inputs did not have.

A step that must be caught running waits for a file the test writes into its own /out (the
attempt's staging folder on the host): no data set changes but the one the test edits."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

TWO_STEPS = f"""apiVersion: hetflow/v1
name: edits
data:
  scripts: {{path: scripts}}
steps:
  gen:
    image: {BUSYBOX}
    command: [sh, -c, "sh /in/s/gen.sh > /out/o"]
    inputs: {{s: data.scripts}}
    outputs: [o]
  check:
    image: {BUSYBOX}
    command: [sh, -c, "sh /in/s/check.sh && cat /in/g/o > /out/r"]
    inputs: {{s: data.scripts, g: gen/o}}
    outputs: [r]
"""


@contextmanager
def running(hf: Hetflow, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``hetflow ARGS`` in the background; stopped (SIGTERM: the run is stopped, its containers
    go) if the test leaves it running, as a failing test would."""
    proc = hf.popen(*args)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


def dry_run(hf: Hetflow, wf: str) -> dict[str, dict[str, str]]:
    steps = json.loads(hf("run", "--dry-run", "--json", wf).stdout)["steps"]
    return {s["step"]: s for s in steps}


def test_resume_after_a_data_edit_runs_again_what_read_it_and_the_cache_stays_true(hf: Hetflow, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "gen.sh").write_text("echo v1\n")
    (scripts / "check.sh").write_text("exit 1\n")
    wf = write(tmp_path, TWO_STEPS)
    assert hf("run", wf, check=False).returncode != 0  # check fails
    rid = hf.last_run()
    assert hf.step_states(rid) == {"gen": "succeeded", "check": "failed"}

    (scripts / "gen.sh").write_text("echo v2\n")
    (scripts / "check.sh").write_text("exit 0\n")
    assert dry_run(hf, wf)["gen"]["status"] == "runs"  # a new run would run gen: its script changed
    resumed = hf("resume", rid)
    assert "data.scripts: check.sh changed, gen.sh changed" in resumed.stderr, resumed.stderr
    assert "gen: its data changed" in resumed.stderr, resumed.stderr
    assert hf.step_states(rid) == {"gen": "succeeded", "check": "succeeded"}
    assert (step_out(hf, rid, "check") / "r").read_text() == "v2\n"  # not the v1 built before the edit
    assert next(s for s in hf.show(rid)["steps"] if s["step"] == "gen")["attempts"] == 2  # it ran again

    # check's result was cached under its key with the passing script: with the failing one
    # put back, a new run must run it (and fail), not take it from the cache
    (scripts / "check.sh").write_text("exit 1\n")
    again = hf("run", wf, check=False)
    assert again.returncode != 0, again.stdout
    assert hf.step_states(hf.last_run())["check"] == "failed"


WAITS_THEN_READS = f"""apiVersion: hetflow/v1
name: during
data:
  d: {{path: d}}
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/x/x > /out/o; touch /out/started; while [ ! -e /out/go ]; do sleep 0.1; done"]
    inputs: {{x: data.d}}
    outputs: [o]
"""


def started(hf: Hetflow, step: str, runs: Path | None = None) -> Path:
    """The step's first attempt's /out on the host (under ``runs``, the runs' work directory:
    HETFLOW_HOME/runs by default), once its container has begun."""
    runs = runs or hf.home / "runs"
    hf.wait_for(lambda: any(runs.glob(f"*/attempts/{step}/1/out/started")), timeout=180)
    return next(runs.glob(f"*/attempts/{step}/1/out/started")).parent


def test_a_data_file_edited_while_its_step_runs_is_not_cached_and_the_step_says_so(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("one\n")
    wf = write(tmp_path, WAITS_THEN_READS)
    with running(hf, "run", wf) as proc:
        out = started(hf, "a")
        (tmp_path / "d" / "x").write_text("two\n")  # the step read "one"; its key would say "two"
        (out / "go").touch()
        assert proc.wait(timeout=120) == 0, proc.stdout.read() if proc.stdout else ""
    rid = hf.last_run()
    shown = hf.show(rid)
    a = next(s for s in shown["steps"] if s["step"] == "a")
    assert a["state"] == "succeeded"
    assert "ran on changed data: data.d changed while it ran" in a["reason"], a
    cached = json.loads(hf("cache", "ls", "--json").stdout)["entries"]
    assert cached == [], f"a result was cached under a key it did not have: {cached}"
    # the next run runs it again, on what the file holds now (its attempt has a folder of its own)
    assert dry_run(hf, wf)["a"]["status"] == "runs"
    with running(hf, "run", wf) as proc:
        (started(hf, "a") / "go").touch()  # the first run's attempt folder went into place as its output
        assert proc.wait(timeout=120) == 0
    assert (step_out(hf, hf.last_run(), "a") / "o").read_text() == "two\n"


AFTER_A_WAIT = f"""apiVersion: hetflow/v1
name: later
data:
  d: {{path: d}}
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo a > /out/o; touch /out/started; while [ ! -e /out/go ]; do sleep 0.1; done"]
    outputs: [o]
  b:
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/x/x /in/a/o > /out/o"]
    inputs: {{x: data.d, a: a/o}}
    outputs: [o]
"""


def test_a_step_launched_after_an_edit_reads_and_keys_what_the_file_holds_then(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("one\n")
    wf = write(tmp_path, AFTER_A_WAIT)
    with running(hf, "run", wf) as proc:
        out = started(hf, "a")
        (tmp_path / "d" / "x").write_text("two\n")  # after submit, before b launches
        (out / "go").touch()
        assert proc.wait(timeout=120) == 0
    rid = hf.last_run()
    assert (step_out(hf, rid, "b") / "o").read_text() == "two\na\n"
    # the cache holds b under the key of what it read: a dry run now predicts it cached
    predicted = dry_run(hf, wf)
    assert predicted["b"]["status"] == "cached", predicted["b"]
    assert rid == predicted["b"]["from_run"]
    shown = hf.show(rid)
    assert any("data.d: x changed since the run was submitted" in line for line in shown["data_changes"]), shown
    b = next(s for s in shown["steps"] if s["step"] == "b")
    assert "changed" not in b["reason"], b  # it read one content from launch to end

"""Transparent checkpoints with real podman and the CRIU that ``make criu`` builds (issue 27):
a counter checkpointed every 2 s whose executor and container are killed with SIGKILL
continues from its last checkpoint on resume; ``stop --checkpoint`` then ``resume`` continues
it too; an image that cannot be restored costs the work since, not the step; and where CRIU
does not work, ``checkpoint:`` is refused before anything runs."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hetflow.execute import criu_support
from tests.integration.hfkit import Hetflow, counter_workflow, podman, release, write

pytestmark = pytest.mark.skipif(
    not criu_support().ok, reason=f"CRIU checkpoints do not work here ({criu_support().reason}); run 'make criu'"
)

TICKS = 18


def _counter(tmp_path: Path, checkpoint: str) -> str:
    return write(tmp_path, counter_workflow(TICKS, checkpoint))


def _ticks(hf: Hetflow, run_id: str, attempt: int) -> list[int]:
    logs = hf("logs", run_id, "count", "--attempt", str(attempt)).stdout
    return [int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if "tick " in line]


def _checkpoint(hf: Hetflow, run_id: str, attempt: int) -> dict[str, object] | None:
    meta = hf.home / "runs" / run_id / "checkpoints" / "count" / f"{attempt}.json"
    return json.loads(meta.read_text()) if meta.is_file() else None


def _snapshot(meta: dict[str, object]) -> int:
    """The counter in the outputs kept with a checkpoint (what /out/n said at the dump)."""
    return int((Path(str(meta["outputs"])) / "n").read_text())


def test_killed_with_the_executor_resumes_from_its_last_checkpoint(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "-d", _counter(tmp_path, "{every: 2s}")).stdout.strip()
    # wait for a checkpoint taken after a few ticks, so that zero and the checkpoint differ
    hf.wait_for(lambda: (m := _checkpoint(hf, run_id, 1)) is not None and _snapshot(m) >= 4, timeout=120)
    meta = _checkpoint(hf, run_id, 1)
    assert meta is not None
    os.kill(hf.show(run_id)["pid"], signal.SIGKILL)  # the executor, then its container: a crash of both
    podman("kill", f"hf-{run_id}-count-1")
    hf.wait_for(lambda: f"hf-{run_id}-count-1" not in podman("ps", "--format", "{{.Names}}"))
    killed_at = max(_ticks(hf, run_id, 1))
    kept = _snapshot(_checkpoint(hf, run_id, 1) or meta)  # the last checkpoint before the kill

    hf("resume", run_id, timeout=180)
    assert hf.step_states(run_id) == {"count": "succeeded"}
    restored = _ticks(hf, run_id, 2)
    # attempt 2 went on from the checkpoint, not from tick 1: at most the ticks since it are redone
    assert kept + 1 <= restored[0] <= kept + 2, (kept, restored[:3])
    assert restored[0] <= killed_at + 1 and restored[-1] == TICKS
    assert restored == list(range(restored[0], TICKS + 1))
    attempts = json.loads(hf("trace", run_id, "--json").stdout)
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    out = hf.home / "runs" / run_id / "steps" / "count" / "out" / "n"
    assert out.read_text().strip() == str(TICKS)
    # the step succeeded: its images are gone, the small records stay
    folder = hf.home / "runs" / run_id / "checkpoints" / "count"
    assert not list(folder.glob("*.tar")) and (folder / "restored-2.json").is_file()


def test_stop_checkpoint_then_resume_continues(hf: Hetflow, tmp_path: Path) -> None:
    # as a user who is not root (the submitter under sudo): CRIU reads such a process's
    # limits from /proc/PID/limits where root lacks CAP_SYS_RESOURCE (tools/criu-patches)
    user = {"SUDO_UID": "1234", "SUDO_GID": "2345"}
    run_id = hf("run", "-d", _counter(tmp_path, "true"), extra_env=user).stdout.strip()
    hf.wait_for(lambda: len(_ticks(hf, run_id, 1)) >= 4, timeout=120)
    assert _checkpoint(hf, run_id, 1) is None  # checkpoint: true dumps only when stopped
    assert podman("container", "inspect", "--format", "{{.Config.User}}", f"hf-{run_id}-count-1") == ["1234:2345"]
    hf("stop", "--checkpoint", run_id)
    meta = _checkpoint(hf, run_id, 1)
    assert meta is not None and int(str(meta["size"])) > 0
    stopped_at = max(_ticks(hf, run_id, 1))
    hf("resume", run_id, timeout=180, extra_env=user)
    restored = _ticks(hf, run_id, 2)
    assert restored[0] == stopped_at + 1 and restored[-1] == TICKS  # nothing lost: dumped as it stopped


def test_an_image_that_cannot_be_restored_starts_the_attempt_from_zero(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "-d", _counter(tmp_path, "true")).stdout.strip()
    hf.wait_for(lambda: len(_ticks(hf, run_id, 1)) >= 2, timeout=120)
    hf("stop", "--checkpoint", run_id)
    meta = _checkpoint(hf, run_id, 1)
    assert meta is not None
    Path(str(meta["image"])).write_bytes(b"damaged")
    hf("resume", run_id, timeout=180)
    assert hf.step_states(run_id) == {"count": "succeeded"}
    assert _ticks(hf, run_id, 2) == list(range(1, TICKS + 1))


def test_checkpoint_is_refused_where_criu_fails(hf: Hetflow, tmp_path: Path) -> None:
    fake = tmp_path / "criu"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && echo "Version: 3.17.1" && exit 0\necho "vdso: bad" >&2; exit 1\n'
    )
    fake.chmod(0o755)
    wf = _counter(tmp_path, "{every: 2s}")
    proc = hf("run", wf, check=False, extra_env={"HETFLOW_CRIU": str(fake)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    said = proc.stdout + proc.stderr
    assert "checkpoint: CRIU checkpoints do not work here" in said and "vdso: bad" in said
    assert "checkpoint: {mode: app}" in said
    assert json.loads(hf("ps", "--all", "--json").stdout) == []  # nothing was started
    nodes = hf("nodes", extra_env={"HETFLOW_CRIU": str(fake)}).stdout
    assert "Checkpoints" in nodes and "no: " in nodes


def test_migrate_moves_a_running_step_without_losing_work(hf: Hetflow, tmp_path: Path) -> None:
    # The counter holds after its last tick until released: the drain and the second migrate
    # must find the step still running however loaded the machine (a counter of 18 ticks, then
    # of 40, ran out before them beside a CPU hog and two other test workers, issue 43).
    ticks = 24
    run_id = hf("run", "-d", write(tmp_path, counter_workflow(ticks, "{every: 2s}", hold=True))).stdout.strip()
    hf.wait_for(lambda: len(_ticks(hf, run_id, 1)) >= 4, timeout=120)
    said = hf("migrate", run_id, "count")
    assert f"hf-{run_id}-count-1 checkpointed" in said.stdout and "migrated on this machine" in said.stdout
    moved_at = max(_ticks(hf, run_id, 1))
    refused = hf("migrate", run_id, "count", "--to", "elsewhere", check=False)
    assert refused.returncode == 2 and "this run uses this machine only" in refused.stderr
    missing = hf("migrate", run_id, "nosuch", check=False)
    assert missing.returncode == 2 and "step 'nosuch' is not running (not a step of this run)" in missing.stderr
    hf.wait_for(lambda: len(_ticks(hf, run_id, 2)) >= 2, timeout=120)
    node = hf.show(run_id)["steps"][0]["node"]
    # a local run has no other node: drain moves nothing and says so (issue 42: it restored the
    # step on the same machine, said "migrated" and exited 0, the node no emptier)
    drained = hf("drain", node, "--json", check=False)
    assert drained.returncode == 1 and f"nothing moved off {node}" in drained.stderr
    assert [(d["run"], d["step"], d["moved"]) for d in json.loads(drained.stdout)] == [(run_id, "count", False)]
    said = hf("migrate", run_id, "count")  # the second move: dumped and restored on this machine again
    assert f"hf-{run_id}-count-2 checkpointed" in said.stdout
    drained_at = max(_ticks(hf, run_id, 2))  # where the second migrate dumped it
    third = f"hf-{run_id}-count-3"
    hf.wait_for(lambda: third in podman("ps", "--format", "{{.Names}}"), timeout=120)
    release(third)
    hf.wait_for(lambda: hf.step_states(run_id)["count"] == "succeeded", timeout=120)
    restored = _ticks(hf, run_id, 2)
    assert restored[0] == moved_at + 1  # dumped as it stopped: nothing redone
    assert _ticks(hf, run_id, 3) == list(range(drained_at + 1, ticks + 1))
    attempts = json.loads(hf("trace", run_id, "--json").stdout)
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "stopped"), (2, "stopped"), (3, "succeeded")]
    done = hf("migrate", run_id, "count", check=False)
    assert done.returncode == 2 and f"run {run_id} is succeeded" in done.stderr


def test_a_failed_restore_starts_the_attempt_from_an_empty_out(hf: Hetflow, tmp_path: Path) -> None:
    """issue 37: the restored attempt's /out held the checkpoint's copy (ticks 1..k) and then
    the run from zero (1..TICKS) on top of it; a restore that fails now leaves /out empty."""
    loop = f"i=0; while [ $i -lt {TICKS} ]; do i=$((i+1)); echo tick $i; echo $i >> /out/progress; sleep 0.5; done"
    text = counter_workflow(TICKS, "true").replace("outputs: [n]", "outputs: [progress]")
    text = text.replace(text.split("command: ")[1].split("\n")[0], f'[sh, -c, "{loop}"]')
    run_id = hf("run", "-d", write(tmp_path, text)).stdout.strip()
    hf.wait_for(lambda: len(_ticks(hf, run_id, 1)) >= 3, timeout=120)
    hf("stop", "--checkpoint", run_id)
    meta = _checkpoint(hf, run_id, 1)
    assert meta is not None and (Path(str(meta["outputs"])) / "progress").read_text().split()[:1] == ["1"]
    Path(str(meta["image"])).write_bytes(b"damaged")

    hf("resume", run_id, timeout=180)

    assert hf.step_states(run_id) == {"count": "succeeded"}
    progress = hf.home / "runs" / run_id / "steps" / "count" / "out" / "progress"
    assert progress.read_text().split() == [str(i) for i in range(1, TICKS + 1)]

"""Checkpoints (issue 27), the pure and file parts: the ``checkpoint:``/``stop_grace:`` fields
and their refusals, a step's images kept per attempt, an image retargeted to a new attempt,
the periodic schedule (with a fake dump: no CRIU here), the CRIU probe (with fake binaries),
and the refusal of ``checkpoint:`` where CRIU does not work."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import threading
from pathlib import Path

import pytest

from hetflow.errors import EngineError, SpecError
from hetflow.execute.checkpoint import Checkpointer, CheckpointImages, criu_support
from hetflow.execute.checkpoint.archive import config_value, retarget, staging_in
from hetflow.execute.checkpoint.freeze import copy_outputs
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.engine import ContainerSpec, run_args
from hetflow.execute.run.control.lifecycle import checkpointed_steps
from hetflow.execute.submit.record import checkpoint_problems
from hetflow.spec import Checkpoint, Workflow, parse_workflow


def _wf(extra: str, *, network: bool = False) -> Workflow:
    text = f"""apiVersion: hetflow/v1
name: c
steps:
  s:
    image: busybox
    command: ["true"]
    network: {str(network).lower()}
{extra}
"""
    return parse_workflow(text, "wf.yaml").workflow


def test_checkpoint_forms() -> None:
    assert _wf("    checkpoint: true").steps["s"].checkpoint == Checkpoint()
    assert _wf("    checkpoint: false").steps["s"].checkpoint is None
    assert _wf("    checkpoint: {every: 10m}").steps["s"].checkpoint == Checkpoint(every=600.0)
    app = _wf("    checkpoint: {mode: app, every: 30s}", network=True).steps["s"].checkpoint
    assert app == Checkpoint(every=30.0, mode="app") and not app.transparent
    assert _wf("    stop_grace: 1m").steps["s"].stop_grace == 60.0
    assert _wf("").steps["s"].checkpoint is None and _wf("").steps["s"].stop_grace is None


@pytest.mark.parametrize(
    ("extra", "network", "said"),
    [
        ("    checkpoint: {every: 10m}", True, "it has a network (network: true); write checkpoint: {mode: app}"),
        ("    checkpoint: true\n    gang: {replicas: 2}", False, "a gang's replicas talk to each other"),
        ("    checkpoint: {every: 0.5s}", False, "too often"),
        ("    checkpoint: 5", False, "write true, {every: 10m} or {mode: app}"),
        ("    checkpoint: {mode: dmtcp}", False, "steps.s.checkpoint.mode"),
        ("    stop_grace: 2h", False, "stop_grace '2h' must be from 0s to 1h"),
        (
            "    foreach: {range: 3}\n    checkpoint: true\n    batch: 2",
            False,
            "checkpoint and batch do not go together",
        ),
    ],
)
def test_bad_checkpoint_is_refused_naming_the_field(extra: str, network: bool, said: str) -> None:
    with pytest.raises(SpecError) as err:
        _wf(extra, network=network)
    assert said in str(err.value)


def test_a_checkpointed_step_runs_without_podmans_passwd_entry() -> None:
    spec = ContainerSpec(name="n", image="i", command=(), user="0:0", labels={}, env={}, passwd=False)
    assert "--passwd=false" in run_args(spec)
    assert "--passwd=false" not in run_args(
        ContainerSpec(name="n", image="i", command=(), user="0:0", labels={}, env={})
    )


def _commit(images: CheckpointImages, paths: RunPaths, attempt: int, value: str) -> None:
    staging = paths.staging("s", attempt)
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "n").write_text(value)
    part = images.part("s", attempt)
    part.write_bytes(b"image " + value.encode())
    images.commit("s", attempt, f"hf-r-s-{attempt}", part, 0.25)


def test_images_keep_the_last_good_dump_per_attempt_with_its_outputs(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    images = CheckpointImages(paths)
    assert images.latest("s") is None
    _commit(images, paths, 1, "3")
    _commit(images, paths, 1, "7")  # the attempt's next dump replaces its last
    (paths.staging("s", 1) / "n").write_text("9")  # written after the dump: not in the checkpoint
    saved = images.latest("s", before=2)
    assert saved is not None and saved.attempt == 1 and saved.size == len(b"image 7") and saved.seconds == 0.25
    assert (Path(saved.outputs) / "n").read_text() == "7"
    assert images.latest("s", before=1) is None  # only earlier attempts are restored from
    images.part("s", 2).write_bytes(b"half")  # a dump that never finished is no checkpoint
    assert images.latest("s").attempt == 1  # type: ignore[union-attr]
    r = images.restore_point(saved)
    images.note_restored("s", 2, r)
    assert images.restored_from("s", 2) == (1, saved.taken) and images.restored_from("s", 1) is None
    assert images.drop_images("s") == len(b"image 7") + len(b"half")
    assert images.latest("s") is None and not Path(saved.outputs).exists()


def test_a_crash_inside_a_commit_keeps_one_whole_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the executor dies after the new pair is in place but before ATTEMPT.json names it: the
    # old image stays with the outputs dumped with it (not the new image with old outputs)
    paths = RunPaths(tmp_path)
    images = CheckpointImages(paths)
    _commit(images, paths, 1, "3")
    before = images.saved("s", 1)

    def crash(path: Path, data: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("hetflow.execute.checkpoint.images.write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        _commit(images, paths, 1, "7")
    monkeypatch.undo()
    kept = images.saved("s", 1)
    assert kept == before and kept is not None
    assert Path(kept.image).read_bytes() == b"image 3" and (Path(kept.outputs) / "n").read_text() == "3"
    assert len(list(images.folder("s").glob("1.*.tar"))) == 2  # the unnamed pair is left until the next commit
    _commit(images, paths, 1, "8")
    (tar,) = images.folder("s").glob("1.*.tar")  # the next commit removes the older pair and the orphan
    assert tar.read_bytes() == b"image 8" and len(list(images.folder("s").glob("1.*.out"))) == 1
    _commit(images, paths, 10, "1")  # another attempt's pair (10.*, not 1.*) is its own
    _commit(images, paths, 1, "9")
    assert images.saved("s", 10) is not None and (Path(images.saved("s", 10).outputs) / "n").is_file()  # type: ignore[union-attr]


def _image(path: Path, old_id: str) -> None:
    config = {"id": old_id, "name": "hf-r-s-1", "labels": {"hetflow.attempt": "1", "keep": "x"}, "cgroupParent": "/p/1"}
    config["spec"] = {"mounts": [{"destination": "/out", "source": "/runs/r/attempts/s/1/out"}]}
    spec = {"mounts": [{"source": f"/store/{old_id}/userdata/hosts"}, {"source": "/runs/r/attempts/s/1/out"}]}
    with tarfile.open(path, "w") as tar:
        files = (("config.dump", json.dumps(config)), ("spec.dump", json.dumps(spec)), ("ctr.log", "old lines\n"))
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data.encode()))


def test_retarget_gives_the_image_the_new_attempts_identity(tmp_path: Path) -> None:
    image, old = tmp_path / "1.tar", "a" * 64
    _image(image, old)
    replace = {"/runs/r/attempts/s/1/out": "/runs/r/attempts/s/2/out", "/p/1": "/p/2"}
    assert staging_in(image) == "/runs/r/attempts/s/1/out"
    new_id = retarget(image, name="hf-r-s-2", labels={"hetflow.attempt": "2"}, replace=replace)
    assert staging_in(image) == "/runs/r/attempts/s/2/out"  # a second restore replaces this one
    again = retarget(image, name="hf-r-s-3", labels={"hetflow.attempt": "3"}, replace={})  # the last one counts
    assert new_id != old and again != new_id and len(again) == 64
    assert config_value(image, "name") == "hf-r-s-3" and config_value(image, "id") == again
    assert config_value(image, "labels") == {"hetflow.attempt": "3", "keep": "x"}
    assert config_value(image, "cgroupParent") == "/p/2"
    with tarfile.open(image) as tar:
        specs = [m for m in tar.getmembers() if m.name == "spec.dump"]
        text = tar.extractfile(specs[-1]).read().decode()  # type: ignore[union-attr]
        logs = [m for m in tar.getmembers() if m.name == "ctr.log"]
        assert logs and logs[-1].size == 0  # a restored container's old log does not come along
    assert f"/store/{again}/userdata/hosts" in text and "/attempts/s/2/out" in text and old not in text
    (tmp_path / "bad.tar").write_bytes(b"not a tar")
    with pytest.raises(EngineError, match="cannot be read"):
        retarget(tmp_path / "bad.tar", name="x", labels={}, replace={})


def test_retarget_swaps_each_old_value_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a short old ID inside the new one, and a new path that is another pair's old one: each
    # is swapped once, in what the image held, never again in what was put there
    image = tmp_path / "1.tar"
    _image(image, "abc")
    new_id = "abc" + "0" * 61
    monkeypatch.setattr("hetflow.execute.checkpoint.archive.secrets.token_hex", lambda _: new_id)
    replace = {"/runs/r/attempts/s/1/out": "/p/1/out", "/p/1": "/p/2"}
    assert retarget(image, name="hf-r-s-2", labels={"tag": "/p/1"}, replace=replace) == new_id
    assert config_value(image, "id") == new_id and config_value(image, "cgroupParent") == "/p/2"
    assert config_value(image, "labels") == {"hetflow.attempt": "1", "keep": "x", "tag": "/p/1"}
    assert staging_in(image) == "/p/1/out"
    with tarfile.open(image) as tar:
        spec = json.loads(tar.extractfile([m for m in tar.getmembers() if m.name == "spec.dump"][-1]).read())  # type: ignore[union-attr]
    assert [m["source"] for m in spec["mounts"]] == [f"/store/{new_id}/userdata/hosts", "/p/1/out"]


class FakeDumps:
    """Dumps that write a small file, or fail for the containers named in ``fail``."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.calls: list[str] = []
        self.done = threading.Semaphore(0)

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float:
        assert leave_running and outputs is not None
        self.calls.append(name)
        try:
            if name in self.fail:
                raise EngineError(f"checkpoint of {name} failed: CRIU said no")
            copy_outputs(*outputs)  # while frozen, as the backends do (checkpoint.freeze)
            dest.write_bytes(b"dump")
            if outputs[0].is_dir():  # the process went on after the dump
                (outputs[0] / "n").write_text("after the dump")
            return 0.1
        finally:
            self.done.release()


def _drain(c: Checkpointer, running: list[tuple[str, int, str]], now: float, want: int) -> list[str]:
    said: list[str] = []
    for _ in range(200):
        said += [d.message() for d in c.tick(running, now)]
        if len(said) >= want:
            return said
        threading.Event().wait(0.01)
    raise AssertionError(f"expected {want} result(s), got {said}")


def test_periodic_dumps_are_due_every_interval_and_reported_once(tmp_path: Path) -> None:
    settings = {"s": Checkpoint(every=10.0), "app": Checkpoint(every=10.0, mode="app"), "t": Checkpoint()}
    dumps = FakeDumps(fail={"hf-r-t2-1"})
    c = Checkpointer(CheckpointImages(RunPaths(tmp_path)), settings.get, dumps)
    running = [("s", 1, "hf-r-s-1"), ("app", 1, "hf-r-app-1"), ("t", 1, "hf-r-t-1")]
    assert c.tick(running, 0.0) == [] and c.tick(running, 9.9) == [] and dumps.calls == []
    said = _drain(c, running, 10.0, 1)
    assert dumps.calls == ["hf-r-s-1"]  # app steps get a signal (appcheckpoint), t only dumps when stopped
    assert re.fullmatch(r"checkpoint of hf-r-s-1: 4 B in 0\.10s \(kept as 1\.[0-9a-f]{8}\.tar\)", said[0]), said
    assert c.tick(running, 15.0) == [] and dumps.calls == ["hf-r-s-1"]  # next due 10 s after this one
    settings["t2"] = Checkpoint(every=5.0)
    failing = [*running, ("t2", 1, "hf-r-t2-1")]
    c.tick(failing, 16.0)
    said = _drain(c, failing, 21.0, 2)  # s is due again too
    assert "checkpoint failed: checkpoint of hf-r-t2-1 failed: CRIU said no; the last good one stays" in said
    c.close()


def test_a_periodic_checkpoint_keeps_the_outputs_taken_with_the_dump_not_later_ones(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    staging = paths.staging("s", 1)
    staging.mkdir(parents=True)
    (staging / "n").write_text("at the dump")
    dumps = FakeDumps()
    images = CheckpointImages(paths)
    c = Checkpointer(images, {"s": Checkpoint(every=1.0)}.get, dumps)
    c.tick([("s", 1, "hf-r-s-1")], 0.0)
    _drain(c, [("s", 1, "hf-r-s-1")], 1.0, 1)
    saved = images.saved("s", 1)
    assert saved is not None and (Path(saved.outputs) / "n").read_text() == "at the dump"
    assert (staging / "n").read_text() == "after the dump"
    assert not list(images.folder("s").glob("*.out.part*"))  # the dump's copy became 1.out
    c.close()


def test_a_dump_that_raises_unexpectedly_is_reported_and_the_next_one_still_runs(tmp_path: Path) -> None:
    class Broken(FakeDumps):
        def checkpoint(
            self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
        ) -> float:
            if not self.calls:
                self.calls.append(name)
                raise KeyError("State")
            return super().checkpoint(name, dest, leave_running=leave_running, outputs=outputs)

    dumps = Broken()
    c = Checkpointer(CheckpointImages(RunPaths(tmp_path)), {"s": Checkpoint(every=1.0)}.get, dumps)
    running = [("s", 1, "hf-r-s-1")]
    c.tick(running, 0.0)
    assert _drain(c, running, 1.0, 1) == ["checkpoint failed: hf-r-s-1: KeyError: 'State'; the last good one stays"]
    assert _drain(c, running, 2.0, 1)[0].startswith("checkpoint of hf-r-s-1: 4 B")  # not left busy
    c.close()


def test_a_dump_of_an_attempt_that_just_ended_is_no_news(tmp_path: Path) -> None:
    dumps = FakeDumps(fail={"hf-r-s-1"})
    c = Checkpointer(CheckpointImages(RunPaths(tmp_path)), {"s": Checkpoint(every=1.0)}.get, dumps)
    c.tick([("s", 1, "hf-r-s-1")], 0.0)
    c.tick([("s", 1, "hf-r-s-1")], 1.0)
    assert dumps.done.acquire(timeout=30)
    assert c.tick([], 2.0) == []  # it failed because it ended: nothing to say
    c.close()


def _fake_criu(tmp_path: Path, check_rc: int, version: str = "4.1.1") -> str:
    path = tmp_path / f"criu-{check_rc}"
    path.write_text(
        f'#!/bin/sh\nif [ "$1" = --version ]; then echo "Version: {version}"; exit 0; fi\n'
        f'echo "Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable" >&2\nexit {check_rc}\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe says 'needs root' before it runs criu")
def test_criu_probe_says_why_not(tmp_path: Path) -> None:
    ok = criu_support({"HETFLOW_CRIU": _fake_criu(tmp_path, 0)})
    assert ok.ok and ok.version == "4.1.1" and ok.describe().startswith("yes: CRIU 4.1.1")
    old = criu_support({"HETFLOW_CRIU": _fake_criu(tmp_path, 1, "3.17.1")})
    assert not old.ok and "Failed to fill self vdso symtable" in old.reason and "make criu" in old.reason
    assert "need podman" in criu_support({"HETFLOW_CRIU": ok.path or ""}, engine="docker").reason
    missing = criu_support({"HETFLOW_CRIU": str(tmp_path / "nothing")})
    assert not missing.ok and "cannot run" in missing.reason


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe says 'needs root' before it runs criu")
def test_checkpoint_is_refused_where_criu_does_not_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETFLOW_CRIU", _fake_criu(tmp_path, 1, "3.17.1"))
    loaded = parse_workflow(
        "apiVersion: hetflow/v1\nname: c\nsteps:\n  s:\n    image: busybox\n    command: [x]\n"
        "    checkpoint: {every: 1m}\n  a:\n    image: busybox\n    command: [x]\n    checkpoint: {mode: app}\n",
        "wf.yaml",
    )
    (p,) = checkpoint_problems(loaded, "podman")
    assert p.line == 7 and "step 's': checkpoint: CRIU checkpoints do not work here" in p.message
    assert "vdso" in p.message and "checkpoint: {mode: app}" in p.message
    app_only = parse_workflow(
        "apiVersion: hetflow/v1\nname: c\nsteps:\n  a:\n    image: b\n    command: [x]\n    checkpoint: {mode: app}\n",
        "wf.yaml",
    )
    assert checkpoint_problems(app_only, "podman") == []


def test_checkpointed_steps_are_read_from_the_recorded_workflow() -> None:
    wf = _wf("    checkpoint: {every: 10m}")
    record = type("R", (), {"spec_json": wf.model_dump_json(by_alias=True)})()
    assert checkpointed_steps(record) == {"s"}  # type: ignore[arg-type]
    record.spec_json = _wf("    checkpoint: {mode: app}", network=True).model_dump_json(by_alias=True)
    assert checkpointed_steps(record) == set()  # type: ignore[arg-type]
    record.spec_json = "not json"
    assert checkpointed_steps(record) == set()  # type: ignore[arg-type]

"""Batches of fan-out items (issue 26): the ``batch:`` field, which steps are batched, each
item's script, and an item's state read from its batch's folder (pure, with real files)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hetflow.errors import SpecError
from hetflow.execute.backends.base import JobState
from hetflow.execute.data.fencing import Fenced, grant
from hetflow.execute.data.outputs import accept_outputs
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.engine import ContainerSpec, Mount, run_args
from hetflow.execute.run.batching import (
    ENTRY,
    Item,
    Policy,
    batch_name,
    batch_notes,
    batch_spec,
    collect,
    held_outputs,
    is_batch,
    item_script,
    item_state,
    refine,
    same_container,
    stage,
    write_batch,
)
from hetflow.spec import AUTO_BATCH, Batch, Workflow, parse_workflow


def _wf(extra: str = "", items: int = 3, estimate: str = "1s") -> Workflow:
    text = f"""apiVersion: hetflow/v1
name: b
steps:
  w:
    image: busybox
    foreach: {{range: {items}}}
    command: [echo, "{{{{ item }}}}"]
    estimate: {estimate}
{extra}
  single:
    image: busybox
    command: ["true"]
    batch: 5
"""
    return parse_workflow(text, "wf.yaml").workflow


def test_batch_field_forms() -> None:
    assert _wf("    batch: 7").steps["w.0"].batch == Batch(max=7)
    assert _wf("    batch: {max: 40, target: 2m}").steps["w.0"].batch == Batch(max=40, target=120.0)
    assert _wf("    batch: true").steps["w.0"].batch == AUTO_BATCH
    assert _wf("    batch: false").steps["w.0"].batch is False


@pytest.mark.parametrize(
    ("value", "said"),
    [("0", "batch: 0 is not a number of items"), ("{max: 5, target: 0s}", "must be above 0"), ("{size: 3}", "size")],
)
def test_bad_batch_is_refused_with_the_field(value: str, said: str) -> None:
    with pytest.raises(SpecError) as err:
        _wf(f"    batch: {value}")
    assert "steps.w.batch" in str(err.value) and said in str(err.value)


def test_size_follows_target_and_estimate() -> None:
    assert Batch(max=100, target=30).size(1.0) == 30
    assert Batch(max=10, target=30).size(1.0) == 10
    assert Batch(max=100, target=30).size(60.0) == 1  # longer than the target: one each
    assert Batch(max=100, target=30).size(None) == 100
    assert Batch(max=8).size(0.5) == 8


def test_policy_batches_items_only_and_auto_only_wide_short_fanouts() -> None:
    wf = _wf("    batch: 4")
    policy = Policy(wf)
    assert policy.of("w.1", wf.steps["w.1"]) == Batch(max=4)
    assert policy.of("single", wf.steps["single"]) is None  # not a fan-out item
    narrow = _wf()
    assert Policy(narrow).of("w.0", narrow.steps["w.0"]) is None  # 3 items: no automatic batching
    wide = _wf(items=150)
    assert Policy(wide, lambda image: ()).of("w.0", wide.steps["w.0"]) == AUTO_BATCH
    # an image with an ENTRYPOINT, or one the engine cannot tell: its items are not batched unasked
    assert Policy(wide, lambda image: ("python",)).of("w.0", wide.steps["w.0"]) is None
    assert Policy(wide).of("w.0", wide.steps["w.0"]) is None
    assert Policy(wide, lambda image: None).of("w.0", wide.steps["w.0"]) is None
    long = _wf(items=150, estimate="5m")
    assert Policy(long, lambda image: ()).of("w.0", long.steps["w.0"]) is None  # long items gain nothing
    off = _wf("    batch: false", items=150)
    assert Policy(off, lambda image: ()).of("w.0", off.steps["w.0"]) is None


def test_policy_leaves_out_secrets_and_gangs() -> None:
    wf = _wf("    batch: 4\n    secrets: [TOKEN]")
    assert Policy(wf).of("w.0", wf.steps["w.0"]) is None  # a secret never goes into an item's file


def _spec(name: str, cmd: tuple[str, ...], out: str, inputs: str = "/data") -> ContainerSpec:
    return ContainerSpec(
        name=name,
        image="busybox",
        command=cmd,
        user="1000:1000",
        labels={"hetflow.run": "r1", "hetflow.step": name},
        env={"HETFLOW_STEP": name, "HETFLOW_ATTEMPT": "1", "A": "it's"},
        mounts=(Mount(out, "/out", read_only=False), Mount(inputs, "/in/x")),
        cpus=0.5,
        memory=32 << 20,
        log_path=f"/logs/{name}",
    )


def test_item_script_quotes_environment_and_command(tmp_path: Path) -> None:
    spec = _spec("w.1", ("sh", "-c", "echo \"$A\" '$HETFLOW_STEP' $HETFLOW_STEP"), "/o")
    script = tmp_path / "s.sh"
    script.write_text(item_script(spec))
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True, env={}).stdout
    assert out == "it's $HETFLOW_STEP w.1\n"


def test_items_share_a_container_only_when_all_but_command_env_and_out_agree() -> None:
    a = _spec("w.0", ("echo", "0"), "/o0")
    assert same_container(a, _spec("w.1", ("echo", "1"), "/o1"))
    assert not same_container(a, _spec("w.2", ("echo", "2"), "/o2", inputs="/other"))


def test_batch_spec_keeps_hardening_and_inputs_and_adds_its_folder(tmp_path: Path) -> None:
    first = _spec("w.0", ("echo", "0"), "/o0")
    spec = batch_spec(first, "hf-r1-w.0-1-batch", tmp_path, "w")
    assert (spec.entrypoint, spec.command) == (("sh",), ("/.hetflow/batch/run",))
    assert spec.user == first.user and spec.cpus == 0.5
    args = run_args(spec, engine="podman")
    assert args[args.index("--entrypoint") + 1] == '["sh"]' and args[-2:] == ["busybox", "/.hetflow/batch/run"]
    assert {m.target for m in spec.mounts} == {"/in/x", "/out", "/.hetflow/batch"}
    assert "HETFLOW_STEP" not in spec.env and spec.env["A"] == "it's"
    assert spec.labels["hetflow.step"] == "w" and is_batch(spec.name)
    assert batch_name("r1", "w.0", 1) == spec.name and not is_batch("hf-r1-w.0-1")


def _laid_out(tmp_path: Path) -> tuple[RunPaths, Path]:
    paths = RunPaths(tmp_path / "run")
    items = [Item(f"w.{i}", 1, _spec(f"w.{i}", ("echo", str(i)), "/o")) for i in range(3)]
    folder = write_batch(paths, "hf-r1-w.0-1-batch", items, (os.getuid(), os.getgid()))
    return paths, folder


def test_item_state_from_its_files(tmp_path: Path) -> None:
    paths, folder = _laid_out(tmp_path)
    name = "hf-r1-w.0-1-batch"
    running = JobState(name, True, None, "running", node="n1")
    assert (folder / "order").read_text().split() == ["w.0.1", "w.1.1", "w.2.1"]
    assert paths.log("w.0", 1).is_symlink()
    assert item_state(paths, "w.0", 1, name, running) == JobState(name, True, None, "running", node="n1")
    # w.0 finished: exit 0, an output, a log line
    (folder / "start" / "w.0.1").touch()
    (folder / "out" / "w.0.1").mkdir()
    (folder / "out" / "w.0.1" / "o.txt").write_text("0")
    (folder / "log" / "w.0.1").write_text("2026-01-01T00:00:00Z stdout F zero\n")
    (folder / "rc" / "w.0.1").write_text("0\n")
    st = item_state(paths, "w.0", 1, name, running)
    assert st is not None and (st.running, st.exit_code, st.node) == (False, 0, "n1") and st.ended is not None
    # it exited 0: its outputs wait in the batch's folder, to be renamed into place from there
    assert held_outputs(paths, name, "w.0", 1) == folder / "out" / "w.0.1" and not paths.staging("w.0", 1).exists()
    assert not paths.log("w.0", 1).is_symlink() and "zero" in paths.log("w.0", 1).read_text()
    collect(paths, name, "w.0", 1, 0)  # again, after a crash: nothing to do, nothing lost
    assert (folder / "out" / "w.0.1" / "o.txt").read_text() == "0" and "zero" in paths.log("w.0", 1).read_text()
    # the batch died while w.1 ran (OOM): w.1 failed with its code; w.2 never began: requeued
    (folder / "start" / "w.1.1").touch()
    dead = JobState(name, False, 137, "exited", reason="OOMKilled")
    failed = item_state(paths, "w.1", 1, name, dead)
    assert failed is not None and failed.exit_code == 137 and not failed.dependency_failed
    assert "ended while it ran: OOMKilled" in failed.reason
    never = item_state(paths, "w.2", 1, name, dead)
    assert never is not None and never.dependency_failed and never.exit_code is None
    assert item_state(paths, "w.2", 1, name, None) is None  # no batch, never began: a launch to redo
    assert refine(paths, {"hf-r1-x-1": running}, "x", 1, "hf-r1-x-1") == running  # not a batch: as is


def test_a_failed_items_outputs_go_to_its_staging_folder_once(tmp_path: Path) -> None:
    paths, folder = _laid_out(tmp_path)
    name = "hf-r1-w.0-1-batch"
    (folder / "start" / "w.1.1").touch()
    (folder / "out" / "w.1.1").mkdir()
    (folder / "out" / "w.1.1" / "part.txt").write_text("half")
    (folder / "rc" / "w.1.1").write_text("3\n")
    st = item_state(paths, "w.1", 1, name, JobState(name, True, None, "running"))
    assert st is not None and st.exit_code == 3
    assert (paths.staging("w.1", 1) / "part.txt").read_text() == "half"  # where any failed attempt's are
    assert held_outputs(paths, name, "w.1", 1) is None
    stage(paths, name, "w.1", 1)  # again (``Attempts.fail``): nothing to do, nothing lost
    assert (paths.staging("w.1", 1) / "part.txt").read_text() == "half"


def test_an_item_refused_its_rename_is_staged_with_the_fencing_mark(tmp_path: Path) -> None:
    paths, folder = _laid_out(tmp_path)
    name = "hf-r1-w.0-1-batch"
    (folder / "out" / "w.0.1").mkdir()
    (folder / "out" / "w.0.1" / "o.txt").write_text("0")
    held = held_outputs(paths, name, "w.0", 1)
    assert held is not None
    grant(paths.step_out("w.0"), 2)  # attempt 2 holds the step now
    with pytest.raises(Fenced):
        accept_outputs("r1", "w.0", held, paths.step_out("w.0"), ["o.txt"], attempt=1, tidy=False)
    stage(paths, name, "w.0", 1)  # as Attempts.fail does
    assert (paths.staging("w.0", 1) / "o.txt").read_text() == "0"
    assert "discarded" in (paths.staging("w.0", 1).parent / "discarded").read_text()
    assert not paths.step_out("w.0").exists() and not (folder / "out" / "discarded").exists()


def test_entry_runs_each_item_once_in_order_and_skips_those_done(tmp_path: Path) -> None:
    """The entry under the host's sh, its two container paths swapped for folders here."""
    _, folder = _laid_out(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "t").mkdir()
    entry = ENTRY.replace("/.hetflow/batch", "@B@").replace(" /out", " @O@").replace(" /tmp/", " @T@/")
    entry = entry.replace("@B@", str(folder)).replace("@O@", str(out)).replace("@T@", str(tmp_path / "t"))
    (folder / "rc" / "w.1.1").write_text("0\n")  # done before (a restored batch)
    for i in range(3):
        (folder / "items" / f"w.{i}.1.sh").write_text(f"echo item {i}; echo {i} > {out}/o.txt; exit {i}\n")
    proc = subprocess.run(["sh", "-c", entry], capture_output=True, text=True, check=False)
    assert proc.returncode == 1  # one item failed
    assert [(folder / "rc" / f"w.{i}.1").read_text().strip() for i in range(3)] == ["0", "0", "2"]
    assert not (folder / "log" / "w.1.1").exists()  # skipped, not run twice
    assert (folder / "log" / "w.2.1").read_text().endswith(" stdout F item 2\n")
    assert (folder / "out" / "w.2.1" / "o.txt").read_text() == "2\n"


def test_batch_notes_name_each_batched_fanout() -> None:
    notes = batch_notes(_wf("    batch: {max: 40, target: 2s}"))
    assert notes == [
        "w: 3 items run up to 2 to a container (its batch: up to 40 items to a container, about 2s of work each);"
        " each keeps its own attempt, log, outputs and retries"
    ]
    assert batch_notes(_wf()) == []


def test_free_cores_count_a_batch_once_and_do_not_drift_below_a_share() -> None:
    from typing import Any, cast

    from hetflow.execute.run.attempts import Active
    from hetflow.execute.run.dispatching.dispatch import LocalDispatch
    from hetflow.inventory import Cpu, Node

    node = Node(
        name="h",
        cpu=Cpu(model="x", vendor="x", architecture="x86_64", microarchitecture="x86_64", cores=2),
        memory_bytes=1 << 30,
    )
    active: dict[str, Active] = {}
    dispatch = LocalDispatch(
        node=node,
        chooser=cast(Any, None),
        store=cast(Any, None),
        backend=cast(Any, None),
        active=active,
        pid=1,
        alive=lambda pid: True,
    )
    for i in range(19):
        active[f"s{i}"] = Active(f"s{i}", 1, f"c{i}", 0.1, 1 << 20, ())
    assert dispatch.free([]).cpus == 0.1  # not 0.0999...: a 20th step of 0.1 CPU fits
    for i in range(5):  # five items of one batch hold one container's share
        active[f"w.{i}"] = Active(f"w.{i}", 1, "hf-r-w.0-1-batch", 0.1, 1 << 20, ())
    assert dispatch.free([]).cpus == 0.0
    assert dispatch.free([]).memory == (1 << 30) - 20 * (1 << 20)

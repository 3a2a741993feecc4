"""CRIU checkpoints on the Slurm backend (``backends.slurm.checkpoint``, issue 27): the dump as a
step of the job (srun --jobid --overlap), a job that a dump stopped reported as checkpointed
(requeued, not failed), the image readied for the new attempt, and the job script's restore
branch, run as the very bash the job runs over a real tar (its cgroup rewrite) and with a
podman that fails (the attempt then starts from zero and says so in its log)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.slurm import SlurmSettings
from hetflow.execute.backends.slurm.checkpoint import (
    CHECKPOINTED_CODE,
    checkpointed_end,
    dump_args,
    dump_error,
    dump_seconds,
    ready_image,
    restore_start,
)
from hetflow.execute.backends.slurm.jobfiles import MARKER
from hetflow.execute.backends.slurm.translate import job_script
from hetflow.execute.checkpoint.archive import config_value
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.run.attempts import NODE_FAULT_REQUEUES
from tests.contract.backend_contract import job
from tests.unit.builders import Outcome, world
from tests.unit.test_runner_cluster import FLAT, QueueBackend, cluster_runner
from tests.unit.test_slurm_faults import NAME, RUN, FakeClient, backend, row

AUTOREMOVE = "io.podman.annotations.autoremove"


def test_the_dump_runs_inside_the_job_on_its_node() -> None:
    args = dump_args(
        "42", "hf-r-s-1", Path("/w/ck/1.tar.part"), leave_running=True, podman="podman", hooks="/h", conf="/c",
        criu_dir="/opt/criu",
    )  # fmt: skip
    assert args[:6] == ["srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--quiet"]
    podman = args[args.index("podman") :]
    assert podman == [
        "podman", "--hooks-dir", "/h", "container", "checkpoint", "--export", "/w/ck/1.tar.part", "--compress", "none",
        "--leave-running", "hf-r-s-1",
    ]  # fmt: skip
    assert args[args.index("podman") - 4 : args.index("podman")] == ["/opt/criu", "/c", "", ""]  # no copy
    copying = dump_args(
        "42", "n", Path("/d"), leave_running=True, podman="p", hooks="/h", conf="/c", criu_dir="/o",
        outputs=(Path("/w/out"), Path("/w/ck/1.out.part.x")),
    )  # fmt: skip
    assert copying[copying.index("p") - 2 : copying.index("p")] == ["/w/out", "/w/ck/1.out.part.x"]
    stop = dump_args("42", "n", Path("/d"), leave_running=False, podman="p", hooks="/h", conf="/c", criu_dir="/o")
    assert "--leave-running" not in stop and stop[-1] == "n"


def test_the_node_program_puts_criu_first_and_says_how_long_the_dump_took(tmp_path: Path) -> None:
    args = dump_args("1", "c", tmp_path / "d", leave_running=True, podman="sh", hooks="/h", conf="/c", criu_dir="/x")
    program = args[args.index("-c") + 1 :]
    # run the node's program with a "podman" that prints its PATH and CONTAINERS_CONF
    shown = subprocess.run(
        ["sh", "-c", program[0], *program[1:6], "sh", "-c", 'echo "$PATH|$CONTAINERS_CONF"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.splitlines()[0].startswith("/x:") and shown.splitlines()[0].endswith("|/c")
    took = dump_seconds(shown)
    assert took is not None and 0 <= took < 60
    assert dump_seconds("no such line\n") is None


def test_a_failed_dump_says_podmans_words_not_sruns() -> None:
    err = "Error: criu failed: type NOTIFY errno 0\nsrun: error: n1: task 0: Exited with exit code 125\n"
    assert dump_error(err, "hetflow-dump 1.0 2.0\n") == "Error: criu failed: type NOTIFY errno 0"
    assert dump_error("srun: error: Slurm job 7 has expired\n", "") == "srun: error: Slurm job 7 has expired"


class DumpClient(FakeClient):
    """The fake client that also answers srun: a failure in podman's words."""

    def run(self, args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.ran = args
        return subprocess.CompletedProcess(args, 1, "", "Error: cannot checkpoint: no CRIU\nsrun: error: task 0\n")


def test_a_failed_dump_leaves_the_job_running_as_it_was(tmp_path: Path) -> None:
    client = DumpClient(rows=[row("RUNNING")])
    b = backend(tmp_path, client)
    dest = tmp_path / "1.tar.part"
    with pytest.raises(EngineError, match=f"checkpoint of {NAME} failed: Error: cannot checkpoint: no CRIU"):
        b.checkpoint(NAME, dest, leave_running=False)
    assert "--jobid=7" in client.ran and not dest.exists()
    assert not (b.jobdir(RUN) / f"{NAME}{MARKER}").exists()  # the job script must not end as checkpointed
    with pytest.raises(EngineError, match="no Slurm job of that name"):
        b.checkpoint("hf-r1-other-1", dest, leave_running=True)


def test_a_job_a_dump_stopped_is_checkpointed_not_failed(tmp_path: Path) -> None:
    b = backend(tmp_path, FakeClient(rows=[row("FAILED")]), exit_line=f"{CHECKPOINTED_CODE} 7 checkpointed")
    st = b.poll(RUN)[NAME]
    assert (st.running, st.status, st.checkpointed, st.node_failed) == (False, "CHECKPOINTED", True, False)
    assert st.reason.startswith("checkpointed") and st.exit_code == CHECKPOINTED_CODE
    # the same code without the script's word is the step's own failure
    b2 = backend(tmp_path / "b2", FakeClient(rows=[row("FAILED")]), exit_line=f"{CHECKPOINTED_CODE} 7")
    assert (b2.poll(RUN)[NAME].checkpointed, b2.poll(RUN)[NAME].exit_code) == (False, CHECKPOINTED_CODE)


def test_the_script_ends_checkpointed_when_a_dump_stopped_its_container(tmp_path: Path) -> None:
    end = checkpointed_end()
    script = (
        f"jobdir={tmp_path}; name=n; log={tmp_path}/log; exitf={tmp_path}/n.exit; SLURM_JOB_ID=9\n"
        'cri() { echo "$*" >> "$log"; }\n' + end + "echo ran-on\n"
    )
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "ran-on\n")  # no dump: the script goes on
    (tmp_path / f"n{MARKER}").write_text("1\n")
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (CHECKPOINTED_CODE, "")
    assert (tmp_path / "n.exit").read_text() == f"{CHECKPOINTED_CODE} 9 checkpointed\n"
    assert not (tmp_path / f"n{MARKER}").exists() and "checkpointed and stopped" in (tmp_path / "log").read_text()


# --- the image and the job script's restore branch ---------------------------------------


def _image(path: Path, parent: str, staging: str) -> None:
    """A checkpoint export's two small files as podman writes them (the CRIU images left out)."""
    spec = json.dumps(
        {"annotations": {AUTOREMOVE: "TRUE"}, "mounts": [{"source": staging, "destination": "/out"}],
         "linux": {"cgroupsPath": f"{parent}/libpod-abc"}},
        indent=2,
    )  # fmt: skip
    config = json.dumps(
        {"id": "abc", "name": "hf-r-s-1", "cgroupParent": parent, "spec": json.loads(spec), "labels": {}}, indent=2
    )
    with tarfile.open(path, "w:") as tar:
        for member, text in (("config.dump", config), ("spec.dump", spec)):
            info = tarfile.TarInfo(member)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))


def _restoring(tmp_path: Path) -> tuple[Path, object]:
    old, new = tmp_path / "st" / "1", tmp_path / "st" / "2"
    image, outputs = tmp_path / "ck" / "1.tar", tmp_path / "ck" / "1.out"
    outputs.mkdir(parents=True)
    (outputs / "n").write_text("7\n")
    _image(image, "/hetflow/hf-r-s-1", str(old))
    made = job("hf-r-s-2", new, "true", run_id="r")
    made = replace(made, container=replace(made.container, log_path=str(tmp_path / "logs" / "2.log")))
    return image, replace(made, restore=Restore(str(image), str(outputs), str(old), 1, 0.0))


def _last(image: Path, member: str) -> str:
    with tarfile.open(image) as tar:
        f = tar.extractfile([m for m in tar.getmembers() if m.name == member][-1])
        assert f is not None
        return f.read().decode()


def test_the_image_gets_the_new_attempts_name_and_out_and_no_autoremove(tmp_path: Path) -> None:
    image, made = _restoring(tmp_path)
    ready_image(made)  # type: ignore[arg-type]
    assert config_value(image, "name") == "hf-r-s-2" and config_value(image, "id") != "abc"
    spec = json.loads(_last(image, "spec.dump"))
    assert spec["mounts"][0]["source"] == str(tmp_path / "st" / "2")
    assert spec["annotations"][AUTOREMOVE] == "FALSE"  # podman wait gets the code; the script removes it
    broken = tmp_path / "broken.tar"
    broken.write_bytes(b"not a tar")
    with pytest.raises(EngineError, match="cannot be read"):
        ready_image(replace(made, restore=Restore(str(broken), "", "", 1, 0.0)))  # type: ignore[type-var]


def _run_branch(tmp_path: Path, made: object, podman: str, usecg: str) -> subprocess.CompletedProcess[str]:
    """The restore branch as the job script has it, after the script's own variables."""
    jobdir = tmp_path / "jobs"
    jobdir.mkdir(exist_ok=True)
    head = (
        f"set -u; stopping=0; podman={podman}; hooks=/h; name=hf-r-s-2; log={made.container.log_path}; "  # type: ignore[attr-defined]
        f"jobdir={jobdir}; usecg={usecg}; jobcg=\n"
        'cri() { printf \'%s stderr F hetflow: %s\\n\' T "$*" >> "$log"; }\n'
    )
    branch = restore_start(made, "/opt/criu") + ':\nfi\necho "restored=$restored"\n'  # type: ignore[arg-type]
    return subprocess.run(["bash", "-c", head + branch], capture_output=True, text=True, check=False)


def test_the_script_gives_the_image_this_jobs_cgroup_then_restores(tmp_path: Path) -> None:
    image, made = _restoring(tmp_path)
    ready_image(made)  # type: ignore[arg-type]
    (tmp_path / "logs").mkdir()
    done = _run_branch(tmp_path, made, "true", "/hetflow/hf-r-s-2")  # a podman that does what it is asked
    assert done.stdout.strip() == "restored=1", done.stderr
    config, spec = json.loads(_last(image, "config.dump")), json.loads(_last(image, "spec.dump"))
    assert config["cgroupParent"] == "/hetflow/hf-r-s-2"
    assert spec["linux"]["cgroupsPath"] == f"/hetflow/hf-r-s-2/libpod-{config['id']}"  # the new ID too
    assert (tmp_path / "st" / "2" / "n").read_text() == "7\n"  # the checkpoint's outputs in /out
    assert not (tmp_path / "jobs" / "hf-r-s-2.restore").exists()


def test_a_restore_that_fails_starts_from_zero_and_says_so(tmp_path: Path) -> None:
    image, made = _restoring(tmp_path)
    ready_image(made)  # type: ignore[arg-type]
    (tmp_path / "logs").mkdir()
    done = _run_branch(tmp_path, made, "false", "")  # podman refuses the restore
    assert done.stdout.strip() == "restored=0", done.stderr
    log = (tmp_path / "logs" / "2.log").read_text()
    assert f"hetflow: restore from {image} failed" in log and "this attempt starts from zero" in log
    assert list((tmp_path / "st" / "2").iterdir()) == []  # no stale outputs for the fresh run


def test_only_a_job_with_a_restore_has_the_branch_and_every_job_can_end_checkpointed(tmp_path: Path) -> None:
    _, made = _restoring(tmp_path)
    plain = job_script(replace(made, restore=None), SlurmSettings(), tmp_path, "/c", "/h")  # type: ignore[type-var]
    restoring = job_script(made, SlurmSettings(), tmp_path, "/c", "/h", "/opt/criu")  # type: ignore[arg-type]
    assert "container restore" not in plain and 'podman" --hooks-dir "$hooks" wait' not in plain
    assert "container restore --import" in restoring and 'wait "$name"' in restoring
    for script in (plain, restoring):
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)
        assert checkpointed_end() in script
        # the checkpointed end comes before publishing: a stopped container's outputs are not the step's
        assert script.index(checkpointed_end()) < script.index('finish "$code"')


# --- what the runner makes of a checkpointed job ------------------------------------------


@dataclass
class Checkpointing(QueueBackend):
    """The first ``stopped`` attempts of step a end as a dump stopped them (``CHECKPOINTED``)."""

    stopped: int = 1

    def poll(self, run_id: str) -> dict[str, JobState]:
        out = super().poll(run_id)
        for n in range(1, self.stopped + 1):
            name = f"hf-{run_id}-a-{n}"
            if name in out and not out[name].running:
                why = "checkpointed: its container was dumped and stopped"
                out[name] = JobState(name, False, CHECKPOINTED_CODE, "CHECKPOINTED", "n1", (), why, checkpointed=True)
        return out


def test_a_checkpointed_job_is_requeued_neither_failed_nor_a_node_fault(tmp_path: Path) -> None:
    # more stops than the node-fault bound, and a step without retries: each goes on as a new attempt
    stops = NODE_FAULT_REQUEUES + 1
    w = world(tmp_path, FLAT, outcomes={"a": [Outcome(files={"o": str(i).encode()}) for i in range(1, stops + 2)]})
    assert cluster_runner(w, Checkpointing(w.engine, stopped=stops)).execute() == "succeeded"
    a = w.store.attempts(w.run.id, "a")
    assert [x.state for x in a] == ["stopped"] * stops + ["succeeded"]
    assert all(x.message.startswith("checkpointed") for x in a[:stops])
    assert w.store.node_faults(w.run.id, "a") == 0

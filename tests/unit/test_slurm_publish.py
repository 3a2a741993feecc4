"""The Slurm job script's publishing of a step's outputs (``backends.slurm.publish``), run as the
very bash the job runs: outputs in place before the job ends 0, or a non-zero end that says
which are missing, with paths holding spaces and quotes."""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.execute.backends.base import DISCARDED_CODE, PUBLISH_FAILED_CODE, Publish
from hetflow.execute.backends.slurm.script.publish import publish_script
from hetflow.execute.backends.slurm.settings import SlurmSettings
from hetflow.execute.backends.slurm.translate import job_script
from hetflow.execute.data import fencing
from tests.contract.backend_contract import gang_job, job


def _run(tmp_path: Path, code: int, declared: tuple[str, ...], *, publish: bool = True) -> tuple[int, Path, Path]:
    """The snippet after a container that ended ``code``; (the job's exit, staging, final)."""
    root = tmp_path / "work dir's"
    staging, final = root / "attempts" / "s" / "1" / "out", root / "steps" / "s" / "out"
    made = job("hf-r-s-1", staging, "true", run_id="r")
    made = replace(made, container=replace(made.container, log_path=str(root / "s.log")))
    if publish:
        made = replace(made, publish=Publish(str(staging), str(final), declared))
    script = f'finish() {{ exit "$1"; }}\ncode={code}\n{publish_script(made)}finish "$code"\n'
    return subprocess.run(["bash", "-c", script], check=False).returncode, staging, final


@pytest.mark.parametrize(
    ("written", "declared", "old", "code", "want"),
    [
        pytest.param(["a", "b c"], ("a", "b c"), False, 0, (0, ["a", "b c"], False), id="all-written"),
        pytest.param(["a"], ("a",), True, 0, (0, ["a"], False), id="an-old-final-is-replaced-whole"),
        pytest.param(["d/x"], ("d",), False, 0, (0, ["d"], False), id="a-declared-folder"),
        pytest.param([], (), False, 0, (0, [], False), id="no-outputs-declared"),
        pytest.param(["a"], ("a", "it's"), False, 0, (PUBLISH_FAILED_CODE, ["old"], True), id="one-missing"),
        pytest.param(["a"], ("a",), False, 3, (3, ["old"], True), id="the-container-failed"),
    ],
)
def test_the_job_publishes_its_outputs_before_it_ends_0(
    tmp_path: Path,
    written: list[str],
    declared: tuple[str, ...],
    old: bool,
    code: int,
    want: tuple[int, list[str], bool],
) -> None:
    root = tmp_path / "work dir's"
    final = root / "steps" / "s" / "out"
    final.mkdir(parents=True)
    (final / "old").write_text("an earlier attempt's\n")
    for name in written:
        f = root / "attempts" / "s" / "1" / "out" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(name)
    if not old and want[0] == 0:
        (final / "old").unlink()
        final.rmdir()
    exit_code, staging, final = _run(tmp_path, code, declared)
    assert exit_code == want[0]
    assert sorted(p.name for p in final.iterdir()) == want[1]
    assert staging.exists() == want[2] and not (final.parent / "out.old").exists()
    if want[2] and written:
        assert sorted(p.name for p in staging.iterdir()) == sorted(written)
    log = (root / "s.log").read_text() if (root / "s.log").exists() else ""
    if want[0] == PUBLISH_FAILED_CODE:
        assert "hetflow: exited 0 but did not write declared output(s) it's under /out" in log, log
    else:
        assert log == ""


def test_a_job_without_publish_leaves_its_outputs_to_the_executor(tmp_path: Path) -> None:
    exit_code, staging, final = _run(tmp_path, 0, ("a",), publish=False)
    assert (exit_code, staging.is_dir(), final.exists()) == (0, True, False)


def test_single_and_gang_scripts_publish_last_and_parse(tmp_path: Path) -> None:
    """Both batch scripts carry the snippet right before their last ``finish`` (after the
    container, or the gang's fold), and bash reads them."""
    from hetflow.execute.backends.slurm.gang import gang_scripts

    p = Publish(str(tmp_path / "st"), str(tmp_path / "fi"), ("x",))
    single = job("hf-r-s-1", tmp_path / "st", "true", run_id="r")
    gang = gang_job("hf-r-g-1", tmp_path / "st", ["true", "true"], run_id="r")
    scripts = [
        job_script(replace(single, publish=p), SlurmSettings(), tmp_path, "conf", "hooks"),
        gang_scripts(replace(gang, publish=p), SlurmSettings(), tmp_path, "conf", "hooks")[0],
    ]
    for script in scripts:
        tail = script[script.index("hetflow.execute.backends.slurm.script.publish") :]
        assert tail.rstrip().endswith('fi\nfinish "$code"'), tail
        assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


# --- only the accepted attempt writes (issue 37) ---------------------------------------------


def _staged(tmp_path: Path, text: str = "mine\n") -> tuple[Path, Path]:
    """Attempt 1's /out with its output written, and the step's folder with an accepted one's."""
    root = tmp_path / "work dir's"
    staging, final = root / "attempts" / "s" / "1" / "out", root / "steps" / "s" / "out"
    staging.mkdir(parents=True)
    (staging / "a").write_text(text)
    final.mkdir(parents=True)
    (final / "a").write_text("accepted\n")
    return staging, final


@pytest.mark.parametrize(
    ("token", "published"),
    [(None, True), (1, True), (2, False), (fencing.NOBODY, False)],
    ids=["no-token-yet", "its-own", "a-later-attempts", "given-up"],
)
def test_the_job_puts_its_outputs_in_place_only_while_the_fencing_token_names_its_attempt(
    tmp_path: Path, token: int | None, published: bool
) -> None:
    staging, final = _staged(tmp_path)
    if token is not None:
        fencing.grant(final, token)
    exit_code, _, _ = _run(tmp_path, 0, ("a",))
    log = (final.parents[2] / "s.log").read_text() if (final.parents[2] / "s.log").exists() else ""
    if published:
        assert (exit_code, (final / "a").read_text(), staging.exists()) == (0, "mine\n", False)
        assert log == ""
        return
    said = fencing.discarded_text(1, token or 0)  # the executor's words, from the script
    assert (exit_code, (final / "a").read_text()) == (DISCARDED_CODE, "accepted\n")
    assert (staging / "a").read_text() == "mine\n"  # left in its own folder
    assert fencing.discarded_file(staging).read_text() == said + "\n"
    assert f"stderr F hetflow: {said}" in log, log
    assert fencing.holder(final) == token


def _children(pid: int) -> list[str]:
    """The names of ``pid``'s child processes."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((proc / "comm").read_text().strip())
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_the_token_check_and_the_rename_are_one_act_under_the_steps_lock(tmp_path: Path) -> None:
    """The executor holds the step's lock: the job waits for it before it reads the token, so
    a token changed meanwhile (another attempt granted) is the one it reads."""
    staging, final = _staged(tmp_path)
    fencing.grant(final, 1)
    root = tmp_path / "work dir's"
    made = replace(job("hf-r-s-1", staging, "true", run_id="r"), publish=Publish(str(staging), str(final), ("a",)))
    made = replace(made, container=replace(made.container, log_path=str(root / "s.log")))
    script = f'finish() {{ exit "$1"; }}\ncode=0\n{publish_script(made)}finish "$code"\n'
    with fencing.locked(final):
        proc = subprocess.Popen(["bash", "-c", script])
        deadline = time.monotonic() + 60
        while "flock" not in _children(proc.pid):  # it waits for the lock
            assert proc.poll() is None, "the job did not wait for the step's lock"
            assert time.monotonic() < deadline, "the job never came to take the step's lock"
            time.sleep(0.05)
        fencing.fence_file(final).write_text("2\n")  # attempt 2 granted, the lock held
    assert proc.wait(timeout=60) == DISCARDED_CODE
    assert (final / "a").read_text() == "accepted\n" and (staging / "a").exists()

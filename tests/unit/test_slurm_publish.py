"""The Slurm job script's publishing of a step's outputs (``backends.slurm.publish``), run as the
very bash the job runs: outputs in place before the job ends 0, or a non-zero end that says
which are missing, with paths holding spaces and quotes."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.execute.backends.base import PUBLISH_FAILED_CODE, Publish
from hetflow.execute.backends.slurm.publish import publish_script
from hetflow.execute.backends.slurm.settings import SlurmSettings
from hetflow.execute.backends.slurm.translate import job_script
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
        tail = script[script.index("hetflow.execute.backends.slurm.publish") :]
        assert tail.rstrip().endswith('fi\nfinish "$code"'), tail
        assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0

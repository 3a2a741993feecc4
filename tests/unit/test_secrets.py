"""Step secrets without containers: the secrets file, the lookup and its refusals, masking,
log scrubbing, the salted digests the cache key holds, and the podman arguments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from hetflow.errors import UsageError
from hetflow.execute import ContainerSpec, run_args
from hetflow.execute.secrets import (
    SECRETS_FILE_ENV,
    Secrets,
    activate,
    gather,
    mask,
    read_secrets_file,
    scrub_logs,
    secret_digests,
)
from hetflow.spec import Step, Workflow


@pytest.fixture(autouse=True)
def _no_active_secrets() -> Iterator[None]:
    yield
    activate(Secrets())


def _workflow(**secrets: list[str]) -> Workflow:
    steps = {name: {"image": "busybox", "command": ["true"], "secrets": names} for name, names in secrets.items()}
    return Workflow.model_validate({"apiVersion": "hetflow/v1", "name": "w", "steps": steps})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("A=1\nB=two words\n", {"A": "1", "B": "two words"}, id="plain"),
        pytest.param("# c\n\nTOKEN=a=b==\n", {"TOKEN": "a=b=="}, id="value-keeps-later-equals"),
        pytest.param("K='quoted'\n", {"K": "'quoted'"}, id="quotes-are-the-value"),
        pytest.param("K=\n", {"K": ""}, id="empty"),
    ],
)
def test_the_secrets_file_is_name_value_lines(tmp_path: Path, text: str, expected: dict[str, str]) -> None:
    (tmp_path / "s").write_text(text)
    assert read_secrets_file(tmp_path / "s") == expected


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param("A=1\njust-a-value-hunter2\n", ":2:", id="no-equals"),
        pytest.param("1A=hunter2\n", ":1:", id="bad-name"),
    ],
)
def test_a_malformed_line_is_refused_by_number_without_its_text(tmp_path: Path, text: str, where: str) -> None:
    (tmp_path / "s").write_text(text)
    with pytest.raises(UsageError) as exc:
        read_secrets_file(tmp_path / "s")
    assert where in str(exc.value) and "hunter2" not in str(exc.value)


def test_the_file_wins_over_the_environment_and_every_missing_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("A=from-file\n")
    env = {SECRETS_FILE_ENV: str(tmp_path / "s"), "A": "from-env", "B": "b"}
    assert gather(_workflow(x=["A"], y=["B"]), env).values == {"A": "from-file", "B": "b"}
    with pytest.raises(UsageError) as exc:
        gather(_workflow(x=["A", "C"], y=["D"]), env, resume=True)
    text = str(exc.value)
    assert "step 'x' needs secret 'C'" in text and "step 'y' needs secret 'D'" in text
    assert str(tmp_path / "s") in text and "a resume needs them again" in text


@pytest.mark.parametrize(
    ("names", "why"),
    [
        pytest.param(["bad-name"], "not valid", id="dash"),
        pytest.param(["HETFLOW_X"], "HETFLOW_", id="reserved-prefix"),
        pytest.param(["A", "A"], "twice", id="twice"),
    ],
)
def test_secret_names_are_checked_in_the_workflow(names: list[str], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Step.model_validate({"image": "busybox", "secrets": names})


def test_masking_replaces_every_value_longest_first() -> None:
    activate(Secrets({"A": "abc", "B": "abcdef"}))
    assert mask("x abcdef y abc z") == "x *** y *** z"
    assert mask("nothing here") == "nothing here"


def test_scrubbing_rewrites_an_attempts_logs_and_its_ranks_only(tmp_path: Path) -> None:
    log, rank, other = tmp_path / "s.1.log", tmp_path / "s.1.rank1.log", tmp_path / "s.2.log"
    for p in (log, rank, other):
        p.write_text("2026-01-01T00:00:00Z stdout F token is s3cr3t-v\n")
    log.chmod(0o640)
    activate(Secrets({"T": "s3cr3t-v"}))
    scrub_logs(log)
    assert log.read_text().endswith("token is ***\n") and rank.read_text().endswith("token is ***\n")
    assert "s3cr3t-v" in other.read_text()  # another attempt's log is that attempt's to scrub
    assert log.stat().st_mode & 0o777 == 0o640


def test_digests_are_salted_per_home_and_change_with_the_value(tmp_path: Path) -> None:
    one = secret_digests(["T"], tmp_path / "h1", Secrets({"T": "v1"}))
    assert one == secret_digests(["T"], tmp_path / "h1", Secrets({"T": "v1"}))  # the salt is kept
    assert one != secret_digests(["T"], tmp_path / "h1", Secrets({"T": "v2"}))
    assert one != secret_digests(["T"], tmp_path / "h2", Secrets({"T": "v1"}))  # another home, another salt
    assert "v1" not in str(one) and secret_digests(["T"], tmp_path / "h1", Secrets()) == {}
    assert (tmp_path / "h1" / "secrets.salt").stat().st_mode & 0o777 == 0o600


def test_podman_mounts_each_secret_0400_for_the_steps_user_on_a_tmpfs() -> None:
    spec = ContainerSpec(
        name="hf-r-s-1", image="i", command=(), user="1000:1001", labels={}, env={}, secrets={"TOKEN": "v4lue-x"}
    )
    args = run_args(spec)
    assert "hf-r-s-1-TOKEN,type=mount,target=TOKEN,uid=1000,gid=1001,mode=0400" in args
    assert any(a.startswith("/run/secrets:") for a in args)
    assert "v4lue-x" not in args and "v4lue-x" not in repr(spec)

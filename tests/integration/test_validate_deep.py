"""`hetflow validate` finds what `hetflow run` would refuse, all at once (issue 25: it said
"valid" for a glob that matches nothing and an image that does not exist, and run then
reported them one per try): a data glob, an empty S3 prefix (a real S3 server on loopback),
an image missing from the local store, one missing from a real registry (Debian's
docker-registry on loopback), a request no node here meets.  `--offline` asks neither the
registry nor S3 and says what it left unchecked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow
from tests.integration.registry import Registry, start_registry
from tests.integration.s3server import CREDENTIALS, s3_server


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as url:
        yield url


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with start_registry(tmp_path_factory.mktemp("reg")) as reg:
        yield reg


def _workflow(endpoint: str, registry: Registry) -> str:
    return f"""apiVersion: hetflow/v1
name: deep
data:
  texts: nothing/*.txt
  remote: {{url: "s3://validate-bucket/empty/", endpoint: "{endpoint}"}}
steps:
  a:
    image: localhost/hetflow-test/no-such-image:1
    command: [true]
  b:
    image: {registry.host}/nobody/here:2
    command: [true]
  c:
    image: {BUSYBOX}
    command: [true]
    resources: {{gpus: 64}}
  d:
    image: {BUSYBOX}
    command: [true]
"""


def _problems(hf: Hetflow, wf: Path, *args: str) -> list[tuple[int, str, str]]:
    done = hf("validate", "--json", *args, str(wf), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["valid"] is False
    return [(p["line"], p["severity"], p["message"]) for p in data["problems"]]


def test_validate_reports_every_problem_run_would_meet_at_once(
    hf: Hetflow, tmp_path: Path, endpoint: str, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    hf.env.update(CREDENTIALS)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="validate-bucket")
    wf = tmp_path / "wf.yaml"
    wf.write_text(_workflow(endpoint, registry))

    found = _problems(hf, wf)
    lines = [line for line, sev, _ in found if sev == "error"]  # in the file's order, all in one answer
    assert lines == [4, 5, 8, 11, 16], found  # glob, S3 prefix, local image, registry image, GPUs
    said = " | ".join(msg for _, _, msg in found)
    assert "matched no file" in said and "holds no object" in said
    assert "no-such-image:1' is not in podman's image store" in said
    assert "nobody/here:2' was not found in its registry" in said
    assert "64 GPUs" in said

    offline = _problems(hf, wf, "--offline")
    assert sorted(line for line, sev, _ in offline if sev == "error") == [4, 8, 16]
    notes = [msg for _, sev, msg in offline if sev == "note" and msg.startswith("not checked offline")]
    assert len(notes) == 1 and "data 'remote'" in notes[0] and f"{registry.host}/nobody/here:2" in notes[0]


def test_a_workflow_run_would_take_is_valid(hf: Hetflow, tmp_path: Path) -> None:
    wf = tmp_path / "ok.yaml"
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("x\n")
    wf.write_text(
        f"apiVersion: hetflow/v1\nname: ok\ndata:\n  texts: texts/*.txt\nsteps:\n"
        f"  a:\n    image: {BUSYBOX}\n    command: [true]\n    inputs: {{t: data.texts}}\n"
    )
    done = hf("validate", "--json", str(wf))
    assert json.loads(done.stdout)["valid"] is True

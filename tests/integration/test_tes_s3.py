"""s3:// inputs and outputs of TES tasks against a real S3-compatible server on loopback
(moto's server mode, reached through s3fs as a user's endpoint is): the endpoint in the
server's tes.yaml, the credentials in its environment; py-tes creates the tasks.  A file and
a folder come in, a file and a glob go out; a missing object ends the task SYSTEM_ERROR
naming it; a server without ``s3:`` says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tes  # py-tes, the GA4GH client (the test extra)

from tests.integration.s3server import CREDENTIALS, s3_server
from tests.integration.teskit import Server, serving, wait_end

pytestmark = pytest.mark.integration


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    with s3_server(tmp_path / "moto.log") as url:
        yield url


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3

    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    return boto3.client("s3", endpoint_url=endpoint)


@pytest.fixture
def server(tmp_path: Path, endpoint: str, s3: Any) -> Iterator[Server]:
    # the endpoint comes from tes.yaml only: no AWS_ENDPOINT_URL to fall back on
    with serving(tmp_path, config=f"s3: {{endpoint: '{endpoint}'}}\n", env=CREDENTIALS) as s:
        yield s


def test_s3_inputs_and_outputs(server: Server, s3: Any) -> None:
    s3.create_bucket(Bucket="tes-in")
    s3.create_bucket(Bucket="tes-out")
    s3.put_object(Bucket="tes-in", Key="a.txt", Body=b"alpha\n")
    s3.put_object(Bucket="tes-in", Key="set/x.txt", Body=b"x\n")
    s3.put_object(Bucket="tes-in", Key="set/deep/y.txt", Body=b"y\n")
    client = tes.HTTPClient(server.url, timeout=30)
    assert "s3://" in client.get_service_info().storage
    script = (
        "cat /in/a.txt /in/set/x.txt /in/set/deep/y.txt > /out/all.txt; echo one > /out/g1.log; echo two > /out/g2.log"
    )
    task = tes.Task(
        executors=[tes.Executor(image="alpine", command=["sh", "-c", script])],
        inputs=[tes.Input(url="s3://tes-in/a.txt", path="/in/a.txt"),
                tes.Input(url="s3://tes-in/set", path="/in/set", type="DIRECTORY")],
        outputs=[tes.Output(url="s3://tes-out/res/all.txt", path="/out/all.txt"),
                 tes.Output(url="s3://tes-out/logs", path="/out/*.log", path_prefix="/out")],
    )  # fmt: skip
    done = wait_end(client, client.create_task(task))
    assert done.state == "COMPLETE", done.logs
    body = s3.get_object(Bucket="tes-out", Key="res/all.txt")["Body"].read()
    assert body == b"alpha\nx\ny\n"
    assert s3.get_object(Bucket="tes-out", Key="logs/g1.log")["Body"].read() == b"one\n"
    assert s3.get_object(Bucket="tes-out", Key="logs/g2.log")["Body"].read() == b"two\n"
    urls = sorted(o.url for o in done.logs[-1].outputs)
    assert urls == ["s3://tes-out/logs/g1.log", "s3://tes-out/logs/g2.log", "s3://tes-out/res/all.txt"]
    assert "input /in/set: 2 object(s) from s3://tes-in/set" in done.logs[-1].system_logs

    missing = tes.Task(
        executors=[tes.Executor(image="alpine", command=["true"])],
        inputs=[tes.Input(url="s3://tes-in/nope.txt", path="/in/nope.txt")],
    )
    failed = wait_end(client, client.create_task(missing))
    assert failed.state == "SYSTEM_ERROR"
    assert any("inputs[0]: cannot read s3://tes-in/nope.txt" in line for line in failed.logs[-1].system_logs)
    assert not failed.logs[-1].logs  # no executor ran


def test_no_s3_configured_says_so(tmp_path: Path) -> None:
    with serving(tmp_path, config="file_roots: []\n", env={}) as s:
        client = tes.HTTPClient(s.url, timeout=30)
        task = tes.Task(
            executors=[tes.Executor(image="alpine", command=["true"])],
            inputs=[tes.Input(url="s3://tes-in/a.txt", path="/in/a.txt")],
        )
        done = wait_end(client, client.create_task(task))
        assert done.state == "SYSTEM_ERROR"
        assert any("no S3 endpoint configured (s3: in its --config)" in line for line in done.logs[-1].system_logs)

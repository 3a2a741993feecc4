"""S3 data in and out against a real S3-compatible server on loopback (moto's server
mode, over HTTP, through s3fs as a user's bucket would be reached): objects under a prefix
are listed at submit, downloaded into the run and fanned out over; the result is
published under another prefix; an unreadable bucket is refused before any step starts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.s3server import CREDENTIALS, s3_server


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as url:
        yield url


@pytest.fixture
def s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3

    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    return boto3.client("s3", endpoint_url=endpoint)


WF = f"""
apiVersion: hetflow/v1
name: s3fan
data:
  docs: s3://in-bucket/docs/
steps:
  count:
    image: {BUSYBOX}
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    command: [sh, -c, "wc -c < /in/doc/{{{{ item.name }}}} > /out/n.txt"]
    outputs: [n.txt]
  total:
    image: {BUSYBOX}
    inputs: {{n: count/n.txt, all: data.docs}}
    command: [sh, -c, "cat /in/n/*/n.txt > /out/sizes.txt; ls /in/all/sub >> /out/sizes.txt"]
    outputs: [sizes.txt]
    publish: {{to: "s3://out-bucket/results/"}}
"""


def test_s3_data_in_fanned_out_and_published_back(hf: Hetflow, tmp_path: Path, s3: Any, endpoint: str) -> None:
    s3.create_bucket(Bucket="in-bucket")
    s3.create_bucket(Bucket="out-bucket")
    s3.put_object(Bucket="in-bucket", Key="docs/a.txt", Body=b"12345")
    s3.put_object(Bucket="in-bucket", Key="docs/sub/b.txt", Body=b"1234567890")
    s3.put_object(Bucket="in-bucket", Key="other/c.txt", Body=b"not listed")
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    hf("run", write(tmp_path, WF), extra_env=env)
    run = hf.show(hf.last_run())
    assert run["state"] == "succeeded"
    assert sorted(s["step"] for s in run["steps"]) == ["count.0", "count.1", "total"]
    body = s3.get_object(Bucket="out-bucket", Key="results/sizes.txt")["Body"].read().decode()
    assert body.split() == ["5", "10", "b.txt"]
    # the objects were downloaded into the run's own directory, and hashed
    assert (Path(run["workdir"]) / "data" / "docs" / "sub" / "b.txt").read_bytes() == b"1234567890"
    # the same result again is no conflict
    hf("run", write(tmp_path, WF), extra_env=env)
    # publishing under a key that exists (with other bytes) is refused unless told
    s3.put_object(Bucket="out-bucket", Key="results/sizes.txt", Body=b"older")
    s3.put_object(Bucket="in-bucket", Key="docs/a.txt", Body=b"123456")
    proc = hf("run", write(tmp_path, WF), extra_env=env, check=False)
    assert proc.returncode != 0
    total = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["total"]
    assert "s3://out-bucket/results/sizes.txt already exists" in total["reason"]
    assert s3.get_object(Bucket="out-bucket", Key="results/sizes.txt")["Body"].read() == b"older"


def test_an_unreadable_bucket_is_refused_before_any_step(hf: Hetflow, tmp_path: Path, s3: Any, endpoint: str) -> None:
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    proc = hf("run", write(tmp_path, WF.replace("in-bucket", "no-such-bucket")), extra_env=env, check=False)
    assert proc.returncode == 2
    assert "data 'docs': cannot list s3://no-such-bucket/docs/" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []
    s3.create_bucket(Bucket="empty-bucket")
    proc = hf("run", write(tmp_path, WF.replace("in-bucket", "empty-bucket")), extra_env=env, check=False)
    assert proc.returncode == 2 and "s3://empty-bucket/docs/ holds no object" in proc.stderr


def test_s3_publish_replaces_its_own_object_and_refuses_one_changed_since(
    hf: Hetflow, tmp_path: Path, s3: Any, endpoint: str
) -> None:
    s3.create_bucket(Bucket="rule-in")
    s3.create_bucket(Bucket="rule-out")
    s3.put_object(Bucket="rule-in", Key="docs/a.txt", Body=b"12345")
    s3.put_object(Bucket="rule-in", Key="docs/sub/b.txt", Body=b"1")
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    wf = write(tmp_path, WF.replace("in-bucket", "rule-in").replace("out-bucket", "rule-out"))

    def published() -> bytes:
        body: bytes = s3.get_object(Bucket="rule-out", Key="results/sizes.txt")["Body"].read()
        return body

    hf("run", wf, extra_env=env)
    assert published().split() == [b"5", b"1", b"b.txt"]
    # change an input and rerun: the workflow's own object (its recorded ETag unchanged) is replaced
    s3.put_object(Bucket="rule-in", Key="docs/a.txt", Body=b"1234567")
    hf("run", wf, extra_env=env)
    assert published().split() == [b"7", b"1", b"b.txt"]
    # an object changed since it was published is refused, and kept
    s3.put_object(Bucket="rule-out", Key="results/sizes.txt", Body=b"someone else's")
    s3.put_object(Bucket="rule-in", Key="docs/a.txt", Body=b"12")
    proc = hf("run", wf, extra_env=env, check=False)
    total = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["total"]
    assert proc.returncode != 0
    assert "s3://rule-out/results/sizes.txt already exists and changed since run" in total["reason"]
    assert published() == b"someone else's"


class Sneaky:
    """The real s3fs file system, but someone else (boto3) writes the key right after
    hetflow has checked it: the conditional upload must notice."""

    def __init__(self, fs: Any, s3: Any, bucket: str, key: str) -> None:
        self.fs, self.s3, self.bucket, self.key, self.armed = fs, s3, bucket, key, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)

    def exists(self, path: str) -> bool:
        there: bool = self.fs.exists(path)
        if self.armed and not there:
            self.armed = False
            self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=b"sneaked in")
        return there

    def info(self, path: str) -> Any:
        answer = self.fs.info(path)
        if self.armed:
            self.armed = False
            self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=b"sneaked in")
        return answer


@pytest.mark.parametrize("existing", [False, True], ids=["new-key", "own-object"])
def test_s3_an_object_written_after_the_check_fails_the_publish_on_real_s3(
    tmp_path: Path, s3: Any, endpoint: str, existing: bool
) -> None:
    from hetflow.execute.data.inputs import s3_filesystem
    from hetflow.execute.data.publishing.publish import PublishError, Publishing
    from hetflow.spec import Publish, Step
    from hetflow.state import Store

    bucket = f"race-{'own' if existing else 'new'}"
    s3.create_bucket(Bucket=bucket)
    out = tmp_path / "out"
    out.mkdir()
    step = Step(image="i", outputs=("r.txt",), publish=(Publish(to=f"s3://{bucket}/p/"),))
    store = Store(tmp_path / "home" / "state.db")
    fs = s3_filesystem(endpoint)
    if existing:
        (out / "r.txt").write_text("one\n")
        Publishing(store, "run-1", "wf", s3=lambda e: fs)("s", step, out, 0, 0)
    (out / "r.txt").write_text("two\n")
    sneaky = Sneaky(fs, s3, bucket, "p/r.txt")
    with pytest.raises(PublishError, match="was written by someone else while this run published it"):
        Publishing(store, "run-2", "wf", s3=lambda e: sneaky)("s", step, out, 0, 0)
    assert s3.get_object(Bucket=bucket, Key="p/r.txt")["Body"].read() == b"sneaked in"


def test_s3_publish_goes_to_the_endpoint_the_data_declares(hf: Hetflow, tmp_path: Path, s3: Any, endpoint: str) -> None:
    """No AWS_ENDPOINT_URL: the data entry's `endpoint:` is the only word on where S3 is, and
    the publish to another bucket goes there too (it went to s3.amazonaws.com before)."""
    s3.create_bucket(Bucket="ep-in")
    s3.create_bucket(Bucket="ep-out")
    s3.put_object(Bucket="ep-in", Key="docs/a.txt", Body=b"12345")
    s3.put_object(Bucket="ep-in", Key="docs/sub/b.txt", Body=b"1")
    declared = WF.replace("docs: s3://in-bucket/docs/", f'docs: {{url: "s3://ep-in/docs/", endpoint: "{endpoint}"}}')
    hf.env.pop("AWS_ENDPOINT_URL", None)
    hf("run", write(tmp_path, declared.replace("out-bucket", "ep-out")), extra_env=CREDENTIALS)
    body = s3.get_object(Bucket="ep-out", Key="results/sizes.txt")["Body"].read()
    assert body.split() == [b"5", b"1", b"b.txt"]


PAIR = f"""
apiVersion: hetflow/v1
name: s3pair
params: {{v: one}}
steps:
  make:
    image: {BUSYBOX}
    command: [sh, -c, "echo a-{{{{ params.v }}}} > /out/a.txt; echo b-{{{{ params.v }}}} > /out/b.txt"]
    outputs: [a.txt, b.txt]
    publish: {{to: "s3://pair-out/p/"}}
"""


def test_s3_publish_checks_every_key_before_writing_any(hf: Hetflow, tmp_path: Path, s3: Any, endpoint: str) -> None:
    """Issue 37: an object changed since it was published fails the step with nothing
    written, not after the keys before it were replaced."""
    s3.create_bucket(Bucket="pair-out")
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    wf = write(tmp_path, PAIR)

    def body(key: str) -> bytes:
        data: bytes = s3.get_object(Bucket="pair-out", Key=key)["Body"].read()
        return data

    hf("run", wf, extra_env=env)
    assert (body("p/a.txt"), body("p/b.txt")) == (b"a-one\n", b"b-one\n")
    s3.put_object(Bucket="pair-out", Key="p/b.txt", Body=b"someone else's")
    proc = hf("run", wf, "-p", "v=two", extra_env=env, check=False)
    assert proc.returncode != 0
    make = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["make"]
    assert "s3://pair-out/p/b.txt already exists and changed since run" in make["reason"], make["reason"]
    assert body("p/a.txt") == b"a-one\n"  # a.txt may be replaced, but is not while b.txt is refused
    assert body("p/b.txt") == b"someone else's"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="pair-out").get("Contents", [])]
    assert sorted(keys) == ["p/a.txt", "p/b.txt"]  # no kept copies left behind

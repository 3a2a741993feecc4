"""What the proxy trusts, on loopback with real HTTP (issue 38's lower findings): every
Authorization header is parsed without a 500, the upstream's credentials go only to its own
host or a configured token host, a manifest body must be the JSON of the media type it is
labelled with, and one local user cannot use up a machine type's tokens."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hetflow.images import OCI_INDEX, OCI_MANIFEST
from hetflow.inventory import profile_node
from hetflow.registry import FakeRegistry, MachineTypeDecl, RunningProxy, Settings, start_in_thread

pytestmark = pytest.mark.integration

REPO = "lab/app"
TYPE = "x86-64-v2"


@dataclass
class Upstream:
    """The fake upstream, recording the host and Authorization of every request it gets."""

    fake: FakeRegistry
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (host, path, authorization)

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.seen.append((request.url.host, request.url.path, request.headers.get("authorization", "")))
            return self.fake.handle(request)

        return httpx.MockTransport(handle)


@contextmanager
def proxy(tmp_path: Path, upstream: Upstream, **changes: object) -> Iterator[RunningProxy]:
    settings = Settings(
        upstream="http://upstream.test",
        state_dir=tmp_path / "state",
        machine_types=(MachineTypeDecl(profile=TYPE),),
        **changes,  # type: ignore[arg-type]
    )
    running = start_in_thread(settings, transport=upstream.transport())
    try:
        yield running
    finally:
        running.stop()


def bearer(running: RunningProxy, state: Path) -> dict[str, str]:
    token = (state / "tokens" / TYPE).read_text().strip()
    got = httpx.get(f"{running.url}/token", auth=(TYPE, token), timeout=30)
    assert got.status_code == 200, got.text
    return {"Authorization": f"Bearer {got.json()['token']}"}


def raw_get(running: RunningProxy, path: str, authorization: bytes) -> tuple[int, bytes]:
    """GET ``path`` with the Authorization header's bytes as given (httpx refuses non-ASCII)."""
    host, port = running.host.split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {running.host}\r\nConnection: close\r\n".encode()
    request += b"Authorization: " + authorization + b"\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _b64(raw: bytes) -> bytes:
    return base64.b64encode(raw)


# (header bytes, what the answer must name)
BAD_HEADERS = [
    pytest.param("Basic m\u00fcller:pw".encode("latin-1"), "ASCII", id="raw-non-ascii"),
    pytest.param(b"Basic " + _b64("m\u00fcller:pw".encode("latin-1")), "UTF-8", id="latin1-login"),
    pytest.param(b"Basic " + _b64(b"no-colon"), "':'", id="no-colon"),
    pytest.param(b"Basic %%%not-base64", "base64", id="not-base64"),
    pytest.param(b"Basic ", "empty", id="empty"),
    pytest.param(b"Bearer \xff\xfe", "bearer", id="non-ascii-bearer"),
]


@pytest.mark.parametrize(("header", "named"), BAD_HEADERS)
@pytest.mark.parametrize("path", ["/token", "/v2/", f"/v2/{REPO}/manifests/v1", "/hetflow/v1/machine-types"])
def test_every_malformed_authorization_header_is_a_4xx_naming_what_is_wrong(
    tmp_path: Path, path: str, header: bytes, named: str
) -> None:
    # Before issue 38: a non-ASCII Basic login on /token was a 500 with a traceback.
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    with proxy(tmp_path, Upstream(fake), admin_token="a" * 20) as running:  # every path then needs auth
        status, body = raw_get(running, path, header)
        assert status in (400, 401), (status, body)
        if path == "/token":  # the one endpoint that reads Basic credentials
            message = json.loads(body)["errors"][0]["message"]
            assert named.lower() in message.lower(), message
            assert "Authorization" in message, message


def _bearer_upstream(realm_host: str) -> FakeRegistry:
    """An upstream that wants credentials, traded for a bearer at ``realm_host``'s /token."""
    fake = FakeRegistry(auth="bearer", host=realm_host)
    fake.push_builds(REPO, "v1", {"generic": []})
    return fake


def test_upstream_credentials_go_to_no_token_host_but_the_upstreams_own(tmp_path: Path) -> None:
    # Before issue 38: the proxy sent its upstream Basic credentials to whatever realm the
    # upstream's challenge named.
    upstream = Upstream(_bearer_upstream("evil.test"))
    creds = {"upstream_username": "robot", "upstream_password": "hunter2-hunter2", "admin_token": "a" * 20}
    with proxy(tmp_path, upstream, **creds) as running:
        got = httpx.get(f"{running.url}/v2/{REPO}/manifests/v1", headers=bearer(running, tmp_path / "state"))
        assert got.status_code == 502, got.text
        message = got.json()["errors"][0]["message"]
        assert "evil.test" in message and "upstream_token_hosts" in message, message
    leaked = [(host, path) for host, path, auth in upstream.seen if host != "upstream.test" and auth]
    assert leaked == [], f"credentials sent to {leaked}"
    assert not [host for host, _, _ in upstream.seen if host == "evil.test"]


def test_a_configured_token_host_gets_the_credentials(tmp_path: Path) -> None:
    upstream = Upstream(_bearer_upstream("auth.test"))
    settings = {
        "upstream_username": "robot",
        "upstream_password": "hunter2-hunter2",
        "admin_token": "a" * 20,
        "upstream_token_hosts": ("auth.test",),
    }
    with proxy(tmp_path, upstream, **settings) as running:
        got = httpx.get(f"{running.url}/v2/{REPO}/manifests/v1", headers=bearer(running, tmp_path / "state"))
        assert got.status_code == 200, got.text
    assert ("auth.test", "/token") in [(host, path) for host, path, _ in upstream.seen]


def test_the_upstreams_own_host_gets_the_credentials_for_its_bearer(tmp_path: Path) -> None:
    upstream = Upstream(_bearer_upstream("upstream.test"))
    creds = {"upstream_username": "robot", "upstream_password": "hunter2-hunter2", "admin_token": "a" * 20}
    with proxy(tmp_path, upstream, **creds) as running:
        got = httpx.get(f"{running.url}/v2/{REPO}/manifests/v1", headers=bearer(running, tmp_path / "state"))
        assert got.status_code == 200, got.text


def test_an_https_upstreams_credentials_never_go_over_plain_http(tmp_path: Path) -> None:
    upstream = Upstream(_bearer_upstream("upstream.test"))  # its realm: http://upstream.test/token
    creds = {"upstream_username": "robot", "upstream_password": "hunter2-hunter2", "admin_token": "a" * 20}
    settings = Settings(
        upstream="https://upstream.test",
        state_dir=tmp_path / "state",
        machine_types=(MachineTypeDecl(profile=TYPE),),
        **creds,  # type: ignore[arg-type]
    )
    running = start_in_thread(settings, transport=upstream.transport())
    try:
        got = httpx.get(f"{running.url}/v2/{REPO}/manifests/v1", headers=bearer(running, tmp_path / "state"))
    finally:
        running.stop()
    assert got.status_code == 502, got.text
    assert "plain HTTP" in got.json()["errors"][0]["message"]
    assert [path for _, path, _ in upstream.seen if path == "/token"] == []


HTML = b"<!doctype html><html><body>Sign in to continue</body></html>"
LABELLED = [
    pytest.param(HTML, OCI_MANIFEST, "JSON", id="html-as-oci-manifest"),
    pytest.param(HTML, OCI_INDEX, "JSON", id="html-as-oci-index"),
    pytest.param(b'["a", "list"]', OCI_MANIFEST, "object", id="json-list-as-manifest"),
    pytest.param(b'{"schemaVersion": 2}', OCI_INDEX, "manifests", id="index-without-manifests"),
    pytest.param(b'{"schemaVersion": 2, "manifests": []}', OCI_MANIFEST, "config", id="index-labelled-manifest"),
    pytest.param(
        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode(),
        OCI_MANIFEST,
        OCI_INDEX,
        id="body-says-another-type",
    ),
]


@pytest.mark.parametrize(("body", "label", "named"), LABELLED)
@pytest.mark.parametrize("by", ["tag", "digest"])
def test_a_manifest_body_that_is_not_its_labelled_type_is_a_502_never_served(
    tmp_path: Path, body: bytes, label: str, named: str, by: str
) -> None:
    # Before issue 38: an HTML body labelled as a manifest was served as-is, with a 200.
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    digest = fake.put_manifest(REPO, body, label, tag="login")
    with proxy(tmp_path, Upstream(fake)) as running:
        headers = bearer(running, tmp_path / "state")
        ref = "login" if by == "tag" else digest
        for _ in range(2):  # nothing was cached the first time either
            got = httpx.get(f"{running.url}/v2/{REPO}/manifests/{ref}", headers=headers, timeout=30)
            assert got.status_code == 502, got.text
            error = got.json()["errors"][0]
            assert error["code"] == "MANIFEST_INVALID", error
            assert named in error["message"], error["message"]
        fine = httpx.get(f"{running.url}/v2/{REPO}/manifests/v1", headers=headers, timeout=30)
        assert fine.status_code == 200, fine.text


# Registers the node on stdin at the proxy (argv 1) until refused or argv 2 times, as
# whoever runs it; prints how many were made and the refusal.  Debian's python3: the test
# user's virtual environment lies under /root, which another user cannot read.
REGISTER_LOOP = """
import http.client, json, sys
host, port = sys.argv[1].rsplit(":", 1)
node, made = sys.stdin.read(), 0
conn = http.client.HTTPConnection(host, int(port), timeout=60)
for _ in range(int(sys.argv[2])):
    conn.request("POST", "/hetflow/v1/machine-types", body=node, headers={"Content-Type": "application/json"})
    got = conn.getresponse()
    body = got.read()
    if got.status not in (200, 201):
        print(json.dumps({"made": made, "status": got.status, "body": body.decode()}))
        break
    made += 1
else:
    print(json.dumps({"made": made, "status": None, "body": ""}))
"""
NOBODY = 65534


def register_as(uid: int, running: RunningProxy, node: str, times: int) -> dict[str, object]:
    done = subprocess.run(
        ["/usr/bin/python3", "-c", REGISTER_LOOP, running.host, str(times)],
        input=node,
        capture_output=True,
        text=True,
        timeout=600,
        user=uid,
        group=uid,
        extra_groups=[],
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root and python3")
def test_one_local_user_cannot_use_up_a_machine_types_tokens(tmp_path: Path) -> None:
    # Before issue 38: on an open loopback proxy, one local user registered the type's 1,000
    # tokens and nobody else could log in a node of that hardware.
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    node = profile_node("haswell-cpu").model_dump_json()
    with proxy(tmp_path, Upstream(fake)) as running:  # loopback, no admin token: open to local users
        limit = 100  # limits.max_tokens_per_holder's default
        grabbed = register_as(NOBODY, running, node, 1001)
        assert grabbed["status"] == 403, grabbed
        assert grabbed["made"] == limit, grabbed
        assert "max_tokens_per_holder" in str(grabbed["body"]) and f"uid {NOBODY}" in str(grabbed["body"])
        mine = httpx.post(f"{running.url}/hetflow/v1/machine-types", content=node, timeout=30)
        assert mine.status_code == 200, mine.text  # another user's node still joins the type
        listed = json.loads(
            _hetflow("registry", "token", "list", "--state-dir", str(tmp_path / "state"), "--json").stdout
        )
        holders = [t["holder"] for t in listed if t["machine_type"] == mine.json()["machine_type"]]
        assert holders.count(f"uid:{NOBODY}") == limit and holders.count(f"uid:{os.geteuid()}") == 1


def _hetflow(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "hetflow.cli.main", *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert done.returncode == 0, f"hetflow {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


def test_one_token_is_revoked_by_itself_and_its_bearers_die_with_it(tmp_path: Path) -> None:
    # Before issue 38: tokens were revocable only all of a machine type at once.
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    node = profile_node("haswell-cpu").model_dump_json()
    with proxy(tmp_path, Upstream(fake)) as running:
        made = [httpx.post(f"{running.url}/hetflow/v1/machine-types", content=node, timeout=30).json() for _ in "ab"]
        kind = made[0]["machine_type"]
        bearers = []
        for m in made:
            got = httpx.get(f"{running.url}/token", auth=(kind, m["token"]), timeout=30)
            assert got.status_code == 200, got.text
            bearers.append({"Authorization": f"Bearer {got.json()['token']}"})
        done = _hetflow(
            "registry", "token", "revoke", made[0]["token"], "--state-dir", str(tmp_path / "state"), "--json"
        )
        revoked = json.loads(done.stdout)
        assert [(r["machine_type"], r["holder"]) for r in revoked["revoked"]] == [(kind, f"uid:{os.geteuid()}")]
        assert made[0]["token"] not in done.stdout + done.stderr  # the secret is not echoed
        manifest = f"{running.url}/v2/{REPO}/manifests/v1"
        assert httpx.get(manifest, headers=bearers[0], timeout=30).status_code == 401
        assert httpx.get(f"{running.url}/token", auth=(kind, made[0]["token"]), timeout=30).status_code == 401
        assert httpx.get(manifest, headers=bearers[1], timeout=30).status_code == 200  # the other token lives
        again = _hetflow(
            "registry", "token", "revoke", made[0]["token"], "--state-dir", str(tmp_path / "state"), check=False
        )
        assert again.returncode == 2 and "no token" in again.stderr and "Traceback" not in again.stderr

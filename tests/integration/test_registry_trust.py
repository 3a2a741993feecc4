"""What the proxy trusts, on loopback with real HTTP (issue 38's lower findings): every
Authorization header is parsed without a 500, the upstream's credentials go only to its own
host or a configured token host, a manifest body must be the JSON of the media type it is
labelled with, and one local user cannot use up a machine type's tokens."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hetflow.images import OCI_INDEX, OCI_MANIFEST
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

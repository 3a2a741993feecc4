"""The proxy served by uvicorn on loopback (fake upstream): what an HTTP client sees
when a large blob turns out corrupted mid-stream, and the bearer flow as
``hetflow.images.distribution.client.RegistryClient`` (written apart from the proxy) drives it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetflow.images import AuthError, NotFoundError, RegistryClient
from hetflow.registry import FakeRegistry, MachineTypeDecl, RunningProxy, Settings, start_in_thread

REPO = "lab/big"
LAYER = os.urandom(3 * 1024 * 1024 + 17)  # several of the proxy's read chunks, not a round size
BUFFER = 256 * 1024


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeRegistry, RunningProxy, Path]]:
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": [], "v3": ["x86-64-v3"]})
    fake.push_image(REPO, "big", layer=LAYER, tag="big")
    settings = Settings(
        upstream="http://upstream.test",
        state_dir=tmp_path / "state",
        machine_types=(MachineTypeDecl(profile="x86-64-v2"), MachineTypeDecl(profile="haswell-cpu")),
        verify_buffer_bytes=BUFFER,
    )
    proxy = start_in_thread(settings, transport=fake.transport())
    try:
        yield fake, proxy, tmp_path / "state"
    finally:
        proxy.stop()


def _client(proxy: RunningProxy, state: Path, machine_type: str) -> RegistryClient:
    token = (state / "tokens" / machine_type).read_text().strip()
    return RegistryClient(proxy.url, username=machine_type, password=token)


def _bearer(proxy: RunningProxy, state: Path, machine_type: str) -> dict[str, str]:
    token = (state / "tokens" / machine_type).read_text().strip()
    got = httpx.get(f"{proxy.url}/token", auth=(machine_type, token))
    return {"Authorization": f"Bearer {got.json()['token']}"}


LAYER_DIGEST = "sha256:" + hashlib.sha256(LAYER).hexdigest()


def test_a_large_blob_streams_verified_and_is_cached(served: tuple[FakeRegistry, RunningProxy, Path]) -> None:
    fake, proxy, state = served
    with _client(proxy, state, "x86-64-v2") as client:
        assert client.get_blob(REPO, LAYER_DIGEST) == LAYER
        fake.requests.clear()
        assert client.get_blob(REPO, LAYER_DIGEST) == LAYER
    assert not [r for r in fake.requests if "/blobs/" in r[1]]
    assert (state / "cache" / "blobs" / "sha256" / LAYER_DIGEST.removeprefix("sha256:")).stat().st_size == len(LAYER)


def test_a_large_corrupted_upstream_blob_is_a_502_never_a_body(served: tuple[FakeRegistry, RunningProxy, Path]) -> None:
    fake, proxy, state = served
    fake.corrupt(LAYER_DIGEST)
    got = httpx.get(f"{proxy.url}/v2/{REPO}/blobs/{LAYER_DIGEST}", headers=_bearer(proxy, state, "x86-64-v2"))
    assert got.status_code == 502  # verified into the cache before a byte goes out (fetch.py)
    assert got.json()["errors"][0]["code"] == "DIGEST_INVALID"
    assert "gave up after 3 attempts" in got.json()["errors"][0]["message"]
    cache = state / "cache" / "blobs" / "sha256"
    assert not [p for p in cache.glob("**/*") if p.is_file()]  # no partial file left behind


def test_a_large_blob_damaged_in_the_cache_is_cut_short_never_complete(
    served: tuple[FakeRegistry, RunningProxy, Path],
) -> None:
    _, proxy, state = served
    url, headers = f"{proxy.url}/v2/{REPO}/blobs/{LAYER_DIGEST}", _bearer(proxy, state, "x86-64-v2")
    assert httpx.get(url, headers=headers).status_code == 200
    cached = state / "cache" / "blobs" / "sha256" / LAYER_DIGEST.removeprefix("sha256:")
    cached.write_bytes(cached.read_bytes()[:-1] + b"X")
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200  # the headers went out before the last byte was read
        assert response.headers["content-length"] == str(len(LAYER))
        for chunk in response.iter_raw():
            received += chunk
    assert len(received) < len(LAYER)
    assert not cached.exists()


def test_registry_client_gets_each_types_view_through_the_bearer_flow(
    served: tuple[FakeRegistry, RunningProxy, Path],
) -> None:
    fake, proxy, state = served
    builds = {}
    for machine_type in ("x86-64-v2", "haswell-cpu"):
        with _client(proxy, state, machine_type) as client:
            body, media_type, digest = client.get_manifest(REPO, "v1")
            assert media_type == "application/vnd.oci.image.index.v1+json"
            assert digest == "sha256:" + hashlib.sha256(body).hexdigest()
            (entry,) = json.loads(body)["manifests"]
            builds[machine_type] = fake.manifests[REPO][entry["digest"]]
    assert builds["x86-64-v2"] != builds["haswell-cpu"]


def test_registry_client_reports_auth_and_not_found(served: tuple[FakeRegistry, RunningProxy, Path]) -> None:
    _, proxy, state = served
    with RegistryClient(proxy.url, username="x86-64-v2", password="hft_wrong") as client, pytest.raises(AuthError):
        client.get_manifest(REPO, "v1")
    with _client(proxy, state, "x86-64-v2") as client, pytest.raises(NotFoundError, match="manifest unknown"):
        client.get_manifest(REPO, "nope")

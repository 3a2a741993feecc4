"""An image's config blob is read with the cap manifests have (issue 38): `hetflow images
inspect` and `build-index` refuse one the manifest says is too big before reading it, and
stop at the cap when the registry sends more than the manifest said."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import httpx
import pytest

from hetflow.images import (
    OCI_CONFIG,
    OCI_MANIFEST,
    BadDocumentError,
    ImageSource,
    RegistryError,
    build_index_image,
    inspect_image,
)

REPO = "lab/app"
CAP = 4 * 1024 * 1024
CONFIG = b'{"architecture": "amd64", "os": "linux"}'


class _Endless(httpx.SyncByteStream):
    """A config blob that goes on and on (stopped at 64 MiB, so a client that reads it all
    fails an assertion here rather than the machine's memory)."""

    def __init__(self) -> None:
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"architecture": "amd64", "pad": "'
        while self.sent < 64 * 1024 * 1024:
            self.sent += 65536
            yield b" " * 65536


def _registry(config: bytes | _Endless, declared: int | None = None) -> tuple[httpx.MockTransport, list[str]]:
    """One image whose config blob is ``config`` (its manifest says ``declared`` bytes)."""
    digest = "sha256:" + hashlib.sha256(config if isinstance(config, bytes) else CONFIG).hexdigest()
    size = declared if declared is not None else len(config if isinstance(config, bytes) else CONFIG)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": digest, "size": size},
            "layers": [],
        }
    ).encode()
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path.endswith("/manifests/v1"):
            return httpx.Response(200, headers={"Content-Type": OCI_MANIFEST}, content=manifest)
        if request.url.path == f"/v2/{REPO}/blobs/{digest}":
            if isinstance(config, bytes):
                return httpx.Response(200, content=config)
            return httpx.Response(200, stream=config)
        return httpx.Response(404, json={"errors": [{"code": "NOT_FOUND", "message": "no"}]})

    return httpx.MockTransport(handle), asked


def test_an_endless_config_blob_is_refused_at_the_cap_naming_the_blob_its_size_and_the_cap() -> None:
    endless = _Endless()
    transport, _ = _registry(endless)
    with pytest.raises(RegistryError) as caught:
        inspect_image(f"r.test/{REPO}:v1", ImageSource(transport=transport))
    message = str(caught.value)
    assert "config blob sha256:" in message and f"r.test/{REPO}:v1" in message
    assert f"says is {len(CONFIG)} bytes" in message and f"more than {CAP} bytes" in message
    assert endless.sent <= CAP + 2 * 65536  # read no further than the cap


def test_a_config_its_manifest_says_is_over_the_cap_is_refused_before_a_byte_is_read() -> None:
    transport, asked = _registry(CONFIG, declared=5 * 1024**3)
    with pytest.raises(RegistryError, match=f"is {5 * 1024**3} bytes, its manifest says; refused: .* {CAP} bytes"):
        inspect_image(f"r.test/{REPO}:v1", ImageSource(transport=transport))
    assert not [path for path in asked if "/blobs/" in path]


def test_build_index_caps_the_configs_it_reads_too() -> None:
    transport, _ = _registry(_Endless())
    with pytest.raises(RegistryError, match=f"more than {CAP} bytes for the config blob"):
        build_index_image(f"r.test/{REPO}:all", ["v1"], ImageSource(transport=transport))


def test_a_config_that_is_json_but_not_an_object_is_a_bad_document() -> None:
    transport, _ = _registry(b"[1, 2]")
    with pytest.raises(BadDocumentError, match="is a JSON list, not an object"):
        inspect_image(f"r.test/{REPO}:v1", ImageSource(transport=transport))


def test_a_config_under_the_cap_is_read() -> None:
    transport, _ = _registry(CONFIG)
    result = inspect_image(f"r.test/{REPO}:v1", ImageSource(transport=transport))
    assert [e.platform for e in result.entries] == ["linux/amd64"]

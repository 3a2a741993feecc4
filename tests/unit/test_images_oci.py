"""OCI documents: parsing, unknown fields kept, canonical bytes, digests, media types."""

from __future__ import annotations

import json

import pytest

from hetflow.images import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    BadDocumentError,
    Descriptor,
    DigestMismatchError,
    Index,
    Platform,
    canonical_json,
    digest_of,
    is_index,
    parse_index,
    parse_manifest,
    sniff_media_type,
)
from hetflow.images.oci import is_manifest, platform_string, verify_digest

DIGEST = "sha256:" + "ab" * 32

# An index with everything a real one may carry, plus fields no spec defines.
RICH_INDEX = {
    "schemaVersion": 2,
    "mediaType": OCI_INDEX,
    "artifactType": "application/vnd.example+json",
    "x-vendor": {"nested": [1, 2, {"k": "v"}]},
    "annotations": {"org.opencontainers.image.created": "2024-01-01T00:00:00Z"},
    "manifests": [
        {
            "mediaType": OCI_MANIFEST,
            "digest": DIGEST,
            "size": 1234,
            "urls": ["https://mirror.example/blob"],
            "data": "e30=",
            "annotations": {"org.hetflow.cpu.level": "3"},
            "platform": {
                "architecture": "amd64",
                "os": "linux",
                "os.version": "6.1",
                "os.features": ["seccomp"],
                "variant": "v3",
                "features": ["x86-64-v3"],
                "x-platform-extra": True,
            },
        }
    ],
}


def test_unknown_fields_round_trip() -> None:
    raw = json.dumps(RICH_INDEX, indent=3).encode()
    index = parse_index(raw)
    assert json.loads(canonical_json(index)) == RICH_INDEX
    platform = index.manifests[0].platform
    assert platform is not None
    assert (platform.os_version, platform.os_features, platform.variant) == ("6.1", ["seccomp"], "v3")
    assert platform.features == ["x86-64-v3"]


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == b'{"a":[1,{"c":3,"d":2}],"b":1}'
    assert canonical_json({"name": "é"}) == '{"name":"é"}'.encode()


def test_canonical_json_does_not_depend_on_input_order() -> None:
    shuffled = json.loads(json.dumps(RICH_INDEX), object_pairs_hook=lambda kv: dict(reversed(kv)))
    a = canonical_json(parse_index(json.dumps(RICH_INDEX).encode()))
    b = canonical_json(parse_index(json.dumps(shuffled).encode()))
    assert a == b and digest_of(a) == digest_of(b)


def test_models_built_in_code_dump_without_empty_defaults() -> None:
    desc = Descriptor(
        mediaType=OCI_MANIFEST, digest=DIGEST, size=1, platform=Platform(architecture="arm64", os="linux")
    )
    assert json.loads(canonical_json(Index(manifests=[desc]))) == {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": DIGEST,
                "size": 1,
                "platform": {"architecture": "arm64", "os": "linux"},
            }
        ],
    }
    # Python names work too, and an explicitly empty features list is kept.
    explicit = Platform(architecture="amd64", os="linux", os_version="1", features=[])
    assert json.loads(canonical_json(explicit)) == {
        "architecture": "amd64",
        "os": "linux",
        "os.version": "1",
        "features": [],
    }


def test_digest_of_and_verify() -> None:
    assert digest_of(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert verify_digest(b"", digest_of(b""), "x") == digest_of(b"")
    with pytest.raises(DigestMismatchError, match="content hashes to sha256:"):
        verify_digest(b"x", digest_of(b""), "blob")
    with pytest.raises(DigestMismatchError, match="sha256 and sha512"):
        verify_digest(b"x", "md5:" + "0" * 32, "blob")


MEDIA_TYPES = {
    "oci index": (OCI_INDEX, True, False),
    "docker list": (DOCKER_MANIFEST_LIST, True, False),
    "oci manifest": (OCI_MANIFEST, False, True),
    "docker manifest": (DOCKER_MANIFEST, False, True),
    "with parameters": (OCI_INDEX + "; charset=utf-8", True, False),
    "json": ("application/json", False, False),
    "none": (None, False, False),
}


@pytest.mark.parametrize(("media_type", "index", "manifest"), MEDIA_TYPES.values(), ids=MEDIA_TYPES.keys())
def test_media_types(media_type: str | None, index: bool, manifest: bool) -> None:
    assert is_index(media_type) is index
    assert is_manifest(media_type) is manifest


def test_docker_manifest_list_parses_as_index() -> None:
    raw = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST_LIST,
            "manifests": [
                {
                    "mediaType": DOCKER_MANIFEST,
                    "digest": DIGEST,
                    "size": 5,
                    "platform": {"architecture": "amd64", "os": "linux", "features": ["cpu:skylake"]},
                }
            ],
        }
    ).encode()
    index = parse_index(raw)
    assert index.media_type == DOCKER_MANIFEST_LIST
    assert index.manifests[0].platform is not None and index.manifests[0].platform.features == ["cpu:skylake"]


BAD_INDEXES = {
    "not json": (b"{nope", "not JSON"),
    "a list": (b"[]", "not an object"),
    "a manifest": (json.dumps({"mediaType": OCI_MANIFEST, "config": {}}).encode(), "not an image index"),
    "no manifests": (b'{"schemaVersion": 2}', "no 'manifests' list"),
    "descriptor without digest": (b'{"manifests": [{"mediaType": "x", "size": 1}]}', "manifests.0.digest"),
    "negative size": (json.dumps({"manifests": [{"mediaType": "x", "digest": DIGEST, "size": -1}]}).encode(), "size"),
}


@pytest.mark.parametrize(("raw", "message"), BAD_INDEXES.values(), ids=BAD_INDEXES.keys())
def test_bad_indexes_are_named(raw: bytes, message: str) -> None:
    with pytest.raises(BadDocumentError, match=message):
        parse_index(raw)


def test_parse_manifest() -> None:
    raw = json.dumps(
        {"schemaVersion": 2, "config": {"mediaType": "c", "digest": DIGEST, "size": 2}, "layers": [], "x": 1}
    ).encode()
    manifest = parse_manifest(raw)
    assert manifest.config.digest == DIGEST and manifest.model_extra == {"x": 1}
    with pytest.raises(BadDocumentError, match="not an image manifest"):
        parse_manifest(json.dumps({"mediaType": OCI_INDEX, "manifests": []}).encode())


SNIFF = {
    "declared": (json.dumps({"mediaType": DOCKER_MANIFEST}).encode(), DOCKER_MANIFEST),
    "index shape": (b'{"manifests": []}', OCI_INDEX),
    "manifest shape": (b'{"config": {}}', OCI_MANIFEST),
    "neither": (b'{"x": 1}', None),
    "not json": (b"\xff", None),
}


@pytest.mark.parametrize(("raw", "media_type"), SNIFF.values(), ids=SNIFF.keys())
def test_sniff_media_type(raw: bytes, media_type: str | None) -> None:
    assert sniff_media_type(raw) == media_type


def test_platform_string() -> None:
    assert platform_string(None) == "any"
    assert platform_string(Platform(architecture="amd64", os="linux", variant="v3")) == "linux/amd64/v3"


def test_with_manifests_keeps_everything_else() -> None:
    index = parse_index(json.dumps(RICH_INDEX).encode())
    narrowed = json.loads(canonical_json(index.with_manifests([])))
    assert narrowed == {**RICH_INDEX, "manifests": []}
    assert len(index.manifests) == 1  # the original is untouched

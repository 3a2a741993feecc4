"""OCI image layout directories: reading, nested indexes, and every check a layout gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetflow.images import (
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    BadDocumentError,
    Descriptor,
    DigestMismatchError,
    Index,
    Platform,
    canonical_json,
    digest_of,
    read_layout,
    write_layout,
)
from hetflow.images.layout import REF_NAME

CONFIG = b'{"architecture":"amd64","os":"linux"}'
MANIFEST = canonical_json(
    {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest_of(CONFIG), "size": len(CONFIG)},
        "layers": [],
    }
)


def manifest_entry(features: list[str] | None = None) -> Descriptor:
    platform = Platform(architecture="amd64", os="linux", features=features or [])
    return Descriptor(mediaType=OCI_MANIFEST, digest=digest_of(MANIFEST), size=len(MANIFEST), platform=platform)


def blobs(*extra: bytes) -> dict[str, bytes]:
    return {digest_of(b): b for b in (CONFIG, MANIFEST, *extra)}


def test_flat_layout(tmp_path: Path) -> None:
    write_layout(tmp_path, Index(manifests=[manifest_entry(["x86-64-v3"])]), blobs())
    layout = read_layout(tmp_path)
    assert json.loads((tmp_path / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = layout.image_index()
    assert [d.platform.features for d in index.manifests if d.platform] == [["x86-64-v3"]]
    manifest = layout.manifest(index.manifests[0])
    assert layout.read_blob(manifest.config.digest, manifest.config.size) == CONFIG


def test_nested_index_as_skopeo_writes_it(tmp_path: Path) -> None:
    inner = canonical_json(Index(manifests=[manifest_entry(["gpu:sm_80"])]))
    top = Descriptor(mediaType=OCI_INDEX, digest=digest_of(inner), size=len(inner), annotations={REF_NAME: "latest"})
    layout = write_layout(tmp_path, Index(manifests=[top]), blobs(inner))
    layout = read_layout(tmp_path)
    for index in (layout.image_index(), layout.image_index("latest")):
        assert [d.platform.features for d in index.manifests if d.platform] == [["gpu:sm_80"]]
    with pytest.raises(BadDocumentError, match=r"no entry named 'v2' in index\.json; names here: latest"):
        layout.image_index("v2")


def test_ref_name_picks_a_single_manifest(tmp_path: Path) -> None:
    named = manifest_entry().model_copy(update={"annotations": {REF_NAME: "v1"}})
    write_layout(tmp_path, Index(manifests=[named]), blobs())
    assert read_layout(tmp_path).image_index("v1").manifests == [named]


BROKEN = {
    "no oci-layout": (lambda p: (p / "oci-layout").unlink(), "has no oci-layout file"),
    "oci-layout not json": (lambda p: (p / "oci-layout").write_text("{"), "not JSON"),
    "layout version 2": (
        lambda p: (p / "oci-layout").write_text('{"imageLayoutVersion": "2.0.0"}'),
        "not a 1.x layout",
    ),
    "no index.json": (lambda p: (p / "index.json").unlink(), "index.json is missing"),
    "index.json not an index": (lambda p: (p / "index.json").write_text('{"config": {}}'), "no 'manifests' list"),
}


@pytest.mark.parametrize(("breakage", "message"), BROKEN.values(), ids=BROKEN.keys())
def test_broken_layouts_are_named(tmp_path: Path, breakage: object, message: str) -> None:
    write_layout(tmp_path, Index(manifests=[manifest_entry()]), blobs())
    breakage(tmp_path)  # type: ignore[operator]
    with pytest.raises(BadDocumentError, match=message):
        read_layout(tmp_path)


def test_blob_checks(tmp_path: Path) -> None:
    entry = manifest_entry()
    write_layout(tmp_path, Index(manifests=[entry]), blobs())
    layout = read_layout(tmp_path)
    layout.blob_path(entry.digest).write_bytes(b"abc")
    with pytest.raises(BadDocumentError, match="has 3 bytes; its descriptor says"):
        layout.read(entry)
    with pytest.raises(DigestMismatchError):
        layout.read_blob(entry.digest)
    layout.blob_path(entry.digest).unlink()
    with pytest.raises(BadDocumentError, match="is missing"):
        layout.read(entry)
    with pytest.raises(BadDocumentError, match="is not a digest"):
        layout.read_blob("sha256:../../etc/passwd")


def test_write_layout_refuses_mislabelled_blobs(tmp_path: Path) -> None:
    with pytest.raises(DigestMismatchError):
        write_layout(tmp_path, Index(manifests=[]), {digest_of(b"a"): b"b"})

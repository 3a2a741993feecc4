"""OCI image layout directories (image-spec image-layout.md): read and check them.

A layout is ``oci-layout`` (``{"imageLayoutVersion": "1.0.0"}``), ``index.json`` (an
image index) and ``blobs/<algorithm>/<encoded>``, which is what
``skopeo copy docker://... oci:DIR`` and ``podman save --format oci-dir`` write.  Every
blob read is checked against its digest and, when a descriptor gives one, its size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hetflow.images.errors import BadDocumentError
from hetflow.images.oci import (
    Descriptor,
    Index,
    Manifest,
    canonical_json,
    is_index,
    parse_index,
    parse_manifest,
    verify_digest,
)

__all__ = ["REF_NAME", "OciLayout", "read_layout", "write_layout"]

# The annotation that names an entry of index.json (annotations.md), e.g. skopeo's oci:DIR:TAG.
REF_NAME = "org.opencontainers.image.ref.name"
_DIGEST = re.compile(r"(?P<alg>[a-z0-9]+(?:[+._-][a-z0-9]+)*):(?P<hex>[a-zA-Z0-9=_-]+)\Z")


@dataclass(frozen=True)
class OciLayout:
    """An OCI image layout on disk and its ``index.json``."""

    path: Path
    index: Index

    def blob_path(self, digest: str) -> Path:
        match = _DIGEST.match(digest)
        if not match:  # also keeps "../" out of the path
            raise BadDocumentError(f"{self.path}: {digest!r} is not a digest (ALGORITHM:HEX)")
        return self.path / "blobs" / match["alg"] / match["hex"]

    def read_blob(self, digest: str, size: int | None = None) -> bytes:
        """The blob ``digest``, checked against the digest and ``size``."""
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise BadDocumentError(
                f"{self.path}: blob {digest} is missing ({path}); the layout is incomplete, copy it again"
            ) from exc
        if size is not None and len(data) != size:
            raise BadDocumentError(f"{self.path}: blob {digest} has {len(data)} bytes; its descriptor says {size}")
        verify_digest(data, digest, f"{self.path}: blob")
        return data

    def read(self, desc: Descriptor) -> bytes:
        return self.read_blob(desc.digest, desc.size)

    def manifest(self, desc: Descriptor) -> Manifest:
        return parse_manifest(self.read(desc), what=f"{self.path}: manifest {desc.digest}")

    def image_index(self, ref_name: str | None = None) -> Index:
        """The index that lists the builds.  ``index.json`` itself, unless it points to
        one nested index (what ``skopeo copy`` of a multi-build image writes) or
        ``ref_name`` picks an entry by its ``org.opencontainers.image.ref.name``; then
        the index that entry names."""
        entries = self.index.manifests
        if ref_name is not None:
            entries = [d for d in entries if (d.annotations or {}).get(REF_NAME) == ref_name]
            if not entries:
                names = sorted({(d.annotations or {}).get(REF_NAME, "") for d in self.index.manifests} - {""})
                raise BadDocumentError(
                    f"{self.path}: no entry named {ref_name!r} in index.json; names here: {', '.join(names) or 'none'}"
                )
            if not is_index(entries[0].media_type):
                return Index(manifests=[entries[0]])
        if len(entries) == 1 and is_index(entries[0].media_type):
            return parse_index(self.read(entries[0]), what=f"{self.path}: index {entries[0].digest}")
        return self.index if ref_name is None else Index(manifests=entries)


def read_layout(path: str | Path) -> OciLayout:
    """Open the OCI layout at ``path``; BadDocumentError when it is not one."""
    root = Path(path)
    marker = root / "oci-layout"
    try:
        data = json.loads(marker.read_bytes())
    except FileNotFoundError as exc:
        raise BadDocumentError(
            f"{root} is not an OCI image layout: it has no oci-layout file "
            f"(`skopeo copy docker://IMAGE oci:{root}` writes one)"
        ) from exc
    except ValueError as exc:
        raise BadDocumentError(f"{marker} is not JSON: {exc}") from exc
    version = data.get("imageLayoutVersion") if isinstance(data, dict) else None
    if not isinstance(version, str) or not version.startswith("1."):
        raise BadDocumentError(f"{marker}: imageLayoutVersion {version!r} is not a 1.x layout this code reads")
    try:
        raw = (root / "index.json").read_bytes()
    except FileNotFoundError as exc:
        raise BadDocumentError(f"{root} is not a complete OCI image layout: index.json is missing") from exc
    return OciLayout(root, parse_index(raw, what=f"{root}/index.json"))


def write_layout(path: str | Path, index: Index, blobs: Mapping[str, bytes] | None = None) -> OciLayout:
    """Write a layout: ``oci-layout``, ``index.json`` (canonical JSON) and ``blobs`` by
    their digests (each checked).  For tests and for exporting a filtered index."""
    root = Path(path)
    layout = OciLayout(root, index)
    for digest, data in (blobs or {}).items():
        verify_digest(data, digest, f"{root}: blob")
        target = layout.blob_path(digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    root.mkdir(parents=True, exist_ok=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (root / "index.json").write_bytes(canonical_json(index))
    return layout

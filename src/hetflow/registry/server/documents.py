"""Is a manifest body the JSON document its media type says it is?

An upstream (or whatever answers in its name: a login page behind a proxy, a CDN's error
page) may label any body ``application/vnd.oci.image.manifest.v1+json``; the proxy passes a
manifest on, and caches it, only when its body is the JSON of that media type (issue 38: an
HTML body so labelled was served as-is).  The check is structural and cheap, no model is
built: what the image spec requires of each document (image-spec manifest.md and
image-index.md; Docker's manifest v2 schema 2 has the same shape):

    every document      a JSON object, schemaVersion 2, its own mediaType (if it names one)
                        the same as the label
    manifest            config: a descriptor; layers: a list of descriptors
    index / list        manifests: a list of descriptors
    descriptor          an object with a string mediaType, a digest ALGORITHM:HEX and a size >= 0
"""

from __future__ import annotations

import json
import re
from typing import Any

from hetflow.images import is_index, is_manifest

__all__ = ["manifest_problem"]

# image-spec descriptor.md, "Digests": algorithm ":" encoded
_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+\Z")
_SHOWN = 80  # characters of a bad value quoted in a message


def manifest_problem(body: bytes, media_type: str) -> str | None:
    """Why ``body`` is not an OCI or Docker manifest or index of ``media_type``; None when it is."""
    if not (is_index(media_type) or is_manifest(media_type)):
        return f"is labelled {media_type or 'with no media type'!r}, not an OCI or Docker manifest or index"
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        start = body[:40].decode("utf-8", "replace")
        return f"is labelled {media_type} but is not JSON (it starts {start!r})"
    if not isinstance(data, dict):
        return f"is labelled {media_type} but is a JSON {type(data).__name__}, not an object"
    declared = data.get("mediaType")
    if declared is not None and (not isinstance(declared, str) or _bare(declared) != _bare(media_type)):
        return f"is labelled {media_type} but says its mediaType is {str(declared)[:_SHOWN]!r}"
    if data.get("schemaVersion") != 2:
        return f"is labelled {media_type} but its schemaVersion is {str(data.get('schemaVersion'))[:_SHOWN]}, not 2"
    if is_index(media_type):
        return _list_problem(data, "manifests", media_type)
    if not _is_descriptor(data.get("config")):
        return f"is labelled {media_type} but has no 'config' descriptor (mediaType, digest, size)"
    return _list_problem(data, "layers", media_type)


def _list_problem(data: dict[str, Any], key: str, media_type: str) -> str | None:
    entries = data.get(key)
    if not isinstance(entries, list):
        return f"is labelled {media_type} but has no '{key}' list"
    bad = next((i for i, entry in enumerate(entries) if not _is_descriptor(entry)), None)
    if bad is not None:
        return f"is labelled {media_type} but its {key}[{bad}] is not a descriptor (mediaType, digest, size)"
    return None


def _is_descriptor(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    digest, size = entry.get("digest"), entry.get("size")
    return (
        isinstance(entry.get("mediaType"), str)
        and isinstance(digest, str)
        and _DIGEST.match(digest) is not None
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
    )


def _bare(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()

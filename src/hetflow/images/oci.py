"""OCI image-spec documents: media types, descriptors, platforms, indexes, manifests.

Models follow the OCI image-spec v1.1 (descriptor.md, image-index.md, manifest.md)
and accept Docker's schema 2 manifest list, which has the same shape.  Every model is
``extra="allow"``: a field this code does not know (``artifactType``, ``data``, a
vendor's extension) is kept and written back out, so a filtered index loses nothing
but the entries that were dropped.

JSON field names that are not Python names (``mediaType``, ``os.version``) are
aliases; build models with either spelling, dump them with ``to_dict``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic import ValidationError as _ValidationError

from hetflow.images.errors import BadDocumentError, DigestMismatchError

__all__ = [
    "ACCEPT_ANY_MANIFEST",
    "ACCEPT_IMAGE_MANIFEST",
    "DIGEST_ALGORITHMS",
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "INDEX_MEDIA_TYPES",
    "MANIFEST_MEDIA_TYPES",
    "OCI_CONFIG",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Descriptor",
    "Index",
    "Manifest",
    "Platform",
    "canonical_json",
    "digest_of",
    "is_index",
    "is_manifest",
    "parse_index",
    "parse_manifest",
    "platform_string",
    "sniff_media_type",
    "verify_digest",
]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"

INDEX_MEDIA_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
MANIFEST_MEDIA_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})

# Accept headers (distribution-spec "Pulling manifests"): a registry that is not told
# it may answer with an index converts or refuses, so ask for everything we read.
ACCEPT_ANY_MANIFEST = ", ".join([OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST])
ACCEPT_IMAGE_MANIFEST = ", ".join([OCI_MANIFEST, DOCKER_MANIFEST])

DIGEST_ALGORITHMS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}

# defer_build: the validators are built at a model's first use (reading a registry's JSON),
# not at import: validate, plan and run import this module for its names and constants and
# mostly never parse an index (issue 43: 20-35 ms of each of those commands)
_MODEL = ConfigDict(extra="allow", populate_by_name=True, frozen=True, defer_build=True)


def _drop_empty_defaults(model: BaseModel, data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Leave out list/dict fields that are empty and were never set, so a model built
    in code dumps like the JSON a registry would hold (no ``"features": []``)."""
    for name in names:
        alias = type(model).model_fields[name].alias or name
        if name not in model.model_fields_set and not data.get(alias):
            data.pop(alias, None)
    return data


class Platform(BaseModel):
    """The platform an index entry runs on (image-index.md, ``platform``).

    ``features`` is RESERVED in image-spec 1.0/1.1 and hetflow gives it meaning (see
    ``hetflow.images.matching.match``); ``variant`` follows containerd (``v3`` on amd64 is
    x86-64-v3, ``v8`` on arm64 is the default)."""

    model_config = _MODEL

    architecture: str
    os: str
    # Python names for the type checker, the dotted JSON names on the wire.
    os_version: str | None = Field(
        default=None, validation_alias=AliasChoices("os.version", "os_version"), serialization_alias="os.version"
    )
    os_features: list[str] | None = Field(
        default=None, validation_alias=AliasChoices("os.features", "os_features"), serialization_alias="os.features"
    )
    variant: str | None = None
    features: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return _drop_empty_defaults(self, data, ("features",))


class Descriptor(BaseModel):
    """A content descriptor (descriptor.md): what a blob is, its digest and size."""

    model_config = _MODEL

    media_type: str = Field(alias="mediaType")
    digest: str
    size: int = Field(ge=0)
    urls: list[str] | None = None
    annotations: dict[str, str] | None = None
    platform: Platform | None = None
    artifact_type: str | None = Field(default=None, alias="artifactType")


class Index(BaseModel):
    """An image index (image-index.md) or Docker manifest list: one entry per build."""

    model_config = _MODEL

    schema_version: int = Field(default=2, alias="schemaVersion")
    media_type: str | None = Field(default=OCI_INDEX, alias="mediaType")
    manifests: list[Descriptor]
    annotations: dict[str, str] | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        data.setdefault("schemaVersion", self.schema_version)  # REQUIRED even when not set
        return data

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    def with_manifests(self, manifests: list[Descriptor]) -> Index:
        """The same index (media type, annotations, unknown fields) listing only
        ``manifests``: what a proxy serves after choosing for a node."""
        return self.model_copy(update={"manifests": list(manifests)})


class Manifest(BaseModel):
    """An image manifest (manifest.md) or Docker schema 2 manifest."""

    model_config = _MODEL

    schema_version: int = Field(default=2, alias="schemaVersion")
    media_type: str | None = Field(default=None, alias="mediaType")
    config: Descriptor
    layers: list[Descriptor] = Field(default_factory=list)
    annotations: dict[str, str] | None = None


def _to_dict(model: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces, UTF-8.  Models are dumped by
    their JSON names with unset optional fields left out, so the same index always
    has the same digest (what a filtered index served twice must have)."""
    if isinstance(obj, BaseModel):
        obj = _to_dict(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest_of(data: bytes) -> str:
    """The OCI digest of ``data``: ``sha256:<64 hex>`` (descriptor.md, "Digests")."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify_digest(data: bytes, digest: str, what: str) -> str:
    """Check that ``data`` hashes to ``digest`` (sha256 or sha512); returns the digest."""
    algorithm, _, expected = digest.partition(":")
    hasher = DIGEST_ALGORITHMS.get(algorithm)
    if hasher is None:
        raise DigestMismatchError(
            f"{what}: digest {digest!r} uses {algorithm!r}; hetflow checks sha256 and sha512 only"
        )
    actual = hasher(data).hexdigest()
    if actual != expected:
        raise DigestMismatchError(
            f"{what}: content hashes to {algorithm}:{actual[:16]}..., not {digest}; the registry sent "
            "broken or different data: try again, and if it persists, push the image again"
        )
    return digest


def is_index(media_type: str | None) -> bool:
    """True for an OCI image index or a Docker manifest list."""
    return _bare(media_type) in INDEX_MEDIA_TYPES


def is_manifest(media_type: str | None) -> bool:
    """True for an OCI image manifest or a Docker schema 2 manifest."""
    return _bare(media_type) in MANIFEST_MEDIA_TYPES


def _bare(media_type: str | None) -> str:
    # A Content-Type header may carry parameters ("...+json; charset=utf-8").
    return (media_type or "").split(";", 1)[0].strip().lower()


def _load(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadDocumentError(f"{what} is not JSON ({exc}); is this really an OCI document?") from exc
    if not isinstance(data, dict):
        raise BadDocumentError(f"{what} is JSON but not an object (got {type(data).__name__})")
    return data


def sniff_media_type(raw: bytes) -> str | None:
    """The media type a document says it has, or one guessed from its shape (an OCI
    index or manifest MAY leave ``mediaType`` out): None when it is neither."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("mediaType"), str):
        return str(data["mediaType"])
    if isinstance(data.get("manifests"), list):
        return OCI_INDEX
    if isinstance(data.get("config"), dict):
        return OCI_MANIFEST
    return None


def _problems(exc: _ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])


def parse_index(raw: bytes, *, what: str = "image index") -> Index:
    """Parse an OCI image index or Docker manifest list; BadDocumentError otherwise."""
    data = _load(raw, what)
    media_type = data.get("mediaType")
    if media_type is not None and not is_index(str(media_type)):
        raise BadDocumentError(f"{what} has mediaType {media_type!r}: not an image index or manifest list")
    if "manifests" not in data:
        raise BadDocumentError(f"{what} has no 'manifests' list: not an image index or manifest list")
    try:
        return Index.model_validate(data)
    except _ValidationError as exc:
        raise BadDocumentError(f"{what} is malformed: {_problems(exc)}") from exc


def parse_manifest(raw: bytes, *, what: str = "image manifest") -> Manifest:
    """Parse an OCI image manifest or Docker schema 2 manifest; BadDocumentError otherwise."""
    data = _load(raw, what)
    media_type = data.get("mediaType")
    if media_type is not None and not is_manifest(str(media_type)):
        raise BadDocumentError(f"{what} has mediaType {media_type!r}: not an image manifest")
    try:
        return Manifest.model_validate(data)
    except _ValidationError as exc:
        raise BadDocumentError(f"{what} is malformed: {_problems(exc)}") from exc


def platform_string(platform: Platform | None) -> str:
    """``os/architecture[/variant]`` as containerd and podman print it; "any" for none."""
    if platform is None:
        return "any"
    parts = [platform.os, platform.architecture]
    if platform.variant:
        parts.append(platform.variant)
    return "/".join(parts)

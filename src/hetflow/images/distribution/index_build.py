"""Assemble a multi-build image index from per-build tags (``hetflow images build-index``).

CI builds one image per target and pushes each under its own tag (``app:generic``,
``app:v3``, ``app:sm80``, ``app:rocm``); this module reads each tag's manifest from the registry,
writes an OCI image index whose entries carry what each build needs (as
``platform.features``, containerd's amd64 ``variant`` and ``org.hetflow.*``
annotations, see ``hetflow.images.matching.match``) and pushes it under one tag.  The index is
canonical JSON with the entries in the order given, so the same builds always give
the same index digest.  ("CI/CD is king": curate builds in a pipeline, not by hand.)

podman can build such a list too (``podman manifest create/add``, ``manifest annotate
--features``, ``manifest push --all``), but podman 4.3 drops ``--features`` given to
``manifest add`` and drops ``features`` from every entry when it pushes with
``--format oci``; writing the index here keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hetflow.images.distribution.config import read_config
from hetflow.images.errors import BadDocumentError, ImageError
from hetflow.images.matching.match import annotations_for, parse_requirements, platform_for, requirements_of
from hetflow.images.matching.requirements import Requirements, normalize_arch
from hetflow.images.oci import (
    ACCEPT_ANY_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    Descriptor,
    Index,
    Platform,
    canonical_json,
    digest_of,
    is_index,
    parse_manifest,
)

if TYPE_CHECKING:  # a client is passed in: the registry's I/O (and httpx) load only when one is made
    from hetflow.images.distribution.client import RegistryClient

__all__ = ["ANNOTATION_SOURCE", "BuildSpec", "BuiltIndex", "build_index", "entry_descriptor", "parse_build_entry"]

# Which tag an entry was built from: for people reading the index, not for matching.
ANNOTATION_SOURCE = "org.hetflow.build.tag"

BuildSpec = Requirements | Platform | str
"""What one entry needs: Requirements, a full Platform (used as given, like
``podman manifest add --arch/--variant/--features``) or feature text ("x86-64-v3,gpu:sm_80")."""


@dataclass(frozen=True)
class BuiltIndex:
    """An assembled index, its exact bytes and digest, and the tag it was pushed under
    (None when it was only built)."""

    repository: str
    index: Index
    body: bytes
    digest: str
    media_type: str
    tag: str | None


def parse_build_entry(text: str) -> tuple[str, Requirements]:
    """``TAG=FEATURES`` (``v3=x86-64-v3``, ``gpu=gpu:sm_80,cuda>=12.2``,
    ``rocm=gpu:gfx90a+gfx942,rocm>=6.2``, ``xe=gpu:pvc``); a bare ``TAG`` is a generic build."""
    tag, _, features = text.partition("=")
    tag = tag.strip()
    if not tag:
        raise ImageError(f"build entry {text!r}: write TAG=FEATURES, e.g. v3=x86-64-v3 or gpu=gpu:sm_80,cuda>=12.2")
    req = parse_requirements(features)
    if req.unknown:
        raise ImageError(f"build entry {text!r}: {'; '.join(req.unknown)}")
    return tag, req


def _config_platform(client: RegistryClient, repo: str, ref: str, config_desc: Descriptor) -> dict[str, Any]:
    """os, architecture and variant from an image's config blob (image-spec config.md)."""
    config = read_config(client, repo, config_desc, f"{repo}:{ref}")  # capped, as manifests
    if not config.get("architecture") or not config.get("os"):
        raise BadDocumentError(f"{repo}:{ref}: the image config names no os and architecture")
    return {k: config[k] for k in ("os", "architecture", "variant", "os.version") if config.get(k)}


def entry_descriptor(
    client: RegistryClient, repo: str, ref: str, spec: BuildSpec, *, variant: bool = True
) -> Descriptor:
    """The index entry for the image at ``repo:ref`` with the needs in ``spec``."""
    body, media_type, digest = client.get_manifest(repo, ref, accept=ACCEPT_ANY_MANIFEST)
    if is_index(media_type):
        raise ImageError(
            f"{repo}:{ref} is already an index (a multi-build image); build-index combines single-image tags: "
            "name the per-build tags instead"
        )
    manifest = parse_manifest(body, what=f"manifest {repo}:{ref}")
    if isinstance(spec, Platform):
        platform = spec
        req = requirements_of(Descriptor(mediaType=media_type, digest=digest, size=len(body), platform=spec))
    else:
        req = parse_requirements(spec) if isinstance(spec, str) else spec
        if req.unknown:
            raise ImageError(f"{repo}:{ref}: {'; '.join(req.unknown)}")
        image = _config_platform(client, repo, ref, manifest.config)
        arch = normalize_arch(image["architecture"])
        if req.architecture and req.architecture != arch:
            raise ImageError(f"{repo}:{ref} is an {arch} image, but its entry says {req.architecture}")
        platform = platform_for(req, os=image["os"], architecture=arch, variant=variant)
        if "variant" in image and platform.variant is None:
            platform = platform.model_copy(update={"variant": image["variant"]})
    annotations = {**annotations_for(req), ANNOTATION_SOURCE: ref}
    return Descriptor(mediaType=media_type, digest=digest, size=len(body), platform=platform, annotations=annotations)


def build_index(
    client: RegistryClient,
    repo: str,
    entries: Sequence[tuple[str, BuildSpec]],
    *,
    tag: str | None = None,
    annotations: Mapping[str, str] | None = None,
    variant: bool = True,
    media_type: str = OCI_INDEX,
) -> BuiltIndex:
    """Build the index of ``entries`` (per-build tag or digest, and its needs) in
    ``repo``; push it as ``repo:tag`` when ``tag`` is given.  ``variant=False`` leaves
    ``platform.variant`` out (runtimes that compare it literally then skip nothing)."""
    if not entries:
        raise ImageError(f"build-index {repo}: give at least one TAG=FEATURES entry")
    if media_type not in (OCI_INDEX, DOCKER_MANIFEST_LIST):
        raise ImageError(f"build-index {repo}: media type {media_type!r} is not an index type")
    descriptors = [entry_descriptor(client, repo, ref, spec, variant=variant) for ref, spec in entries]
    index = Index(
        schemaVersion=2,
        mediaType=media_type,
        manifests=descriptors,
        annotations=dict(annotations) if annotations else None,
    )
    body = canonical_json(index)
    digest = digest_of(body)
    if tag is not None:
        digest = client.put_manifest(repo, tag, body, media_type)
    return BuiltIndex(repository=repo, index=index, body=body, digest=digest, media_type=media_type, tag=tag)

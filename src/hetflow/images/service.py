"""What the ``hetflow images`` commands call: inspect an image, resolve it for a node,
build an index.  Each returns a JSON-able result (``to_json``) with a rich rendering.

References are read with ``hetflow.images.reference``: ``localhost/NAME`` is podman's
local storage (a manifest list there is read with ``podman manifest inspect``, a plain
image with ``podman image inspect``); anything else is a registry, read over the
distribution API (plain http for a loopback registry when ``insecure``).  An image
that is not an index is one build: it is still checked against the node (its
os/architecture), and its result says "not an index".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hetflow.errors import NoFitError
from hetflow.images.config import read_config
from hetflow.images.errors import BadDocumentError, NotFoundError
from hetflow.images.index_build import BuildSpec, BuiltIndex, build_index, parse_build_entry
from hetflow.images.localimages import LocalImage, LocalImages, PodmanImages
from hetflow.images.match import requirements_of, resolve
from hetflow.images.oci import (
    ACCEPT_ANY_MANIFEST,
    Descriptor,
    Index,
    Platform,
    is_index,
    parse_index,
    parse_manifest,
    platform_string,
)
from hetflow.images.reference import ImageReference, parse_reference
from hetflow.inventory import Node

if TYPE_CHECKING:  # the registry client (and httpx) load only when a registry is asked
    import httpx

    from hetflow.images.client import RegistryClient

__all__ = [
    "EntryInfo",
    "InspectResult",
    "LocalImage",
    "LocalImages",
    "PodmanImages",
    "ResolveResult",
    "VerdictInfo",
    "build_index_image",
    "inspect_image",
    "resolve_image",
]

NOT_AN_INDEX = "not an index: a single build, used as is when its platform fits"
_FROZEN = ConfigDict(frozen=True)


# --- results -------------------------------------------------------------------------------


class EntryInfo(BaseModel):
    """One build of an image: where it is and what it needs."""

    model_config = _FROZEN

    digest: str
    media_type: str
    size: int
    platform: str  # os/architecture[/variant], or "any"
    features: list[str]  # platform.features as written
    requirements: list[str]  # what hetflow reads from platform, features and annotations
    problems: list[str]  # requirements hetflow cannot check (they reject the entry)
    annotations: dict[str, str]

    @classmethod
    def of(cls, desc: Descriptor) -> EntryInfo:
        req = requirements_of(desc)
        return cls(
            digest=desc.digest,
            media_type=desc.media_type,
            size=desc.size,
            platform=platform_string(desc.platform),
            features=list(desc.platform.features) if desc.platform else [],
            requirements=req.labels() or ["generic"],
            problems=[*req.unknown, *([req.not_image] if req.not_image else [])],
            annotations=dict(desc.annotations or {}),
        )


class InspectResult(BaseModel):
    """An image's builds.  ``digest`` is the index's (or the single manifest's) digest;
    ``image_id`` is set for local images."""

    model_config = _FROZEN

    reference: str
    source: str  # "registry" or "local"
    digest: str | None
    media_type: str
    is_index: bool
    note: str | None = None
    image_id: str | None = None
    entries: list[EntryInfo]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def render(self) -> RenderableType:
        kind = "index" if self.is_index else "image"
        head = Text(f"{self.reference}  ({self.source} {kind}, {self.digest or self.image_id or 'no digest'})")
        table = Table(show_header=True, header_style="bold")
        for column in ("#", "digest", "platform", "needs", "problems"):
            table.add_column(column)
        for i, entry in enumerate(self.entries):
            table.add_row(
                str(i), _short(entry.digest), entry.platform, ", ".join(entry.requirements), "; ".join(entry.problems)
            )
        parts: list[RenderableType] = [head, table]
        if self.note:
            parts.append(Text(self.note, style="dim"))
        return Group(*parts)


class VerdictInfo(BaseModel):
    """One build judged against the node."""

    model_config = _FROZEN

    digest: str
    platform: str
    requirements: list[str]
    ok: bool
    chosen: bool
    reasons: list[str]
    specificity: list[int]


class ResolveResult(BaseModel):
    """The build chosen for a node (``chosen`` digest, None when nothing fits), the
    reference to pull it by (``pinned``), and every build's verdict in index order."""

    model_config = _FROZEN

    reference: str
    node: str
    source: str
    digest: str | None  # of the index (or single manifest) that was read
    is_index: bool
    chosen: str | None
    pinned: str | None
    note: str | None = None
    image_id: str | None = None
    explanation: list[str]
    verdicts: list[VerdictInfo]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self) -> list[str]:
        return [*self.explanation, *([self.note] if self.note else [])]

    def require_chosen(self) -> str:
        """The chosen digest, or NoFitError listing why each build was turned down."""
        if self.chosen is None:
            reasons = [f"{_short(v.digest)} {v.platform}: {'; '.join(v.reasons)}" for v in self.verdicts]
            raise NoFitError(
                f"no build of {self.reference} fits node {self.node}:\n  "
                + "\n  ".join(reasons or ["the index is empty"])
                + "\nPush a build this node can run (a generic one is the usual fallback) and add it to the index."
            )
        return self.chosen

    def render(self) -> RenderableType:
        if self.chosen:
            head = Text(f"{self.reference} on {self.node}: {self.pinned}", style="bold green")
        else:
            head = Text(f"{self.reference} on {self.node}: no build fits", style="bold red")
        table = Table(show_header=True, header_style="bold")
        for column in ("", "digest", "platform", "needs", "why"):
            table.add_column(column)
        for v in self.verdicts:
            mark, style = ("chosen", "green") if v.chosen else ("fits", "") if v.ok else ("no", "dim")
            table.add_row(
                mark, _short(v.digest), v.platform, ", ".join(v.requirements), "\n".join(v.reasons), style=style
            )
        parts: list[RenderableType] = [head, table]
        if self.note:
            parts.append(Text(self.note, style="dim"))
        return Group(*parts)


def _short(digest: str) -> str:
    algorithm, _, encoded = digest.partition(":")
    return f"{algorithm}:{encoded[:12]}" if encoded else digest


# --- reading an image --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """What one image reference is: an index, or a single build dressed as a one-entry index."""

    ref: ImageReference
    source: str
    digest: str | None
    media_type: str
    index: Index
    is_index: bool
    image_id: str | None = None


def _client(
    ref: ImageReference,
    *,
    insecure: bool,
    username: str | None,
    password: str | None,
    token: str | None,
    transport: httpx.BaseTransport | None,
) -> RegistryClient:
    from hetflow.images.client import RegistryClient

    return RegistryClient(
        ref.base_url(insecure=insecure),
        username=username,
        password=password,
        token=token,
        transport=transport,
        verify=not insecure,
    )


def _read_registry(ref: ImageReference, client: RegistryClient) -> _Read:
    body, media_type, digest = client.get_manifest(ref.repository, ref.ref, accept=ACCEPT_ANY_MANIFEST)
    if is_index(media_type):
        index = parse_index(body, what=f"index {ref}")
        return _Read(ref, "registry", digest, media_type, index, True)
    manifest = parse_manifest(body, what=f"manifest {ref}")
    config = read_config(client, ref.repository, manifest.config, str(ref))  # capped, as manifests
    platform = Platform(
        architecture=str(config.get("architecture") or "amd64"),
        os=str(config.get("os") or "linux"),
        variant=config.get("variant") or None,
    )
    single = Descriptor(mediaType=media_type, digest=digest, size=len(body), platform=platform)
    return _Read(ref, "registry", digest, media_type, Index(manifests=[single]), False)


def _local_name(ref: ImageReference) -> str:
    return str(ref) if ref.tag or ref.digest else f"{ref.name}:latest"  # podman's default tag


def _read_local(ref: ImageReference, local: LocalImages) -> _Read:
    name = _local_name(ref)
    raw = local.manifest_list(name)
    if raw is not None:
        index = parse_index(raw, what=f"local manifest list {name}")
        return _Read(ref, "local", None, index.media_type or "", index, True)
    image = local.image(name)
    if image is None:
        raise NotFoundError(
            f"no image {name} in local podman storage; `podman images` lists what is there "
            "(build or pull it first, or name a registry image instead)"
        )
    platform = Platform(architecture=image.architecture, os=image.os, variant=image.variant)
    single = Descriptor(mediaType="", digest=image.digest or f"sha256:{image.id}", size=image.size, platform=platform)
    return _Read(ref, "local", image.digest or None, "", Index(manifests=[single]), False, image_id=image.id)


def _read(
    text: str,
    *,
    insecure: bool,
    username: str | None,
    password: str | None,
    token: str | None,
    transport: httpx.BaseTransport | None,
    local: LocalImages | None,
) -> _Read:
    ref = parse_reference(text)
    if ref.local:
        return _read_local(ref, local or PodmanImages.default())
    with _client(ref, insecure=insecure, username=username, password=password, token=token, transport=transport) as c:
        return _read_registry(ref, c)


# --- the service -------------------------------------------------------------------------------


def inspect_image(
    ref: str,
    *,
    insecure: bool = False,
    username: str | None = None,
    password: str | None = None,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
    local: LocalImages | None = None,
) -> InspectResult:
    """The builds of image ``ref`` and what each needs."""
    read = _read(
        ref, insecure=insecure, username=username, password=password, token=token, transport=transport, local=local
    )
    return InspectResult(
        reference=str(read.ref),
        source=read.source,
        digest=read.digest,
        media_type=read.media_type,
        is_index=read.is_index,
        note=None if read.is_index else NOT_AN_INDEX,
        image_id=read.image_id,
        entries=[EntryInfo.of(d) for d in read.index.manifests],
    )


def resolve_image(
    ref: str,
    node: Node,
    *,
    insecure: bool = False,
    username: str | None = None,
    password: str | None = None,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
    local: LocalImages | None = None,
) -> ResolveResult:
    """The build of ``ref`` that ``node`` should run, and why (see ``match.resolve``)."""
    read = _read(
        ref, insecure=insecure, username=username, password=password, token=token, transport=transport, local=local
    )
    resolution = resolve(read.index, node)
    chosen = resolution.chosen
    verdicts = [
        VerdictInfo(
            digest=v.descriptor.digest,
            platform=platform_string(v.descriptor.platform),
            requirements=requirements_of(v.descriptor).labels() or ["generic"],
            ok=v.ok,
            chosen=v.descriptor is chosen,
            reasons=list(v.reasons),
            specificity=list(v.specificity),
        )
        for v in resolution.verdicts
    ]
    pinned = None
    if chosen is not None:
        pinned = f"{read.ref.name}@{chosen.digest}" if chosen.digest.startswith("sha256:") else str(read.ref)
        if read.source == "local" and not read.is_index:
            pinned = _local_name(read.ref)  # a local image is run by its name
    return ResolveResult(
        reference=str(read.ref),
        node=node.name,
        source=read.source,
        digest=read.digest,
        is_index=read.is_index,
        chosen=chosen.digest if chosen else None,
        pinned=pinned,
        note=None if read.is_index else NOT_AN_INDEX,
        image_id=read.image_id,
        explanation=resolution.explain(),
        verdicts=verdicts,
    )


def build_index_image(
    ref: str,
    entries: Sequence[str | tuple[str, BuildSpec]],
    *,
    insecure: bool = False,
    username: str | None = None,
    password: str | None = None,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
    annotations: Mapping[str, str] | None = None,
    variant: bool = True,
) -> BuiltIndex:
    """``hetflow images build-index REGISTRY/REPO:TAG TAG=FEATURES...``: assemble the
    per-build tags of REPO into one index and push it as TAG."""
    target = parse_reference(ref)
    if target.local:
        raise BadDocumentError(
            f"{ref} is local podman storage; build-index reads and pushes a registry: name REGISTRY/REPO:TAG"
        )
    if target.digest:
        raise BadDocumentError(f"{ref}: the index is pushed under a tag; leave the @digest out")
    parsed: list[tuple[str, BuildSpec]] = [parse_build_entry(e) if isinstance(e, str) else e for e in entries]
    with _client(
        target, insecure=insecure, username=username, password=password, token=token, transport=transport
    ) as client:
        return build_index(
            client,
            target.repository,
            parsed,
            tag=target.tag or "latest",
            annotations=annotations,
            variant=variant,
        )

"""Where an image is read from, as one value (``ImageSource``), and reading it.

References are read with ``hetflow.images.reference``: ``localhost/NAME`` is podman's local
storage (a manifest list there is read with ``podman manifest inspect``, a plain image with
``podman image inspect``); anything else is a registry, read over the distribution API
(plain http for a loopback registry when ``insecure``).  An image that is not an index is
one build, read as a one-entry index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hetflow.images.distribution.config import read_config
from hetflow.images.errors import NotFoundError
from hetflow.images.localimages import LocalImages, PodmanImages
from hetflow.images.oci import ACCEPT_ANY_MANIFEST, Descriptor, Index, Platform, is_index, parse_index, parse_manifest
from hetflow.images.reference import ImageReference, parse_reference

if TYPE_CHECKING:  # the registry client (and httpx) load only when a registry is asked
    import httpx

    from hetflow.images.distribution.client import RegistryClient


@dataclass(frozen=True)
class ImageSource:
    """How to reach images: a registry's TLS and credentials, a transport (a fake registry's,
    in tests), and the local podman storage (``PodmanImages.default()`` when None).  Built
    once by a caller (``hetflow images``' flags, the run's pinning) and handed to the service."""

    insecure: bool = False  # plain http for a loopback registry, no TLS verification
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    transport: httpx.BaseTransport | None = None
    local: LocalImages | None = None

    def client(self, ref: ImageReference) -> RegistryClient:
        """A registry client for ``ref``'s registry."""
        from hetflow.images.distribution.client import RegistryClient

        return RegistryClient(
            ref.base_url(insecure=self.insecure),
            username=self.username,
            password=self.password,
            token=self.token,
            transport=self.transport,
            verify=not self.insecure,
        )

    def read(self, text: str) -> ImageRead:
        """What image ``text`` is: from local podman storage or from its registry."""
        ref = parse_reference(text)
        if ref.local:
            return _read_local(ref, self.local or PodmanImages.default())
        with self.client(ref) as c:
            return _read_registry(ref, c)


@dataclass(frozen=True)
class ImageRead:
    """What one image reference is: an index, or a single build dressed as a one-entry index."""

    ref: ImageReference
    source: str  # "registry" or "local"
    digest: str | None
    media_type: str
    index: Index
    is_index: bool
    image_id: str | None = None


def local_name(ref: ImageReference) -> str:
    """A local image's name as podman stores it (its default tag ``latest``)."""
    return str(ref) if ref.tag or ref.digest else f"{ref.name}:latest"


def _read_registry(ref: ImageReference, client: RegistryClient) -> ImageRead:
    body, media_type, digest = client.get_manifest(ref.repository, ref.ref, accept=ACCEPT_ANY_MANIFEST)
    if is_index(media_type):
        index = parse_index(body, what=f"index {ref}")
        return ImageRead(ref, "registry", digest, media_type, index, True)
    manifest = parse_manifest(body, what=f"manifest {ref}")
    config = read_config(client, ref.repository, manifest.config, str(ref))  # capped, as manifests
    platform = Platform(
        architecture=str(config.get("architecture") or "amd64"),
        os=str(config.get("os") or "linux"),
        variant=config.get("variant") or None,
    )
    single = Descriptor(mediaType=media_type, digest=digest, size=len(body), platform=platform)
    return ImageRead(ref, "registry", digest, media_type, Index(manifests=[single]), False)


def _read_local(ref: ImageReference, local: LocalImages) -> ImageRead:
    name = local_name(ref)
    raw = local.manifest_list(name)
    if raw is not None:
        index = parse_index(raw, what=f"local manifest list {name}")
        return ImageRead(ref, "local", None, index.media_type or "", index, True)
    image = local.image(name)
    if image is None:
        raise NotFoundError(
            f"no image {name} in local podman storage; `podman images` lists what is there "
            "(build or pull it first, or name a registry image instead)"
        )
    platform = Platform(architecture=image.architecture, os=image.os, variant=image.variant)
    single = Descriptor(mediaType="", digest=image.digest or f"sha256:{image.id}", size=image.size, platform=platform)
    return ImageRead(ref, "local", image.digest or None, "", Index(manifests=[single]), False, image_id=image.id)

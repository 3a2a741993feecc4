"""Images: which build of a multi-build image each node should run.

    oci          OCI/Docker media types; Platform, Descriptor, Index, Manifest models
                 (unknown fields kept); parse_index, canonical_json, digest_of
    matching/    PURE: which build suits a node
      requirements Requirements (what one build needs) and how needs are spelled
                 (GOARCH names, archspec targets, versions, sm_XY)
      match      requirements_of(entry), resolve(index, node) -> Resolution with
                 a Verdict (and its reasons) for every entry; nodecheck judges one
                 build's Requirements against a node, gpumatch the AMD/Intel/ROCm rules
    reference    parse_reference("registry:port/repo:tag@digest"); localhost/NAME is
                 podman's local storage
    distribution/ the OCI distribution API
      client     RegistryClient: manifests, blobs, tags with Bearer-token and Basic auth,
                 every download checked against its digest; config: an image's config blob
      index_build build_index: per-build tags -> one index with platform.features
      fake       FakeRegistry, the in-memory registry for tests
    layout       read_layout(dir): OCI image layout directories
    source       ImageSource: how images are reached (TLS, credentials, transport, local storage)
    service      inspect_image, resolve_image, build_index_image: what the CLI calls
    localimages  LocalImages, the seam to podman's local storage (PodmanImages the real one)
    errors       ImageError and its subclasses (all HetflowError)

Data flows one way: reference/oci -> requirements -> nodecheck -> match (pure) -> client/layout (I/O) -> service.

Other packages import the names below from ``hetflow.images`` itself; the modules are
this package's own layout.  ``FakeRegistry`` is the fake beside ``RegistryClient`` (an
in-memory distribution API behind ``httpx.MockTransport``), ``LocalImages`` the seam
for podman's local storage (``PodmanImages`` the real one).  Names load on first use
(``hetflow.lazy``, as in ``hetflow.spec``): resolving a local image, as every ``hetflow plan``
does, loads neither the registry client nor httpx.
"""

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.images.distribution.client import Challenge, RegistryClient, parse_challenge
    from hetflow.images.distribution.fake import FakeRegistry
    from hetflow.images.distribution.index_build import build_index, parse_build_entry
    from hetflow.images.errors import (
        AuthError,
        BadDocumentError,
        BadReferenceError,
        DigestMismatchError,
        ImageError,
        NotFoundError,
        RegistryError,
    )
    from hetflow.images.layout import read_layout, write_layout
    from hetflow.images.localimages import LocalImage, LocalImages, PodmanImages
    from hetflow.images.matching.gpumatch import ROCM_RELEASES, check_rocm, rocm_distance
    from hetflow.images.matching.match import (
        ANNOTATION_GPU_GFX,
        ANNOTATION_GPU_INTEL,
        ANNOTATION_ROCM,
        Resolution,
        parse_requirements,
        platform_for,
        requirements_of,
        resolve,
    )
    from hetflow.images.matching.requirements import Requirements, normalize_arch
    from hetflow.images.oci import (
        ACCEPT_ANY_MANIFEST,
        DOCKER_MANIFEST,
        DOCKER_MANIFEST_LIST,
        OCI_CONFIG,
        OCI_INDEX,
        OCI_MANIFEST,
        Descriptor,
        Index,
        Platform,
        canonical_json,
        digest_of,
        is_index,
        is_manifest,
        parse_index,
        parse_manifest,
        sniff_media_type,
    )
    from hetflow.images.reference import ImageReference, parse_reference
    from hetflow.images.service import (
        ResolveResult,
        build_index_image,
        inspect_image,
        resolve_image,
    )
    from hetflow.images.source import ImageSource

_WHERE = {
    "distribution.client": ["Challenge", "RegistryClient", "parse_challenge"],
    "errors": [
        "AuthError",
        "BadDocumentError",
        "BadReferenceError",
        "DigestMismatchError",
        "ImageError",
        "NotFoundError",
        "RegistryError",
    ],
    "distribution.fake": ["FakeRegistry"],
    "matching.gpumatch": ["ROCM_RELEASES", "check_rocm", "rocm_distance"],
    "distribution.index_build": ["build_index", "parse_build_entry"],
    "layout": ["read_layout", "write_layout"],
    "localimages": ["LocalImage", "LocalImages", "PodmanImages"],
    "source": ["ImageSource"],
    "matching.match": [
        "ANNOTATION_GPU_GFX",
        "ANNOTATION_GPU_INTEL",
        "ANNOTATION_ROCM",
        "Resolution",
        "parse_requirements",
        "platform_for",
        "requirements_of",
        "resolve",
    ],
    "oci": [
        "ACCEPT_ANY_MANIFEST",
        "DOCKER_MANIFEST",
        "DOCKER_MANIFEST_LIST",
        "Descriptor",
        "Index",
        "OCI_CONFIG",
        "OCI_INDEX",
        "OCI_MANIFEST",
        "Platform",
        "canonical_json",
        "digest_of",
        "is_index",
        "is_manifest",
        "parse_index",
        "parse_manifest",
        "sniff_media_type",
    ],
    "reference": ["ImageReference", "parse_reference"],
    "matching.requirements": ["Requirements", "normalize_arch"],
    "service": ["ResolveResult", "build_index_image", "inspect_image", "resolve_image"],
}

__all__ = [
    "ACCEPT_ANY_MANIFEST",
    "ANNOTATION_GPU_GFX",
    "ANNOTATION_GPU_INTEL",
    "ANNOTATION_ROCM",
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "OCI_CONFIG",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "ROCM_RELEASES",
    "AuthError",
    "BadDocumentError",
    "BadReferenceError",
    "Challenge",
    "Descriptor",
    "DigestMismatchError",
    "FakeRegistry",
    "ImageError",
    "ImageReference",
    "ImageSource",
    "Index",
    "LocalImage",
    "LocalImages",
    "NotFoundError",
    "Platform",
    "PodmanImages",
    "RegistryClient",
    "RegistryError",
    "Requirements",
    "Resolution",
    "ResolveResult",
    "build_index",
    "build_index_image",
    "canonical_json",
    "check_rocm",
    "digest_of",
    "inspect_image",
    "is_index",
    "is_manifest",
    "normalize_arch",
    "parse_build_entry",
    "parse_challenge",
    "parse_index",
    "parse_manifest",
    "parse_reference",
    "parse_requirements",
    "platform_for",
    "read_layout",
    "requirements_of",
    "resolve",
    "resolve_image",
    "rocm_distance",
    "sniff_media_type",
    "write_layout",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)

"""Images: which build of a multi-build image each node should run.

    oci          OCI/Docker media types; Platform, Descriptor, Index, Manifest models
                 (unknown fields kept); parse_index, canonical_json, digest_of
    match        PURE: requirements_of(entry), resolve(index, node) -> Resolution with
                 a Verdict (and its reasons) for every entry
    reference    parse_reference("registry:port/repo:tag@digest"); localhost/NAME is
                 podman's local storage
    client       RegistryClient: the distribution API (manifests, blobs, tags) with
                 Bearer-token and Basic auth, every download checked against its digest
    layout       read_layout(dir): OCI image layout directories
    index_build  build_index: per-build tags -> one index with platform.features
    service      inspect_image, resolve_image, build_index_image: what the CLI calls
    errors       ImageError and its subclasses (all HetflowError)

Data flows one way: reference/oci -> match (pure) -> client/layout (I/O) -> service.
"""

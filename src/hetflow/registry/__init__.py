"""The registry proxy: one image tag, the right build for each machine type (MetaHub's idea).

    podman (type A) ─┐                ┌─ upstream index: generic, v3, sm80
    podman (type B) ─┼─► proxy ──────►┤
    skopeo  ...     ─┘   /v2/...      └─ blobs, manifests (verified, cached)

A client logs in with a machine type's token; a tag that names an index comes back as
that type's view (the one build ``hetflow.images.resolve`` picks for its hardware)
under the view's own digest; blobs and manifests pass through verified.  This package
holds the proxy only: its commands (``hetflow registry serve/login``) are
``hetflow.cli.oci.registry``; hardware profiles are ``hetflow.inventory``'s.

Public API:

    create_app(settings, transport=None) -> Starlette   the ASGI app      (app)
    serve(settings)                                      run it behind the HTTP front  (serving)
    start_in_thread(settings) -> RunningProxy            tests and bench    (serving)
    Settings, MachineTypeDecl, Limits, load_settings(config, upstream=, listen=)    (settings)
    secured(settings) -> (settings, made admin token | None)                (settings)
    MachineTypes, MachineType, MachineTypeConflict       types and tokens on disk  (machines)
    FakeRegistry                                         fake upstream, the seam's fake  (fake)

Layout, bottom up: ``settings`` -> ``machines`` (who is asking); ``errors`` the OCI error
body.  ``matching/``: ``views`` (pure: which bytes), ``viewcache``, ``offload``.  ``cache/``:
``store``/``verify`` (content addressing, digest checks) -> ``upstream`` (httpx) -> ``fetch``
(blobs into the cache: verified, retried, single-flight, bounded in slots, time and rate by
``fillwatch``'s rules).  ``server/``: ``proxy`` (OCI endpoints) -> ``app`` (auth, wiring),
``gates``, ``auth`` the Basic/Bearer parsing, ``peers``, ``documents``.  ``fakes/``: the
fake upstream, ``faults`` (an upstream that corrupts and drops blob bodies), ``trickle``
(chosen blobs a byte at a time on loopback), ``fakeindexes``, ``fakeproxy`` (tests).  Benchmark:
``python -m bench.proxy.registry``.
"""

from hetflow.registry.fakes.fake import FakeRegistry
from hetflow.registry.machines import MachineType, MachineTypeConflict, MachineTypes
from hetflow.registry.server.app import create_app
from hetflow.registry.server.serving import RunningProxy, serve, start_in_thread
from hetflow.registry.settings import Limits, MachineTypeDecl, Settings, load_settings, secured

__all__ = [
    "FakeRegistry",
    "Limits",
    "MachineType",
    "MachineTypeConflict",
    "MachineTypeDecl",
    "MachineTypes",
    "RunningProxy",
    "Settings",
    "create_app",
    "load_settings",
    "secured",
    "serve",
    "start_in_thread",
]

"""The registry proxy: one image tag, the right build for each machine type (MetaHub's idea).

    podman (type A) ─┐                ┌─ upstream index: generic, v3, sm80
    podman (type B) ─┼─► proxy ──────►┤
    skopeo  ...     ─┘   /v2/...      └─ blobs, manifests (verified, cached)

A client logs in with a machine type's token; a tag that names an index comes back as
that type's view (the one build ``hetflow.images.match.resolve`` picks for its
hardware) under the view's own digest; blobs and manifests pass through verified.

Public API:

    create_app(settings, transport=None) -> Starlette   the ASGI app      (app)
    serve(settings)                                      run it (uvicorn)   (app)
    start_in_thread(settings) -> RunningProxy            tests and bench    (app)
    Settings, load_settings(config, upstream=, listen=)                     (settings)
    serve_command(upstream, listen, config)              `hetflow registry serve`  (cli)
    login_command(proxy_url, node, engine_binary, ...)   `hetflow registry login`  (cli)
    register_node(proxy_url, node) -> LoginResult                           (cli)
    PROFILES, profile_node(name)                         built-in machine types    (profiles)
    MachineTypes                                         types and tokens on disk  (machines)
    FakeRegistry                                         fake upstream for tests   (fake)

Layout: ``settings`` -> ``profiles``/``machines`` (who is asking) -> ``views`` (pure:
which bytes) -> ``store``/``verify`` (content addressing, digest checks) ->
``upstream`` (httpx) -> ``proxy`` (OCI endpoints) -> ``app`` (auth, wiring, uvicorn).
Benchmark: ``python -m bench.registry``.
"""

from hetflow.inventory.profiles import PROFILES, profile_node
from hetflow.registry.app import RunningProxy, create_app, serve, start_in_thread
from hetflow.registry.cli import LoginResult, login_command, register_node, serve_command
from hetflow.registry.machines import MachineType, MachineTypes
from hetflow.registry.settings import MachineTypeDecl, Settings, load_settings

__all__ = [
    "PROFILES",
    "LoginResult",
    "MachineType",
    "MachineTypeDecl",
    "MachineTypes",
    "RunningProxy",
    "Settings",
    "create_app",
    "load_settings",
    "login_command",
    "profile_node",
    "register_node",
    "serve",
    "serve_command",
    "start_in_thread",
]

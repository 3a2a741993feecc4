"""The proxy as an ASGI app (starlette); ``serving`` runs it behind the HTTP front.

Endpoints besides the OCI ones of ``hetflow.registry.server.proxy``:

    GET  /v2/                        API version check; 401 with the Bearer challenge
    GET  /token                      Docker token auth: Basic <type>:<token> -> bearer
    POST /token                      the same, as docker's OAuth2 password grant
    POST /hetflow/v1/machine-types   register a Node (JSON) -> {machine_type, token};
                                     ?repositories=lab/*,x scopes the token to those
    GET  /hetflow/v1/machine-types   the machine types (names and hardware, no tokens)

When ``admin_token`` is set, the /hetflow/v1 endpoints need ``Authorization: Bearer
<admin_token>``; else anyone who can reach the proxy may register hardware.  ``serving.serve``
refuses to run without one where that "anyone" reaches beyond this machine or would
borrow the proxy's upstream credentials (``Settings.needs_admin_token``; the CLI makes
and prints one, ``settings.secured``).

``gates.RequestLimits`` wraps every request: a body over ``limits.max_body_bytes`` is refused (413)
before the app reads it.  Connections are the front's (``hetflow.front``): it cuts slow and
idle clients and limits each address before a request gets here.  A slow reader costs an
open file and a socket, and the cached-blob path holds no thread while it waits
(``verify.FileChunks``).
"""

from __future__ import annotations

import errno
import fnmatch
import hmac
import json
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hetflow.images import RegistryError
from hetflow.inventory import Node, node_fields
from hetflow.registry.cache.store import BlobStore, FilteredStore
from hetflow.registry.cache.upstream import Upstream
from hetflow.registry.cache.verify import VerifiedBody
from hetflow.registry.errors import ErrorCode, error_response
from hetflow.registry.machines import MachineType, MachineTypeConflict, MachineTypeLimit, MachineTypes
from hetflow.registry.server.auth import BadAuthorization, BearerSigner, bearer_challenge, parse_basic, parse_bearer
from hetflow.registry.server.gates import ApiVersion, RequestLimits
from hetflow.registry.server.peers import holder_of
from hetflow.registry.server.proxy import Proxy, parse_path
from hetflow.registry.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("hetflow.registry")
# A Host header worth echoing in the realm; anything else (quotes, spaces, CR/LF) is not
# pasted into WWW-Authenticate, the listen address stands in for it.
_HOST_RE = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?\Z|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?\Z")


def _bearer_key(state_dir: Path) -> bytes:
    """The HMAC key for bearers, made once and kept (0600) so bearers outlive restarts."""
    path = state_dir / "bearer.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    return path.read_bytes()


def _holder(request: Request) -> str:
    """Who registers on an open proxy: the local user owning the client's socket (peers)."""
    client, server = request.scope.get("client"), request.scope.get("server")
    return holder_of(tuple(client) if client else None, tuple(server) if server else None)


def _disk_full(err: OSError, what: str) -> Response:
    status = 507 if err.errno in (errno.ENOSPC, errno.EDQUOT) else 503
    return error_response(status, ErrorCode.UNAVAILABLE, f"{what}: the proxy's state directory: {err.strerror}")


class Registry:
    """One proxy: settings, machine types, bearer signer, stores and handlers."""

    def __init__(self, settings: Settings, transport: httpx.MockTransport | None = None) -> None:
        self.settings = settings
        state = settings.state_dir
        state.mkdir(parents=True, exist_ok=True)
        self.types = MachineTypes(
            state,
            max_types=settings.limits.max_machine_types,
            max_tokens=settings.limits.max_tokens_per_type,
            max_per_holder=settings.limits.max_tokens_per_holder,
        )
        self.new_tokens = self.types.declare(settings.machine_types, settings.config_dir)
        self.signer = BearerSigner(_bearer_key(state), settings.bearer_ttl_s)
        self.upstream = Upstream(
            settings.upstream,
            username=settings.upstream_username,
            password=settings.upstream_password,
            transport=transport,
            idle_timeout_s=settings.limits.upstream_idle_timeout_s,
            redirect_hosts=settings.redirect_hosts,
            token_hosts=settings.upstream_token_hosts,
        )
        self.proxy = Proxy(
            self.upstream,
            BlobStore(state / "cache" / "blobs", quota=settings.limits.cache_quota_bytes),
            FilteredStore(state / "filtered"),
            buffer_limit=settings.verify_buffer_bytes,
            limits=settings.limits,
        )

    # --- auth --------------------------------------------------------------------------

    def _challenge(self, request: Request, message: str, scope: str | None = None) -> Response:
        host = request.headers.get("host", "")
        if not _HOST_RE.match(host):
            host = self.settings.listen
        realm = f"{request.url.scheme}://{host}/token"
        headers = {"WWW-Authenticate": bearer_challenge(realm, self.settings.service, scope)}
        return error_response(401, ErrorCode.UNAUTHORIZED, message, headers=headers)

    def _caller(self, request: Request, scope: str | None = None, repo: str | None = None) -> MachineType | Response:
        header = request.headers.get("authorization")
        bearer = parse_bearer(header)
        if bearer is None:
            return self._challenge(
                request,
                "authentication required: run `hetflow registry login` on this machine "
                "(or `podman login -u MACHINE_TYPE -p TOKEN` this registry)",
                scope,
            )
        grant = self.signer.verify(bearer)
        allowed = None if grant is None else self.types.token_scope(grant.machine_type, grant.token_id)
        if grant is None or allowed is None:
            return self._challenge(request, "bearer token is invalid, expired or revoked; log in again", scope)
        if repo is not None and allowed and not any(fnmatch.fnmatchcase(repo, p) for p in allowed):
            return error_response(
                403,
                ErrorCode.DENIED,
                f"this token of machine type {grant.machine_type!r} may pull {', '.join(allowed)}, not {repo}",
            )
        request.state.scoped = bool(allowed)
        mt = self.types.get(grant.machine_type)
        assert mt is not None  # has_token_id found it
        return mt

    async def token(self, request: Request) -> Response:
        if request.method == "POST":
            # docker's OAuth2 "password" grant (distribution docs/spec/auth/oauth.md).
            form = parse_qs((await request.body()).decode("utf-8", "replace"))
            if form.get("grant_type", [""])[0] != "password":
                return error_response(400, ErrorCode.UNSUPPORTED, "only grant_type=password is supported")
            creds: tuple[str, str] | None = (form.get("username", [""])[0], form.get("password", [""])[0])
        else:
            try:
                creds = parse_basic(request.headers.get("authorization"))
            except BadAuthorization as err:
                return error_response(400, ErrorCode.UNAUTHORIZED, str(err))
        headers = {"WWW-Authenticate": f'Basic realm="{self.settings.service}"'}
        if creds is None or not creds[0]:
            return error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                "no credentials: log in first (`hetflow registry login`, or podman login -u MACHINE_TYPE with its "
                "token); the token endpoint takes Basic MACHINE_TYPE:TOKEN",
                headers=headers,
            )
        token_id = self.types.authenticate(*creds)
        if token_id is None:
            return error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                f"machine type {creds[0]!r} and this token do not match; "
                "run `hetflow registry login` again to get a fresh token",
                headers=headers,
            )
        issued = self.signer.issue(creds[0], token_id)
        return JSONResponse(
            {
                "token": issued.token,
                "access_token": issued.token,
                "expires_in": issued.expires_in,
                "issued_at": issued.issued_at,
            }
        )

    # --- OCI ---------------------------------------------------------------------------

    async def base(self, request: Request) -> Response:
        caller = self._caller(request)
        return caller if isinstance(caller, Response) else JSONResponse({})

    async def v2(self, request: Request) -> Response | VerifiedBody:
        parsed = parse_path(request.path_params["rest"])
        if parsed is None:
            return error_response(
                404, ErrorCode.NAME_INVALID, f"{request.url.path} is not /v2/<name>/(manifests|blobs|tags)/<ref>"
            )
        repo, kind, ref = parsed
        caller = self._caller(request, f"repository:{repo}:pull", repo)
        if isinstance(caller, Response):
            return caller
        if request.method not in ("GET", "HEAD"):
            return error_response(
                405, ErrorCode.UNSUPPORTED, "hetflow's registry proxy is read-only; push to the upstream registry"
            )
        try:
            if getattr(request.state, "scoped", False):
                # The cache is by digest, shared by every name: a token scoped to some
                # repositories gets a digest under a name only if the upstream has it there.
                unknown = await self.proxy.confirm(repo, kind, ref)
                if unknown is not None:
                    return unknown
            if kind == "manifests":
                return await self.proxy.manifest(request, caller, repo, ref)
            if kind == "blobs":
                return await self.proxy.blob(request, repo, ref)
            if ref == "list":
                return await self.proxy.tags(request, repo)
            return error_response(404, ErrorCode.NAME_INVALID, f"unknown endpoint {request.url.path}")
        except RegistryError as err:
            return error_response(502, ErrorCode.UNAVAILABLE, str(err))
        except OSError as err:  # the filtered-index store on a full disk
            return _disk_full(err, f"serving {repo}")

    # --- machine types -----------------------------------------------------------------

    def _admin(self, request: Request) -> Response | None:
        wanted = self.settings.admin_token
        if wanted is None:
            return None
        given = parse_bearer(request.headers.get("authorization")) or ""
        if hmac.compare_digest(given.encode(), wanted.encode()):
            return None
        return error_response(
            401,
            ErrorCode.UNAUTHORIZED,
            "this proxy needs its admin token to manage machine types (Authorization: Bearer ADMIN_TOKEN; "
            "`hetflow registry login --admin-token`)",
        )

    async def machine_types(self, request: Request) -> Response:
        refused = self._admin(request)
        if refused is not None:
            return refused
        if request.method == "GET":
            return JSONResponse(self.types.describe())
        try:
            data: Any = json.loads(await request.body())
            if isinstance(data, list) and len(data) == 1:
                data = data[0]  # `hetflow nodes --json` prints a list
            node = Node.model_validate(node_fields(data))  # less what `hetflow nodes --json` adds
        except (ValueError, ValidationError) as err:
            return error_response(400, "NODE_INVALID", f"the body is not the JSON of one `hetflow nodes` Node: {err}")
        try:
            # The state file is rewritten on each registration: off the event loop.
            repositories = [r for r in request.query_params.get("repositories", "").split(",") if r]
            holder = "admin" if self.settings.admin_token else await run_in_threadpool(_holder, request)
            mt, token, created = await run_in_threadpool(
                self.types.register, node, request.query_params.get("name") or None, repositories, holder
            )
        except MachineTypeLimit as err:
            return error_response(403, ErrorCode.DENIED, str(err))
        except (MachineTypeConflict, ValueError) as err:
            return error_response(409, "NAME_CONFLICT", str(err))
        except OSError as err:
            return _disk_full(err, "registering a machine type")
        log.info("%s machine type %s for node %s", "created" if created else "joined", mt.name, node.name)
        body = {"machine_type": mt.name, "token": token, "created": created, "node": mt.node.model_dump(mode="json")}
        return JSONResponse(body, status_code=201 if created else 200)

    @asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        yield
        await self.close()

    async def close(self) -> None:
        await self.upstream.aclose()
        await self.proxy.fetcher.aclose()  # fills in flight end; their temporary files go
        self.proxy.executor.shutdown(wait=False, cancel_futures=True)
        self.proxy.offload.close()


def create_app(settings: Settings, *, transport: httpx.MockTransport | None = None) -> Starlette:
    """The proxy app.  ``transport`` is the seam to the upstream (an
    ``httpx.MockTransport`` in tests); state lives in ``settings.state_dir``."""
    registry = Registry(settings, transport)
    for name in sorted(registry.new_tokens):
        log.warning("new token for machine type %s written to %s", name, settings.state_dir / "tokens" / name)
    app = Starlette(
        routes=[
            Route("/v2/", registry.base, methods=["GET", "HEAD"]),
            Route("/v2/{rest:path}", registry.v2, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]),
            Route("/token", registry.token, methods=["GET", "POST"]),
            Route("/hetflow/v1/machine-types", registry.machine_types, methods=["GET", "POST"]),
        ],
        lifespan=registry.lifespan,
    )
    app.state.registry = registry
    app.add_middleware(RequestLimits, limits=settings.limits)
    app.add_middleware(ApiVersion)
    return app

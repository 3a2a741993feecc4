"""A small REST client of the Kubernetes API over httpx: the kubeconfig read by the official
client's loader (contexts, certificates, tokens, exec plugins), requests and responses as
plain JSON, watches and log streams read line by line.

Plain JSON rather than the client's generated models: hetflow reads a few fields of Jobs and
pods, and a model class per kind would refuse fields of a newer API server.  Every failure
becomes an ``EngineError`` that says what to do: the kubeconfig missing or its context
unknown, the API server unreachable, the credentials refused (401), RBAC forbidding a verb
(403: the verb, the resource and the namespace to grant), a namespace that does not exist.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import httpx

from hetflow.errors import EngineError
from hetflow.execute.backends.kubernetes.settings import KubernetesSettings

Obj = dict[str, Any]
TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class NotFound(EngineError):
    """The object is not there (404)."""


class Forbidden(EngineError):
    """RBAC refused the request (403)."""


class Conflict(EngineError):
    """The object exists already (409): a resumed executor submitting again adopts it."""


class KubeApi:
    """One API server, as the kubeconfig's context names it."""

    def __init__(
        self,
        settings: KubernetesSettings,
        env: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,  # tests: an API server in memory (httpx.MockTransport)
    ) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        path = settings.kubeconfig_path(env)
        try:
            from kubernetes import client, config
        except ImportError:  # pragma: no cover - the extra is missing
            raise EngineError(
                "the Kubernetes backend needs the kubernetes client: pip install 'hetflow[kubernetes]'"
            ) from None
        if not path.exists():
            raise EngineError(
                f"no kubeconfig at {path}: set KUBECONFIG, kubernetes.kubeconfig in hetflow's config, or create "
                "~/.kube/config (kubectl config view shows what kubectl uses)"
            )
        cfg = client.Configuration()
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(path), context=settings.context, client_configuration=cfg
            )
        except Exception as exc:  # ConfigException, yaml errors: the loader's text names the problem
            raise EngineError(f"kubeconfig {path}: {exc}".strip()) from None
        self.host = cfg.host.rstrip("/")
        self.where = f"{self.host} (kubeconfig {path}{', context ' + settings.context if settings.context else ''})"
        headers = {"Accept": "application/json"}
        token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        if token:
            headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        try:
            tls = _tls(cfg)
        except (ssl.SSLError, OSError) as exc:
            raise EngineError(f"kubeconfig {path}: its certificates cannot be used: {exc}") from None
        self._kw: dict[str, Any] = {"base_url": self.host, "headers": headers, "verify": tls}
        if transport is not None:
            self._kw["transport"] = transport
        self._local = threading.local()

    @property
    def http(self) -> httpx.Client:
        """One connection pool per thread (watch threads stream while the runner polls)."""
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = httpx.Client(timeout=TIMEOUT, **self._kw)
        return c

    # requests

    def request(
        self, method: str, path: str, body: Obj | None = None, *, content_type: str | None = None, **params: Any
    ) -> Obj:
        """``body`` as JSON (``content_type``: another media type for it, a PATCH's)."""
        query = {k: v for k, v in params.items() if v is not None}
        try:
            if content_type is None:
                r = self.http.request(method, path, json=body, params=query)
            else:
                headers = {"Content-Type": content_type}
                r = self.http.request(method, path, content=json.dumps(body), headers=headers, params=query)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"cannot reach the Kubernetes API server at {self.where}: {exc or type(exc).__name__}; "
                "check that it runs (kubectl cluster-info) and the kubeconfig's server address"
            ) from None
        if r.status_code >= 400:
            raise self._error(r, method, path)
        return r.json() if r.content else {}

    def _error(self, r: httpx.Response, method: str, path: str) -> EngineError:
        try:
            status: Obj = r.json()
        except ValueError:
            status = {"message": r.text.strip()[:300]}
        message = str(status.get("message") or r.reason_phrase)
        if r.status_code == 401:
            return EngineError(
                f"the Kubernetes API server at {self.where} refused the credentials (401 Unauthorized): {message}"
            )
        if r.status_code == 403:
            return Forbidden(f"Kubernetes RBAC forbids this (403): {message}; {grant_hint(status, self.namespace)}")
        if r.status_code == 404:
            if "namespaces" in path and status.get("details", {}).get("kind") == "namespaces":
                return EngineError(
                    f"namespace {self.namespace!r} does not exist: kubectl create namespace {self.namespace}"
                )
            return NotFound(f"{method} {path}: {message}")
        if r.status_code == 409:
            return Conflict(message)
        return EngineError(f"the Kubernetes API refused {method} {path} ({r.status_code}): {message}")

    def patch(self, path: str, patch: Obj) -> Obj:
        """A JSON merge patch (RFC 7386) of the object at ``path``."""
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def get(self, path: str, **params: Any) -> Obj:
        return self.request("GET", path, **params)

    def items(self, path: str, **params: Any) -> list[Obj]:
        return list(self.get(path, **params).get("items") or [])

    def create(self, path: str, obj: Obj) -> Obj:
        return self.request("POST", path, obj)

    def delete(self, path: str, **params: Any) -> None:
        with suppress(NotFound):
            self.request("DELETE", path, **params)

    def served(self, group_version: str) -> bool:
        """Whether the API server serves ``group_version`` (resource.k8s.io/v1: DRA)."""
        try:
            self.get(f"/apis/{group_version}")
            return True
        except NotFound:
            return False

    def ns(self, resource: str, group: str = "") -> str:
        base = f"/apis/{group}" if group else "/api/v1"
        return f"{base}/namespaces/{self.namespace}/{resource}"

    # streams

    @contextmanager
    def stream(self, path: str, **params: Any) -> Iterator[httpx.Response]:
        """A long response (a watch, a log that follows), closed by leaving the block or by
        ``close()`` on it from another thread."""
        timeout = httpx.Timeout(None, connect=5.0)
        with httpx.Client(timeout=timeout, **self._kw) as c, c.stream("GET", path, params=params) as r:
            if r.status_code >= 400:
                r.read()
                raise self._error(r, "GET", path)
            yield r

    def watch(self, path: str, handle: Callable[[str, Obj], None], stop: threading.Event, **params: Any) -> None:
        """Call ``handle(type, object)`` for each change of the listed objects until ``stop`` is
        set, as client-go's reflector does: ``LOST`` then ``LIST`` (the list's response) when it
        lists, then each event from the list's resourceVersion; a watch the server ends (its
        timeout) is started again from the last version, a 410 Gone (an ERROR event or the
        status) or a dropped connection lists again (``informer``); a 403 ends it (``LOST``)."""
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    handle("LOST", {})
                    listing = self.get(path, **params)
                    version = listing.get("metadata", {}).get("resourceVersion")
                    handle("LIST", listing)
                query = {**params, "watch": "true", "timeoutSeconds": 60, "resourceVersion": version}
                with self.stream(path, **query) as r:
                    for line in r.iter_lines():
                        if stop.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":  # 410 Gone: list again
                            version = None
                            break
                        obj = event.get("object") or {}
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        handle(str(event.get("type")), obj)
            except Forbidden:  # RBAC: not while the run lasts (the caller lists instead)
                handle("LOST", {})
                return
            except (EngineError, httpx.HTTPError, ValueError):
                version = None
                handle("LOST", {})
                stop.wait(1.0)


def _tls(cfg: Any) -> ssl.SSLContext | bool:
    """The kubeconfig's TLS as one SSLContext (httpx takes client certificates only this way
    since 0.28): its CA (else the system's), its client certificate and key."""
    if not cfg.verify_ssl:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def grant_hint(status: Mapping[str, Any], namespace: str) -> str:
    """What to grant, from a 403 Status's details (kind is the resource, the message names the verb)."""
    details = status.get("details") or {}
    message = str(status.get("message", ""))
    verb = message.split('cannot "', 1)[-1].split('"', 1)[0] if 'cannot "' in message else ""
    if not verb and " cannot " in message:
        verb = message.split(" cannot ", 1)[1].split()[0]
    resource = details.get("kind") or "the resource"
    group = details.get("group") or ""
    full = f"{resource}.{group}" if group else str(resource)
    who = verb or "that verb"
    return f"grant the kubeconfig's user '{who}' on {full} in namespace {namespace} (a Role and RoleBinding)"

"""The OCI distribution endpoints of the proxy: manifests and blobs, per machine type.

    GET/HEAD /v2/<name>/manifests/<tag>     an index becomes the caller's view (one build),
                                            served under its own digest; anything else
                                            passes through, verified
    GET/HEAD /v2/<name>/manifests/<digest>  a view's digest gets the view (if it is the
                                            caller's), any other digest the upstream's bytes
    GET/HEAD /v2/<name>/blobs/<digest>      fetched once into the cache (verified, retried:
                                            hetflow.registry.cache.fetch), served from there
    GET      /v2/<name>/tags/list           passed through

What "another machine type's view" means: a view belongs to every machine type whose
hardware resolves the same upstream index to the same bytes.  A caller asking for a
view's digest that is not its own gets ``403 DENIED``; the upstream's own index
digest, per-build manifests and blobs are the same for everyone (they are the
upstream's bytes, which any caller could ask the upstream for).
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from starlette.requests import Request
from starlette.responses import Response

from hetflow.images import (
    ACCEPT_ANY_MANIFEST,
    BadDocumentError,
    digest_of,
    is_index,
    sniff_media_type,
)
from hetflow.registry.cache.fetch import BlobFetcher
from hetflow.registry.cache.fillwatch import FillRules
from hetflow.registry.cache.store import DIGEST_RE, BlobStore, FilteredRecord, FilteredStore, View, new_hasher
from hetflow.registry.cache.upstream import Upstream
from hetflow.registry.cache.verify import FileChunks, VerifiedBody
from hetflow.registry.errors import STATUS_CODES, ErrorCode, error_response
from hetflow.registry.machines import MachineType
from hetflow.registry.matching.offload import Offload
from hetflow.registry.matching.viewcache import ViewCache
from hetflow.registry.matching.views import Filtered, NoBuildFits
from hetflow.registry.server.documents import manifest_problem
from hetflow.registry.settings import Limits

__all__ = ["ManifestBody", "Proxy", "parse_path"]

log = logging.getLogger("hetflow.registry")

# distribution-spec "Pulling manifests": <name> and <reference> grammars.
_NAME = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*"
_PATH = re.compile(rf"(?P<name>{_NAME})/(?P<kind>manifests|blobs|tags)/(?P<ref>[^/]+)\Z")
_TAG = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}\Z")
MANIFEST_LIMIT = 4 * 1024 * 1024  # distribution refuses manifests over 4 MiB, as do we
ERROR_LIMIT = 64 * 1024
_MEMO_SIZE = 512
_CONFIRMED_SIZE = 100_000
_INLINE_CHECK = 256 * 1024  # a manifest body this large or less is checked on the event loop


def parse_path(rest: str) -> tuple[str, str, str] | None:
    """``"lib/img/manifests/v1"`` -> ``("lib/img", "manifests", "v1")``; None if malformed."""
    match = _PATH.match(rest)
    return (match["name"], match["kind"], match["ref"]) if match else None


@dataclass(frozen=True)
class ManifestBody:
    body: bytes
    media_type: str
    digest: str


class Proxy:
    """The handlers; one per app, holding the upstream client and the stores."""

    def __init__(
        self,
        upstream: Upstream,
        blobs: BlobStore,
        filtered: FilteredStore,
        *,
        buffer_limit: int,
        executor: Executor | None = None,
        attempts: int = 3,
        backoff_s: float = 0.1,
        limits: Limits | None = None,
    ) -> None:
        self.upstream = upstream
        self.limits = limits or Limits()
        # Cached-blob reads and hashing run here (see hetflow.registry.cache.verify); fills have a
        # pool and slots of their own (hetflow.registry.cache.fetch), so serving never waits for one.
        self.executor = executor or ThreadPoolExecutor(max_workers=32, thread_name_prefix="hetflow-blob")
        self.blobs = blobs
        self.filtered = filtered
        self.buffer_limit = buffer_limit
        self.fetcher = BlobFetcher(
            upstream,
            blobs,
            attempts=attempts,
            backoff_s=backoff_s,
            error=lambda status, raw: upstream_error(status, raw, "blob"),
            max_blob_bytes=self.limits.max_blob_bytes,
            rules=FillRules.from_limits(self.limits),
            max_fills=self.limits.max_fills,
        )
        self._manifests: OrderedDict[str, ManifestBody] = OrderedDict()  # verified, by digest
        self._manifest_bytes = 0  # held in _manifests, kept under limits.manifest_cache_bytes
        self._confirmed: dict[tuple[str, str], None] = {}  # (repo, digest) the upstream has: confirm()
        # (index digest, hardware key) -> the view: resolving is pure, so it is done once,
        # off the event loop, and only the answer is kept (bounded in bytes): viewcache.
        self.offload = Offload()  # big documents parsed in a worker process (closed by close())
        self.views = ViewCache(self.limits.view_cache_bytes, self.offload)

    # --- manifests ---------------------------------------------------------------------

    async def manifest(self, request: Request, mt: MachineType, repo: str, ref: str) -> Response:
        head = request.method == "HEAD"
        # containers/image sends one Accept header per media type; join them all.
        accept = ", ".join(request.headers.getlist("accept")) or ACCEPT_ANY_MANIFEST
        if DIGEST_RE.match(ref):
            record = self.filtered.get(ref)
            if record is not None and record.sources(repo):
                return await self._serve_view_digest(record, mt, repo, accept, head)
            got = await self._fetch_manifest(repo, ref, accept)
            return got if isinstance(got, Response) else _manifest_response(got, head)
        if ":" in ref or not _TAG.match(ref):
            return error_response(
                400,
                ErrorCode.TAG_INVALID if ":" not in ref else ErrorCode.DIGEST_INVALID,
                f"{ref!r} is neither a tag nor a sha256/sha512 digest",
            )
        got = await self._fetch_manifest(repo, ref, accept)
        if isinstance(got, Response):
            return got
        if not is_index(got.media_type):
            return _manifest_response(got, head)
        return await self._view(got, mt, repo, ref, head)

    async def _filter(self, index: ManifestBody, mt: MachineType) -> Filtered | NoBuildFits:
        return await self.views.view(index.digest, index.body, mt.hardware, mt.node)

    async def _view(self, index: ManifestBody, mt: MachineType, repo: str, ref: str, head: bool) -> Response:
        try:
            result = await self._filter(index, mt)
        except BadDocumentError as err:
            return error_response(502, ErrorCode.MANIFEST_INVALID, f"upstream index {repo}:{ref}: {err}")
        if isinstance(result, NoBuildFits):
            reasons = list(result.reasons)  # bounded where it was made (views.filter_index)
            message = f"no build of {repo}:{ref} runs on machine type {mt.name!r}: " + " | ".join(reasons)
            return error_response(
                404, ErrorCode.MANIFEST_UNKNOWN, message, {"machine_type": mt.name, "reasons": reasons}
            )
        self.filtered.put(result.digest, result.body, index.media_type, View(repo, index.digest, mt.name))
        log.info(
            "%s:%s for %s -> %s (%s)",
            repo,
            ref,
            mt.name,
            result.digest,
            result.chosen,
        )
        return _manifest_response(ManifestBody(result.body, index.media_type, result.digest), head)

    async def _serve_view_digest(
        self, record: FilteredRecord, mt: MachineType, repo: str, accept: str, head: bool
    ) -> Response:
        """A view asked for by its digest: the caller's own, or a recomputed one."""
        # A view equal to its own upstream index is the upstream's bytes: everyone's.
        if not record.is_view_of(repo, mt.name) and record.digest not in record.sources(repo):
            # Not known as this type's view (yet): recompute this type's view of each
            # source index; equal bytes make it this type's view too.
            for source in record.sources(repo):
                got = await self._fetch_manifest(repo, source, accept)
                if isinstance(got, Response):
                    continue
                try:
                    result = await self._filter(got, mt)
                except BadDocumentError:
                    continue
                if not isinstance(result, NoBuildFits) and result.digest == record.digest:
                    record = self.filtered.put(
                        record.digest, record.body, record.media_type, View(repo, source, mt.name)
                    )
                    break
            else:
                return error_response(
                    403,
                    ErrorCode.DENIED,
                    f"manifest {record.digest} is another machine type's view of {repo}; machine type "
                    f"{mt.name!r} may pull {repo} by tag or by the digest of its own view",
                )
        return _manifest_response(ManifestBody(record.body, record.media_type, record.digest), head)

    async def _fetch_manifest(self, repo: str, ref: str, accept: str) -> ManifestBody | Response:
        """The upstream's manifest ``ref``, verified: by digest against ``ref``, by tag
        against the upstream's Docker-Content-Digest."""
        by_digest = DIGEST_RE.match(ref) is not None
        limit = self.limits.max_manifest_bytes
        if by_digest and ref in self._manifests:
            self._manifests.move_to_end(ref)
            return self._manifests[ref]
        response = await self.upstream.request(
            "GET", f"/v2/{repo}/manifests/{ref}", repo=repo, headers={"Accept": accept}
        )
        try:
            if response.status_code != 200:
                return upstream_error(
                    response.status_code, await _read_capped(response, ERROR_LIMIT) or b"", "manifest"
                )
            body = await _read_capped(response, limit)
        finally:
            await response.aclose()
        if body is None:
            return error_response(
                502,
                ErrorCode.MANIFEST_INVALID,
                f"upstream manifest {repo}:{ref} is over {limit} bytes (limits.max_manifest_bytes)",
            )
        expected = ref if by_digest else response.headers.get("docker-content-digest", "")
        if expected and DIGEST_RE.match(expected):
            hasher = new_hasher(expected)
            hasher.update(body)
            actual = f"{expected.split(':', 1)[0]}:{hasher.hexdigest()}"
            if actual != expected:
                message = f"upstream manifest {repo}@{expected} hashes to {actual}; not passed on"
                log.error("%s", message)
                return error_response(502, ErrorCode.DIGEST_INVALID, message, {"digest": expected})
        else:
            expected = digest_of(body)  # nothing to check against: name it by its bytes
        media_type = _bare(response.headers.get("content-type")) or sniff_media_type(body) or ""
        if media_type in ("", "application/json", "text/plain"):
            media_type = sniff_media_type(body) or media_type
        # Never passed on (or cached) unless it is the JSON of its media type (issue 23: a
        # redirect to a web page was; issue 38: an HTML body labelled a manifest was).
        # A big index is parsed off the event loop.
        if len(body) > _INLINE_CHECK:
            problem = await self.offload.run(len(body), manifest_problem, body, media_type)  # not the GIL
        else:
            problem = manifest_problem(body, media_type)
        if problem is not None:
            return error_response(502, ErrorCode.MANIFEST_INVALID, f"upstream manifest {repo}:{ref} {problem}")
        got = ManifestBody(body, media_type, expected)
        if len(body) <= self.limits.manifest_cache_bytes and expected not in self._manifests:
            self._manifests[expected] = got
            self._manifest_bytes += len(body)
        while self._manifests and (
            len(self._manifests) > _MEMO_SIZE or self._manifest_bytes > self.limits.manifest_cache_bytes
        ):
            self._manifest_bytes -= len(self._manifests.popitem(last=False)[1].body)
        return got

    async def confirm(self, repo: str, kind: str, ref: str) -> Response | None:
        """None when digest ``ref`` is ``repo``'s on the upstream (or a view of ``repo``, or
        a tag: those are fetched by name anyway); else the upstream's answer to a HEAD."""
        if kind == "tags" or not DIGEST_RE.match(ref) or (repo, ref) in self._confirmed:
            return None
        if kind == "manifests":
            record = self.filtered.get(ref)
            if record is not None and record.sources(repo):
                return None
        headers = {"Accept": ACCEPT_ANY_MANIFEST} if kind == "manifests" else None
        response = await self.upstream.request("HEAD", f"/v2/{repo}/{kind}/{ref}", repo=repo, headers=headers)
        await response.aclose()
        if response.status_code != 200:
            status = response.status_code
            code = ErrorCode.BLOB_UNKNOWN if kind == "blobs" else ErrorCode.MANIFEST_UNKNOWN
            return error_response(status if status != 200 else 404, code, f"{repo}@{ref}: upstream answered {status}")
        self._confirmed[(repo, ref)] = None
        while len(self._confirmed) > _CONFIRMED_SIZE:
            self._confirmed.pop(next(iter(self._confirmed)))
        return None

    # --- blobs -------------------------------------------------------------------------

    async def blob(self, request: Request, repo: str, digest: str) -> Response | VerifiedBody:
        if not DIGEST_RE.match(digest):
            return error_response(400, ErrorCode.DIGEST_INVALID, f"{digest!r} is not a sha256 or sha512 digest")
        headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest}
        size = self.blobs.size(digest)
        if request.method == "HEAD":
            return await self._head_blob(repo, digest, headers, size)
        if size is None:
            # Into the cache first (verified, retried, once for all who ask): see fetch.py.
            failed = await self.fetcher.fill(repo, digest, receive=request.receive)
            if failed is not None:
                return failed
            size = self.blobs.size(digest)
            if size is None:  # dropped again at once (found damaged by a concurrent reader)
                return error_response(502, ErrorCode.UNAVAILABLE, f"blob {repo}@{digest} left the cache; try again")
        self.blobs.touch(digest)
        cached = FileChunks(self.blobs.path(digest), digest, self.executor)
        return VerifiedBody(
            cached,
            headers={**headers, "Content-Length": str(size)},
            buffer_limit=self.buffer_limit,
            what="cached blob",
            on_mismatch=lambda _actual: self.blobs.remove(digest),
        )

    async def _head_blob(self, repo: str, digest: str, headers: dict[str, str], size: int | None) -> Response:
        if size is not None:
            return Response(b"", headers={**headers, "Content-Length": str(size)})
        response = await self.upstream.request("HEAD", f"/v2/{repo}/blobs/{digest}", repo=repo)
        await response.aclose()
        if response.status_code != 200:
            status = response.status_code
            code = ErrorCode.BLOB_UNKNOWN if status == 404 else STATUS_CODES.get(status, ErrorCode.UNKNOWN)
            return error_response(status, code, f"upstream answered {status} for blob {repo}@{digest}")
        length = response.headers.get("content-length")
        return Response(b"", headers={**headers, **({"Content-Length": length} if length else {})})

    async def tags(self, request: Request, repo: str) -> Response:
        query = f"?{request.url.query}" if request.url.query else ""
        response = await self.upstream.request("GET", f"/v2/{repo}/tags/list{query}", repo=repo)
        try:
            if response.status_code != 200:
                return upstream_error(
                    response.status_code, await _read_capped(response, ERROR_LIMIT) or b"", "repository"
                )
            body = await _read_capped(response, self.limits.max_manifest_bytes)
        finally:
            await response.aclose()
        if body is None:
            return error_response(502, ErrorCode.UNAVAILABLE, f"upstream tag list of {repo} is too large")
        headers = {k: v for k, v in response.headers.items() if k.lower() == "link"}
        return Response(body or b"", media_type="application/json", headers=headers)


def _bare(media_type: str | None) -> str:
    return (media_type or "").split(";", 1)[0].strip().lower()


async def _read_capped(response: httpx.Response, limit: int) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _manifest_response(got: ManifestBody, head: bool) -> Response:
    headers = {"Docker-Content-Digest": got.digest, "Content-Length": str(len(got.body))}
    response = Response(b"" if head else got.body, media_type=got.media_type or None, headers=headers)
    return response


def upstream_error(status: int, raw: bytes, what: str) -> Response:
    """The upstream's error as an OCI error body, with the upstream's status.

    An OCI error body passes through as it came; anything else is wrapped.  A 401 is
    the one exception: it means the upstream refused *the proxy's* credentials, and
    passing it on would send the client to log in again, so it becomes a 502."""
    if status == 401:
        return error_response(
            502,
            ErrorCode.UNAUTHORIZED,
            "the upstream registry refused the proxy's credentials; "
            "set upstream_username and upstream_password in the proxy's config",
        )
    try:
        data = json.loads(raw)
        errors = data.get("errors") if isinstance(data, dict) else None
        if isinstance(errors, list) and errors and all(isinstance(e, dict) and "code" in e for e in errors):
            return Response(json.dumps({"errors": errors}).encode(), status, media_type="application/json")
    except (ValueError, UnicodeDecodeError):
        pass
    code = STATUS_CODES.get(status, ErrorCode.UNKNOWN)
    if status == 404:
        code = {"manifest": ErrorCode.MANIFEST_UNKNOWN, "blob": ErrorCode.BLOB_UNKNOWN}.get(what, code)
    text = raw[:200].decode("utf-8", "replace").strip()
    return error_response(
        status,
        code,
        f"upstream registry answered {status} for the {what}",
        {"upstream_status": status, "upstream_body": text} if text else {"upstream_status": status},
    )

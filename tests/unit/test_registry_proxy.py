"""The proxy's OCI endpoints against a fake upstream (``hetflow.registry.fakes.fake``):
views per machine type, digests, auth, verification, caching and error mapping."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from hetflow.registry import FakeRegistry, MachineTypeDecl, Settings, create_app

REPO = "lab/app"
BUILDS = {"generic": [], "v3": ["x86-64-v3"], "sm80": ["x86-64-v3", "gpu:sm_80"]}
TYPES = ("x86-64-v2", "haswell-cpu", "zen3-cpu", "a100-node")


class AppClient:
    """A synchronous client for the app (httpx over ASGI on a private event loop);
    starlette's own AppClient warns that its httpx support is going away."""

    def __init__(self, app: Starlette, base_url: str) -> None:
        self.app = app
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def __enter__(self) -> AppClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.run_until_complete(self.app.state.registry.close())
        self._loop.close()


@dataclass
class Env:
    fake: FakeRegistry
    client: AppClient
    state: Path
    index: str  # the upstream index digest

    def token(self, machine_type: str) -> str:
        return (self.state / "tokens" / machine_type).read_text().strip()

    def auth(self, machine_type: str) -> dict[str, str]:
        got = self.client.get("/token", params={"service": "hetflow"}, auth=(machine_type, self.token(machine_type)))
        assert got.status_code == 200, got.text
        return {"Authorization": f"Bearer {got.json()['token']}"}

    def get(self, path: str, machine_type: str, method: str = "GET") -> httpx.Response:
        return self.client.request(method, path, headers=self.auth(machine_type))

    def build_of(self, manifest_digest: str) -> str:
        manifest = json.loads(self.fake.manifests[REPO][manifest_digest][0])
        return str(json.loads(self.fake.blobs[manifest["config"]["digest"]])["config"]["Env"][0])


def _settings(state: Path, **changes: object) -> Settings:
    decls = tuple(MachineTypeDecl(profile=p) for p in TYPES)
    return Settings(upstream="http://upstream.test", state_dir=state, machine_types=decls, **changes)  # type: ignore[arg-type]


def _start(fake: FakeRegistry, state: Path, **changes: object) -> AppClient:
    return AppClient(create_app(_settings(state, **changes), transport=fake.transport()), base_url="http://proxy.test")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeRegistry()
    index = fake.push_builds(REPO, "v1", BUILDS)
    with _start(fake, tmp_path / "state") as client:
        yield Env(fake, client, tmp_path / "state", index)


def _sha(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v2/", f"/v2/{REPO}/manifests/v1", f"/v2/{REPO}/blobs/sha256:{'0' * 64}"])
def test_no_bearer_gets_401_and_the_token_challenge(env: Env, path: str) -> None:
    got = env.client.get(path)
    assert got.status_code == 401
    challenge = got.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="http://proxy.test/token",service="hetflow"')
    if path != "/v2/":
        assert challenge.endswith(f',scope="repository:{REPO}:pull"')
    assert got.json()["errors"][0]["code"] == "UNAUTHORIZED"
    assert got.headers["docker-distribution-api-version"] == "registry/2.0"


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param("Bearer hfb.e30.AAAA", id="forged"),
        pytest.param("Bearer not-a-token", id="garbage"),
        pytest.param("Basic eDp5", id="basic-on-v2"),
    ],
)
def test_a_bad_bearer_gets_401(env: Env, authorization: str) -> None:
    got = env.client.get(f"/v2/{REPO}/manifests/v1", headers={"Authorization": authorization})
    assert got.status_code == 401
    assert "www-authenticate" in got.headers


@pytest.mark.parametrize(
    ("user", "password", "message"),
    [
        pytest.param("a100-node", "hft_wrong", "do not match", id="wrong-token"),
        pytest.param("nobody", "hft_x", "do not match", id="unknown-type"),
        pytest.param("", "", "no credentials: log in first", id="no-user"),
    ],
)
def test_the_token_endpoint_refuses_bad_credentials(env: Env, user: str, password: str, message: str) -> None:
    got = env.client.get("/token", auth=(user, password) if user else None)
    assert got.status_code == 401
    assert message in got.json()["errors"][0]["message"]


def test_a_type_token_does_not_log_in_as_another_type(env: Env) -> None:
    got = env.client.get("/token", auth=("x86-64-v2", env.token("a100-node")))
    assert got.status_code == 401


def test_the_token_endpoint_takes_the_oauth2_password_grant(env: Env) -> None:
    form = {"grant_type": "password", "username": "a100-node", "password": env.token("a100-node"), "service": "hetflow"}
    got = env.client.post("/token", data=form)
    assert got.status_code == 200
    assert got.json()["access_token"] == got.json()["token"]
    assert env.client.get("/v2/", headers={"Authorization": f"Bearer {got.json()['token']}"}).status_code == 200


def test_revoking_tokens_kills_their_bearers(env: Env) -> None:
    headers = env.auth("a100-node")
    assert env.client.get("/v2/", headers=headers).status_code == 200
    env.client.app.state.registry.types.revoke_tokens("a100-node")
    assert env.client.get("/v2/", headers=headers).status_code == 401


# --- views ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine_type", "build"), [("x86-64-v2", "generic"), ("haswell-cpu", "v3"), ("a100-node", "sm80")]
)
def test_a_tag_gives_each_type_its_own_build_under_the_views_digest(env: Env, machine_type: str, build: str) -> None:
    got = env.get(f"/v2/{REPO}/manifests/v1", machine_type)
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/vnd.oci.image.index.v1+json"
    assert got.headers["docker-content-digest"] == _sha(got.content)
    assert got.headers["docker-content-digest"] != env.index
    entries = got.json()["manifests"]
    assert len(entries) == 1 and env.build_of(entries[0]["digest"]) == f"BUILD={build}"


def test_head_says_what_get_sends(env: Env) -> None:
    get = env.get(f"/v2/{REPO}/manifests/v1", "a100-node")
    head = env.get(f"/v2/{REPO}/manifests/v1", "a100-node", method="HEAD")
    assert head.status_code == 200 and head.content == b""
    for name in ("docker-content-digest", "content-type", "content-length"):
        assert head.headers[name] == get.headers[name]


def test_the_upstream_digest_gets_the_upstream_bytes(env: Env) -> None:
    got = env.get(f"/v2/{REPO}/manifests/{env.index}", "x86-64-v2")
    assert got.status_code == 200
    assert got.content == env.fake.manifests[REPO][env.index][0]
    assert got.headers["docker-content-digest"] == env.index == _sha(got.content)


def test_the_views_digest_gets_the_view(env: Env) -> None:
    view = env.get(f"/v2/{REPO}/manifests/v1", "haswell-cpu")
    digest = view.headers["docker-content-digest"]
    again = env.get(f"/v2/{REPO}/manifests/{digest}", "haswell-cpu")
    assert (again.status_code, again.content, again.headers["docker-content-digest"]) == (200, view.content, digest)


def test_another_types_view_is_denied(env: Env) -> None:
    digest = env.get(f"/v2/{REPO}/manifests/v1", "a100-node").headers["docker-content-digest"]
    got = env.get(f"/v2/{REPO}/manifests/{digest}", "x86-64-v2")
    assert got.status_code == 403
    error = got.json()["errors"][0]
    assert error["code"] == "DENIED" and "another machine type's view" in error["message"]
    assert "a100-node" not in error["message"]


def test_a_view_two_types_share_is_both_of_theirs(env: Env) -> None:
    # haswell and zen3 both resolve to the v3 build: the same bytes, the same digest,
    # and zen3 may ask by digest before it ever asked for the tag.
    digest = env.get(f"/v2/{REPO}/manifests/v1", "haswell-cpu").headers["docker-content-digest"]
    got = env.get(f"/v2/{REPO}/manifests/{digest}", "zen3-cpu")
    assert got.status_code == 200 and got.headers["docker-content-digest"] == digest


def test_a_view_is_not_served_under_another_repository(env: Env) -> None:
    env.fake.push_builds("lab/other", "v1", {"generic": []})
    digest = env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2").headers["docker-content-digest"]
    got = env.get(f"/v2/lab/other/manifests/{digest}", "x86-64-v2")
    assert got.status_code == 404 and got.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"


def test_views_and_their_digests_survive_a_restart(tmp_path: Path) -> None:
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", BUILDS)
    state = tmp_path / "state"
    with _start(fake, state) as client:
        env = Env(fake, client, state, "")
        first = env.get(f"/v2/{REPO}/manifests/v1", "a100-node")
        headers = env.auth("a100-node")
    with _start(fake, state) as client:
        env = Env(fake, client, state, "")
        # The old bearer still works (its key is in the state dir) ...
        assert client.get("/v2/", headers=headers).status_code == 200
        # ... the view's digest is served before anyone asks for the tag again ...
        fake.requests.clear()
        digest = first.headers["docker-content-digest"]
        by_digest = client.get(f"/v2/{REPO}/manifests/{digest}", headers=headers)
        assert (by_digest.status_code, by_digest.content) == (200, first.content)
        assert fake.requests == []
        # ... and the tag gives the same bytes.
        assert env.get(f"/v2/{REPO}/manifests/v1", "a100-node").content == first.content


def test_a_plain_manifest_passes_through_unchanged(env: Env) -> None:
    desc = env.fake.push_image(REPO, "single", tag="single")
    got = env.get(f"/v2/{REPO}/manifests/single", "x86-64-v2")
    assert got.status_code == 200
    assert got.content == env.fake.manifests[REPO]["single"][0]
    assert got.headers["docker-content-digest"] == desc["digest"]


def test_no_fitting_build_is_manifest_unknown_with_the_reasons(env: Env) -> None:
    env.fake.push_builds(REPO, "gpu-only", {"sm90": ["gpu:sm_90"]})
    got = env.get(f"/v2/{REPO}/manifests/gpu-only", "a100-node")
    assert got.status_code == 404
    error = got.json()["errors"][0]
    assert error["code"] == "MANIFEST_UNKNOWN"
    assert "no build of lab/app:gpu-only runs on machine type 'a100-node'" in error["message"]
    assert "needs compute capability 9.0; node has 8.0" in error["message"]
    assert error["detail"]["machine_type"] == "a100-node"


# --- verification and caching -----------------------------------------------------------------


def _config_digest(env: Env, machine_type: str) -> str:
    view = env.get(f"/v2/{REPO}/manifests/v1", machine_type).json()
    manifest = env.get(f"/v2/{REPO}/manifests/{view['manifests'][0]['digest']}", machine_type).json()
    return str(manifest["config"]["digest"])


def test_blobs_are_verified_cached_and_served_from_the_cache(env: Env) -> None:
    digest = _config_digest(env, "a100-node")
    first = env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node")
    assert first.status_code == 200 and _sha(first.content) == digest
    assert first.headers["docker-content-digest"] == digest
    env.fake.requests.clear()
    again = env.get(f"/v2/{REPO}/blobs/{digest}", "x86-64-v2")
    assert again.content == first.content
    head = env.get(f"/v2/{REPO}/blobs/{digest}", "x86-64-v2", method="HEAD")
    assert head.headers["content-length"] == str(len(first.content))
    assert not [r for r in env.fake.requests if "/blobs/" in r[1]]


def test_a_corrupted_upstream_blob_is_never_a_success(env: Env) -> None:
    digest = _config_digest(env, "a100-node")
    env.fake.corrupt(digest)
    got = env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node")
    assert got.status_code == 502
    assert got.json()["errors"][0]["code"] == "DIGEST_INVALID"
    assert not (env.state / "cache" / "blobs" / "sha256" / digest.removeprefix("sha256:")).exists()


def test_a_blob_damaged_in_the_cache_is_dropped_not_served(env: Env) -> None:
    digest = _config_digest(env, "a100-node")
    assert env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node").status_code == 200
    cached = env.state / "cache" / "blobs" / "sha256" / digest.removeprefix("sha256:")
    cached.write_bytes(b"X" + cached.read_bytes()[1:])
    assert env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node").status_code == 502
    assert not cached.exists()
    assert env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node").status_code == 200  # fetched again


class _BreaksOff(httpx.AsyncByteStream):  # the proxy reads blobs with httpx's async client
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"the first bytes"
        raise httpx.ReadError("connection reset by peer")


def test_an_upstream_that_breaks_off_mid_blob_is_502_and_nothing_is_cached(env: Env) -> None:
    digest = _config_digest(env, "a100-node")
    real_handle = env.fake.handle

    def breaks(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(digest):
            return httpx.Response(200, headers={"Content-Length": "1000"}, stream=_BreaksOff())
        return real_handle(request)

    env.fake.handle = breaks  # type: ignore[method-assign]
    got = env.get(f"/v2/{REPO}/blobs/{digest}", "a100-node")
    assert got.status_code == 502
    assert got.json()["errors"][0]["code"] == "UNAVAILABLE"
    assert not [p for p in (env.state / "cache").rglob("*") if p.is_file()]  # not even a partial file


def test_a_corrupted_manifest_is_never_served(env: Env) -> None:
    manifest_digest = env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2").json()["manifests"][0]["digest"]
    body, media_type = env.fake.manifests[REPO][manifest_digest]
    env.fake.manifests[REPO][manifest_digest] = (body.replace(b"{", b"{ ", 1), media_type)
    got = env.get(f"/v2/{REPO}/manifests/{manifest_digest}", "x86-64-v2")
    assert got.status_code == 502 and got.json()["errors"][0]["code"] == "DIGEST_INVALID"


def test_a_tag_whose_bytes_do_not_match_the_upstreams_digest_is_refused(env: Env) -> None:
    real_handle = env.fake.handle

    def lying(request: httpx.Request) -> httpx.Response:
        response = real_handle(request)
        if request.url.path.endswith("/manifests/v1"):
            response.headers["Docker-Content-Digest"] = "sha256:" + "0" * 64
        return response

    env.fake.handle = lying  # type: ignore[method-assign]
    got = env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2")
    assert got.status_code == 502 and got.json()["errors"][0]["code"] == "DIGEST_INVALID"


# --- upstream errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        pytest.param(f"/v2/{REPO}/manifests/nope", 404, "MANIFEST_UNKNOWN", id="unknown-tag"),
        pytest.param("/v2/lab/nothing/manifests/v1", 404, "NAME_UNKNOWN", id="unknown-repo"),
        pytest.param(f"/v2/{REPO}/manifests/sha256:{'1' * 64}", 404, "MANIFEST_UNKNOWN", id="unknown-digest"),
        pytest.param(f"/v2/{REPO}/blobs/sha256:{'1' * 64}", 404, "BLOB_UNKNOWN", id="unknown-blob"),
        pytest.param(f"/v2/{REPO}/blobs/md5:abc", 400, "DIGEST_INVALID", id="bad-digest"),
        pytest.param("/v2/Bad_Name/manifests/v1", 404, "NAME_INVALID", id="bad-name"),
        pytest.param(f"/v2/{REPO}/manifests/bad!tag", 400, "TAG_INVALID", id="bad-tag"),
    ],
)
def test_upstream_and_request_errors_are_oci_errors(env: Env, path: str, status: int, code: str) -> None:
    got = env.get(path, "x86-64-v2")
    assert got.status_code == status
    assert got.json()["errors"][0]["code"] == code


def test_a_non_oci_upstream_error_is_wrapped_with_its_status(env: Env) -> None:
    env.fake.handle = lambda request: httpx.Response(503, text="<html>maintenance</html>")  # type: ignore[method-assign]
    got = env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2")
    assert got.status_code == 503
    error = got.json()["errors"][0]
    assert error["code"] == "UNKNOWN" and error["detail"]["upstream_body"] == "<html>maintenance</html>"


def test_an_unreachable_upstream_is_502_unavailable(env: Env) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    env.fake.handle = down  # type: ignore[method-assign]
    got = env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2")
    assert got.status_code == 502
    assert got.json()["errors"][0]["code"] == "UNAVAILABLE"


def test_the_proxy_is_read_only(env: Env) -> None:
    got = env.client.post(f"/v2/{REPO}/blobs/uploads/", headers=env.auth("x86-64-v2"))
    assert got.status_code in (404, 405)
    got = env.client.put(f"/v2/{REPO}/manifests/v2", headers=env.auth("x86-64-v2"), content=b"{}")
    assert got.status_code == 405 and got.json()["errors"][0]["code"] == "UNSUPPORTED"


def test_tags_pass_through(env: Env) -> None:
    real_handle = env.fake.handle

    def with_tags(request: httpx.Request) -> httpx.Response:
        if request.url.path == f"/v2/{REPO}/tags/list":
            return httpx.Response(200, json={"name": REPO, "tags": ["v1"]})
        return real_handle(request)

    env.fake.handle = with_tags  # type: ignore[method-assign]
    assert env.get(f"/v2/{REPO}/tags/list", "x86-64-v2").json() == {"name": REPO, "tags": ["v1"]}


# --- upstream credentials ---------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_the_proxy_logs_in_to_an_upstream_that_asks(tmp_path: Path, scheme: str) -> None:
    fake = FakeRegistry(auth=scheme)
    fake.push_builds(REPO, "v1", BUILDS)
    changes = {"upstream_username": fake.username, "upstream_password": fake.password}
    with _start(fake, tmp_path / "state", **changes) as client:
        env = Env(fake, client, tmp_path / "state", "")
        assert env.get(f"/v2/{REPO}/manifests/v1", "a100-node").status_code == 200
        assert env.get(f"/v2/{REPO}/manifests/v1", "x86-64-v2").status_code == 200
    if scheme == "bearer":
        assert fake.requests.count(("GET", "/token")) == 1  # kept per scope


def test_an_upstream_refusing_the_proxy_is_502_not_401(tmp_path: Path) -> None:
    fake = FakeRegistry(auth="basic")
    fake.push_builds(REPO, "v1", BUILDS)
    with _start(fake, tmp_path / "state", upstream_username="robot", upstream_password="wrong") as client:
        got = Env(fake, client, tmp_path / "state", "").get(f"/v2/{REPO}/manifests/v1", "x86-64-v2")
    assert got.status_code == 502
    assert "refused the proxy's credentials" in got.json()["errors"][0]["message"]


# --- machine-type registration -------------------------------------------------------------------


def _node_json(profile: str = "t4-node") -> str:
    from hetflow.inventory import profile_node

    return profile_node(profile).model_copy(update={"name": "gpu07"}).model_dump_json()


def test_registering_a_node_gives_a_token_that_logs_in(env: Env) -> None:
    got = env.client.post("/hetflow/v1/machine-types", content=_node_json())
    assert got.status_code == 201
    data = got.json()
    assert data["created"] and data["node"]["name"] == data["machine_type"]
    bearer = env.client.get("/token", auth=(data["machine_type"], data["token"]))
    assert bearer.status_code == 200
    again = env.client.post("/hetflow/v1/machine-types", content=_node_json())
    assert again.status_code == 200 and again.json()["machine_type"] == data["machine_type"]
    listed = env.client.get("/hetflow/v1/machine-types").json()
    assert data["machine_type"] in [t["name"] for t in listed]
    assert "token" not in json.dumps(listed)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param("{", 400, "NODE_INVALID", id="not-json"),
        pytest.param('{"name": "x"}', 400, "NODE_INVALID", id="not-a-node"),
    ],
)
def test_registering_garbage_is_refused(env: Env, body: str, status: int, code: str) -> None:
    got = env.client.post("/hetflow/v1/machine-types", content=body)
    assert (got.status_code, got.json()["errors"][0]["code"]) == (status, code)


def test_a_name_taken_by_other_hardware_is_a_conflict(env: Env) -> None:
    got = env.client.post("/hetflow/v1/machine-types", params={"name": "a100-node"}, content=_node_json("t4-node"))
    assert got.status_code == 409


def test_an_admin_token_guards_registration(tmp_path: Path) -> None:
    fake = FakeRegistry()
    with _start(fake, tmp_path / "state", admin_token="s3cret-admin-16ch") as client:
        assert client.post("/hetflow/v1/machine-types", content=_node_json()).status_code == 401
        assert client.get("/hetflow/v1/machine-types").status_code == 401
        ok = client.post(
            "/hetflow/v1/machine-types",
            content=_node_json(),
            headers={"Authorization": "Bearer s3cret-admin-16ch"},
        )
        assert ok.status_code == 201

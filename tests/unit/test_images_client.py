"""The registry client against the in-memory FakeRegistry (httpx.MockTransport): the token
challenge flow, Basic auth, digest checks, errors that say what to do."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from hetflow.images import (
    OCI_INDEX,
    OCI_MANIFEST,
    AuthError,
    Challenge,
    DigestMismatchError,
    FakeRegistry,
    NotFoundError,
    RegistryClient,
    RegistryError,
    canonical_json,
    digest_of,
    parse_challenge,
    parse_manifest,
)
from hetflow.images.distribution.fake import TOKEN_REALM

REPO = "team/app"


def client_for(registry: FakeRegistry, **kwargs: str) -> RegistryClient:
    return RegistryClient(registry.base_url, transport=registry.transport(), **kwargs)  # type: ignore[arg-type]


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> RegistryClient:
    return RegistryClient("https://r.test", transport=httpx.MockTransport(handler))


def seen(registry: FakeRegistry) -> list[str]:
    """The requests the registry saw, as "METHOD host path [auth scheme]"."""
    out = []
    for r in registry.requests:
        scheme = r.headers.get("Authorization", "").split(" ")[0]
        out.append(f"{r.method} {r.url.host}{r.url.path}{' ' + scheme if scheme else ''}")
    return out


# --- anonymous reads and writes ------------------------------------------------------------


def test_get_manifest_by_tag_and_by_digest() -> None:
    registry = FakeRegistry()
    desc = registry.add_image(REPO, "v3", env={"BUILD": "v3"})
    with client_for(registry) as client:
        body, media_type, digest = client.get_manifest(REPO, "v3")
        assert (media_type, digest, len(body)) == (OCI_MANIFEST, desc.digest, desc.size)
        assert client.get_manifest(REPO, desc.digest) == (body, media_type, digest)
        assert client.head_manifest(REPO, "v3") == desc


def test_get_blob_is_verified() -> None:
    registry = FakeRegistry()
    desc = registry.add_image(REPO, "v3", env={"BUILD": "v3"})
    with client_for(registry) as client:
        manifest = parse_manifest(client.get_manifest(REPO, "v3")[0])
        config = json.loads(client.get_blob(REPO, manifest.config.digest))
        assert config["config"]["Env"] == ["BUILD=v3"]
    assert desc.digest in registry.manifests


def test_push_blob_and_manifest_then_read_back() -> None:
    registry = FakeRegistry()
    with client_for(registry) as client:
        digest = client.push_blob(REPO, b"hello")
        assert digest == digest_of(b"hello") and registry.blobs[digest] == b"hello"
        before = len(registry.requests)
        assert client.push_blob(REPO, b"hello") == digest  # already there: one HEAD, no upload
        assert len(registry.requests) == before + 1
        index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
        assert client.put_manifest(REPO, "latest", index, OCI_INDEX) == digest_of(index)
        assert client.get_manifest(REPO, "latest") == (index, OCI_INDEX, digest_of(index))


def test_tags_follow_link_pages() -> None:
    registry = FakeRegistry(page_size=2)
    for tag in ("a", "b", "c", "d", "e"):
        registry.add_image(REPO, tag)
    with client_for(registry) as client:
        assert client.tags(REPO) == ["a", "b", "c", "d", "e"]
    assert sum("/tags/list" in line for line in seen(registry)) == 3


def test_manifest_media_type_is_sniffed_when_the_registry_says_json() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=b'{"schemaVersion":2,"manifests":[]}', headers={"Content-Type": "application/json"}
        )

    with mock(handler) as client:
        assert client.get_manifest(REPO, "latest")[1] == OCI_INDEX


# --- bearer tokens --------------------------------------------------------------------------


def test_bearer_challenge_fetches_a_token_with_basic_credentials_and_retries() -> None:
    registry = FakeRegistry(auth="bearer", users={"ci": "secret"})
    registry.add_image(REPO, "v3")
    with client_for(registry, username="ci", password="secret") as client:
        client.get_manifest(REPO, "v3")
        client.get_manifest(REPO, "v3")  # the token is cached for its scope
    assert seen(registry) == [
        f"GET registry.test/v2/{REPO}/manifests/v3",
        "GET auth.test/token Basic",
        f"GET registry.test/v2/{REPO}/manifests/v3 Bearer",
        f"GET registry.test/v2/{REPO}/manifests/v3 Bearer",
    ]
    token_request = registry.requests[1]
    assert token_request.url.params["service"] == "registry.test"
    assert token_request.url.params["scope"] == f"repository:{REPO}:pull"
    assert list(registry.tokens.values()) == [("ci", f"repository:{REPO}:pull")]


def test_push_asks_for_a_push_scope() -> None:
    registry = FakeRegistry(auth="bearer", users={"ci": "secret"})
    with client_for(registry, username="ci", password="secret") as client:
        client.put_manifest(REPO, "x", b'{"schemaVersion":2,"manifests":[]}', OCI_INDEX)
    assert [scope for _, scope in registry.tokens.values()] == [f"repository:{REPO}:pull,push"]


def test_anonymous_pull_token() -> None:
    registry = FakeRegistry(auth="bearer", anonymous_pull=True)
    registry.add_image(REPO, "v3")
    with client_for(registry) as client:
        client.get_manifest(REPO, "v3")
    assert "GET auth.test/token" in seen(registry)


AUTH_FAILURES = {
    "wrong password": (
        {"username": "ci", "password": "wrong"},
        f"the token service {TOKEN_REALM} refused user 'ci' for scope 'repository:{REPO}:pull': "
        "check the user name and password",
    ),
    "no credentials for a private repository": ({}, "refused anonymous access"),
    "a bad fixed token": ({"token": "forged"}, "refused the bearer token"),
}


@pytest.mark.parametrize(("credentials", "message"), AUTH_FAILURES.values(), ids=AUTH_FAILURES.keys())
def test_bearer_failures_are_auth_errors(credentials: dict[str, str], message: str) -> None:
    registry = FakeRegistry(auth="bearer", users={"ci": "secret"})
    registry.add_image(REPO, "v3")
    with client_for(registry, **credentials) as client, pytest.raises(AuthError) as info:
        client.get_manifest(REPO, "v3")
    assert message in str(info.value)


def test_a_good_fixed_token_is_sent_up_front() -> None:
    registry = FakeRegistry(auth="bearer", users={"ci": "secret"})
    registry.add_image(REPO, "v3")
    registry.tokens["given"] = ("ci", f"repository:{REPO}:pull")
    with client_for(registry, token="given") as client:
        client.get_manifest(REPO, "v3")
    assert seen(registry) == [f"GET registry.test/v2/{REPO}/manifests/v3 Bearer"]


# --- basic auth ------------------------------------------------------------------------------


def test_basic_auth_answers_the_challenge_then_sends_it_up_front() -> None:
    registry = FakeRegistry(auth="basic", users={"ci": "secret"})
    registry.add_image(REPO, "v3")
    with client_for(registry, username="ci", password="secret") as client:
        client.get_manifest(REPO, "v3")
        client.tags(REPO)
    assert seen(registry) == [
        f"GET registry.test/v2/{REPO}/manifests/v3",
        f"GET registry.test/v2/{REPO}/manifests/v3 Basic",
        f"GET registry.test/v2/{REPO}/tags/list Basic",
    ]


@pytest.mark.parametrize(
    ("credentials", "message"),
    [({}, "asks for a user name and password"), ({"username": "ci", "password": "nope"}, "refused user 'ci'")],
    ids=["none", "wrong"],
)
def test_basic_auth_failures(credentials: dict[str, str], message: str) -> None:
    registry = FakeRegistry(auth="basic", users={"ci": "secret"})
    registry.add_image(REPO, "v3")
    with client_for(registry, **credentials) as client, pytest.raises(AuthError, match=message):
        client.get_manifest(REPO, "v3")


# --- digests ---------------------------------------------------------------------------------


def test_tampered_manifest_by_tag_is_rejected() -> None:
    registry = FakeRegistry()
    registry.add_image(REPO, "v3")
    registry.tamper(REPO, "v3", b'{"schemaVersion":2,"evil":true}')
    with client_for(registry) as client, pytest.raises(DigestMismatchError, match=f"manifest {REPO}:v3"):
        client.get_manifest(REPO, "v3")


def test_tampered_manifest_by_digest_is_rejected() -> None:
    registry = FakeRegistry()
    desc = registry.add_image(REPO, "v3")
    registry.tamper(REPO, desc.digest, b"{}")
    with client_for(registry) as client, pytest.raises(DigestMismatchError, match=f"manifest {REPO}@sha256:"):
        client.get_manifest(REPO, desc.digest)


def test_tampered_blob_is_rejected() -> None:
    registry = FakeRegistry()
    digest = registry.add_blob(b"layer")
    registry.tamper(REPO, digest, b"other")
    with client_for(registry) as client, pytest.raises(DigestMismatchError, match="not " + digest):
        client.get_blob(REPO, digest)


def test_a_registry_that_lies_about_the_digest_header_is_caught() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest_of(b"something else")}
        return httpx.Response(200, content=b'{"schemaVersion":2}', headers=headers)

    with mock(handler) as client, pytest.raises(DigestMismatchError):
        client.get_manifest(REPO, "v1")


# --- errors ----------------------------------------------------------------------------------


def test_missing_tag_names_it_and_says_what_to_do() -> None:
    registry = FakeRegistry()
    registry.add_image(REPO, "v3")
    with client_for(registry) as client, pytest.raises(NotFoundError) as info:
        client.get_manifest(REPO, "v9")
    message = str(info.value)
    assert f"manifest {REPO}:v9 not found on https://registry.test" in message
    assert "MANIFEST_UNKNOWN" in message and "check the name and tag" in message
    assert info.value.status == 404


def test_unknown_repository() -> None:
    with client_for(FakeRegistry()) as client, pytest.raises(NotFoundError, match="no repository 'nobody/here'"):
        client.tags("nobody/here")


def test_missing_blob() -> None:
    with client_for(FakeRegistry()) as client, pytest.raises(NotFoundError, match="BLOB_UNKNOWN"):
        client.get_blob(REPO, digest_of(b"never pushed"))


def test_unreachable_registry() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with RegistryClient("http://127.0.0.1:9", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(RegistryError, match=r"cannot reach the registry at http://127\.0\.0\.1:9/v2/"):
            client.get_manifest(REPO, "v1")
        with pytest.raises(RegistryError, match="cannot reach"):
            client.ping()


def test_server_error_keeps_status() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"errors": [{"code": "UNKNOWN", "message": "disk full"}]})

    with mock(handler) as client, pytest.raises(RegistryError, match="HTTP 500 \\(UNKNOWN: disk full\\)") as info:
        client.get_blob(REPO, digest_of(b"x"))
    assert info.value.status == 500 and not isinstance(info.value, NotFoundError)


def test_denied_is_an_auth_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            403, json={"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]}
        )

    with mock(handler) as client, pytest.raises(AuthError, match="lacks access"):
        client.put_manifest(REPO, "x", b"{}", OCI_INDEX)


CHALLENGES = {
    "docker hub": (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull"',
        Challenge(
            "bearer",
            {
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/busybox:pull",
            },
        ),
    ),
    "push scope with comma": (
        'Bearer realm="https://a/t",scope="repository:x:pull,push"',
        Challenge("bearer", {"realm": "https://a/t", "scope": "repository:x:pull,push"}),
    ),
    "error and spaces": (
        'Bearer realm="https://a/t", error="insufficient_scope"',
        Challenge("bearer", {"realm": "https://a/t", "error": "insufficient_scope"}),
    ),
    "basic": ('Basic realm="Registry Realm"', Challenge("basic", {"realm": "Registry Realm"})),
    "unquoted": (
        "Bearer realm=https://a/t,service=reg",
        Challenge("bearer", {"realm": "https://a/t", "service": "reg"}),
    ),
}


@pytest.mark.parametrize(("header", "challenge"), CHALLENGES.values(), ids=CHALLENGES.keys())
def test_parse_challenge(header: str, challenge: Challenge) -> None:
    assert parse_challenge(header) == challenge


def test_no_challenge() -> None:
    assert parse_challenge("") is None

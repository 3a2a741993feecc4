"""Bearer tokens, Basic credentials and the challenge header of the registry proxy."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest

from hetflow.registry.server.auth import BadAuthorization, BearerSigner, bearer_challenge, parse_basic, parse_bearer

KEY = b"k" * 32


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_bearer_names_its_machine_type_and_token() -> None:
    clock = Clock()
    signer = BearerSigner(KEY, 300, clock)
    issued = signer.issue("a100-node", "tok1")
    grant = signer.verify(issued.token)
    assert grant is not None
    assert (grant.machine_type, grant.token_id, grant.expires) == ("a100-node", "tok1", int(clock.now) + 300)
    assert issued.expires_in == 300
    assert issued.issued_at.endswith("Z")


def test_a_bearer_expires() -> None:
    clock = Clock()
    signer = BearerSigner(KEY, 300, clock)
    token = signer.issue("t", "k").token
    clock.now += 299
    assert signer.verify(token) is not None
    clock.now += 2
    assert signer.verify(token) is None


def _tamper_type(token: str) -> str:
    prefix, payload, mac = token.split(".")
    claims = base64.urlsafe_b64decode(payload + "==").replace(b'"t"', b'"x"')
    return ".".join([prefix, base64.urlsafe_b64encode(claims).rstrip(b"=").decode(), mac])


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"), id="mac-changed"),
        pytest.param(_tamper_type, id="payload-changed"),
        pytest.param(lambda t: t.replace("hfb.", "xyz.", 1), id="wrong-prefix"),
        pytest.param(lambda t: t.rsplit(".", 1)[0], id="no-mac"),
        pytest.param(lambda t: "", id="empty"),
        pytest.param(lambda t: "hfb.!!!.!!!", id="garbage"),
    ],
)
def test_a_changed_or_malformed_bearer_is_refused(mangle: Callable[[str], str]) -> None:
    signer = BearerSigner(KEY, 300)
    token = signer.issue("t", "k").token
    assert signer.verify(mangle(token)) is None


def test_a_bearer_from_another_key_is_refused() -> None:
    token = BearerSigner(b"a" * 32, 300).issue("t", "k").token
    assert BearerSigner(b"b" * 32, 300).verify(token) is None


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(_basic("a100-node:hft_x"), ("a100-node", "hft_x"), id="plain"),
        pytest.param(_basic("t:pa:ss"), ("t", "pa:ss"), id="colon-in-password"),
        pytest.param("basic " + base64.b64encode(b"t:p").decode(), ("t", "p"), id="lower-case-scheme"),
        pytest.param(_basic("m\u00fcller:pw"), ("m\u00fcller", "pw"), id="utf8-login"),
        pytest.param(None, None, id="missing"),
    ],
)
def test_parse_basic(header: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_basic(header) == expected


@pytest.mark.parametrize(
    ("header", "named"),
    [
        pytest.param(_basic("no-colon"), "no ':'", id="no-colon"),
        pytest.param("Basic %%%", "not base64", id="not-base64"),
        pytest.param("Basic ", "empty", id="empty"),
        pytest.param("Basic m\u00fcller", "non-ASCII", id="raw-non-ascii"),
        pytest.param("Basic " + base64.b64encode("m\u00fc:pw".encode("latin-1")).decode(), "UTF-8", id="latin1"),
        pytest.param("Bearer abc", "scheme is bearer", id="bearer"),
        pytest.param("\u00fc\u00fc abc", "scheme is not Basic", id="non-ascii-scheme"),
    ],
)
def test_parse_basic_names_what_is_wrong(header: str, named: str) -> None:
    with pytest.raises(BadAuthorization, match=re.escape(named)):
        parse_basic(header)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param("Bearer abc", "abc", id="plain"),
        pytest.param("bearer abc ", "abc", id="lower-case"),
        pytest.param("Bearer ", None, id="empty"),
        pytest.param("Basic abc", None, id="basic"),
        pytest.param(None, None, id="missing"),
    ],
)
def test_parse_bearer(header: str | None, expected: str | None) -> None:
    assert parse_bearer(header) == expected


def test_the_challenge_has_realm_service_and_scope() -> None:
    # distribution docs/spec/auth/token.md, "How to authenticate".
    assert (
        bearer_challenge("http://127.0.0.1:5080/token", "hetflow", "repository:lab/app:pull")
        == 'Bearer realm="http://127.0.0.1:5080/token",service="hetflow",scope="repository:lab/app:pull"'
    )
    assert bearer_challenge("http://h/token", "hetflow") == 'Bearer realm="http://h/token",service="hetflow"'

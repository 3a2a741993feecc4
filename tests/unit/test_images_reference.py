"""Image references: what podman and docker accept, hetflow's localhost rule, clear errors."""

from __future__ import annotations

import pytest

from hetflow.images import BadReferenceError, ImageReference, parse_reference
from hetflow.spec.fields.imageref import ReferenceSyntaxError

D = "sha256:" + "0123456789abcdef" * 4

GOOD = {
    "docker hub official": ("busybox", ImageReference("docker.io", "library/busybox")),
    "docker hub user": ("qnib/bench:cpu-skylake", ImageReference("docker.io", "qnib/bench", "cpu-skylake")),
    "docker hub explicit": ("docker.io/library/alpine:3", ImageReference("docker.io", "library/alpine", "3")),
    "registry with port": ("127.0.0.1:5000/hf/app:v3", ImageReference("127.0.0.1:5000", "hf/app", "v3")),
    "localhost with port is a registry": ("localhost:5000/app", ImageReference("localhost:5000", "app")),
    "localhost is local storage": (
        "localhost/hetflow-test/busybox:latest",
        ImageReference(None, "hetflow-test/busybox", "latest"),
    ),
    "dotted registry": ("ghcr.io/org/team/app:1.2.3", ImageReference("ghcr.io", "org/team/app", "1.2.3")),
    "digest only": (f"quay.io/org/app@{D}", ImageReference("quay.io", "org/app", None, D)),
    "tag and digest": (f"quay.io/org/app:v1@{D}", ImageReference("quay.io", "org/app", "v1", D)),
    "separators": ("reg.io/a.b/c__d/e-f---g:T_1.x", ImageReference("reg.io", "a.b/c__d/e-f---g", "T_1.x")),
    "ipv6 registry": ("[::1]:5000/app:1", ImageReference("[::1]:5000", "app", "1")),
    "surrounding space trimmed": ("  busybox:1  ", ImageReference("docker.io", "library/busybox", "1")),
}


@pytest.mark.parametrize(("text", "expected"), GOOD.values(), ids=GOOD.keys())
def test_parse(text: str, expected: ImageReference) -> None:
    ref = parse_reference(text)
    assert ref == expected
    assert parse_reference(str(ref)) == ref  # str() round-trips


BAD = {
    "empty": ("", "it is empty"),
    "scheme": ("http://127.0.0.1:5000/app", "leave out the http:// scheme and write '127.0.0.1:5000/app'"),
    "upper case": ("Library/App", "repository names are lower case; write 'library/app'"),
    "bad tag": ("app:-x", "tag '-x'"),
    "long tag": ("app:" + "x" * 129, "tag"),
    "short digest": ("app@sha256:abc", "not ALGORITHM:HEX"),
    "upper-case sha256": ("app@sha256:" + "A" * 64, "64 lower-case hex"),
    "empty repository": ("quay.io/", "repository"),
    "double slash": ("quay.io//app", "repository part ''"),
    "bad characters": ("app!/x", "repository part 'app!'"),
    "space inside": ("my app", "white space"),
    "bad host": ("bad_host.io:x:y/app", "registry"),
}


@pytest.mark.parametrize(("text", "message"), BAD.values(), ids=BAD.keys())
def test_bad_references_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(BadReferenceError, match="expected") as info:
        parse_reference(text)
    assert message in str(info.value)


URLS = {
    "docker hub": ("busybox", False, "https://registry-1.docker.io"),
    "loopback insecure is http": ("127.0.0.1:5000/a", True, "http://127.0.0.1:5000"),
    "localhost port insecure is http": ("localhost:5000/a", True, "http://localhost:5000"),
    "loopback secure stays https": ("127.0.0.1:5000/a", False, "https://127.0.0.1:5000"),
    "remote insecure stays https": ("reg.example:5000/a", True, "https://reg.example:5000"),
    "ipv6 loopback": ("[::1]:5000/a", True, "http://[::1]:5000"),
}


@pytest.mark.parametrize(("text", "insecure", "url"), URLS.values(), ids=URLS.keys())
def test_base_url(text: str, insecure: bool, url: str) -> None:
    assert parse_reference(text).base_url(insecure=insecure) == url


def test_local_reference_has_no_registry() -> None:
    ref = parse_reference("localhost/t/list:1")
    assert ref.local and ref.name == "localhost/t/list" and ref.ref == "1"
    with pytest.raises(ReferenceSyntaxError, match="local podman storage"):  # raised by the spec-level grammar
        ref.base_url()


def test_ref_and_pinning() -> None:
    ref = parse_reference("127.0.0.1:5000/hf/app")
    assert ref.ref == "latest" and ref.host == "127.0.0.1" and ref.is_loopback
    pinned = ref.with_digest(D)
    assert pinned.ref == D and str(pinned) == f"127.0.0.1:5000/hf/app@{D}"

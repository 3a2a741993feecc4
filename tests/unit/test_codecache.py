"""Dataclass methods and regular expressions compiled once and kept between commands
(issue 43: ``hetflow.codecache``)."""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest

from hetflow.codecache import DataclassCode, kept_compiles, kept_path, read_kept

# varied patterns: groups named and not, flags inline and passed, bytes, classes, look-arounds,
# repeats, backreferences, unicode (a big charset), alternations
PATTERNS: list[tuple[str | bytes, int]] = [
    (r"(?P<name>[a-z][a-z0-9-]*)(?::(?P<tag>[\w.-]+))?(?:@(sha256:[0-9a-f]{64}))?$", 0),
    (r"(?i)^\s*(\d+(?:\.\d+)?)\s*(ki|mi|gi|k|m|g)?b?\s*$", 0),
    (rb"^[\x00-\x1f]+|(?<=a)b(?!c)", 0),
    (r"(a|bc)+?\1{2,5}", re.IGNORECASE | re.MULTILINE),
    ("[\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", 0),
    (r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$", re.ASCII),
    (r"\$\{\{\s*(params|steps)\.([A-Za-z_][\w-]*)\s*\}\}", re.VERBOSE),
]
SAMPLES: list[str] = [
    "busybox:1.36@sha256:" + "a" * 64,
    " 64 Mi ",
    "ab",
    "abcbcbcbc",
    "é",
    "a.b-c",
    "${{ params.x }}",
    "",
]


def make_classes() -> tuple[type, type]:
    @dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = ()

    @dataclass(order=True)
    class Job:
        name: str
        deps: list[str] = field(default_factory=list)

    return Point, Job


def check(point: type, job: type) -> None:
    p = point(1, tags=("a",))
    assert repr(p).endswith("Point(x=1, y=0, tags=('a',))")
    assert p == point(1, 0, ("a",)) and p != point(2) and hash(p) == hash(point(1, 0, ("a",)))
    with pytest.raises(FrozenInstanceError):
        p.x = 3
    a, b = job("a"), job("b", ["a"])
    assert a < b and a.deps == [] and a.deps is not job("a").deps
    with pytest.raises(TypeError):
        point()  # x is required


def compile_all() -> list[re.Pattern[str] | re.Pattern[bytes]]:
    re.purge()  # re's own in-process cache would answer without compiling
    return [re.compile(p, f) for p, f in PATTERNS]


def test_second_command_compiles_nothing_and_makes_the_same_classes_and_patterns(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    plain, plain_patterns = make_classes(), compile_all()
    with kept_compiles(env) as noted:  # a pattern first seen is noted (a digest), not kept
        assert noted is not None and noted[1] is not None
        assert compile_all() == plain_patterns
    assert noted[1].made == 0 and noted[1].seen.made >= len(PATTERNS)
    assert not kept_path("regex-code", env).exists() and kept_path("regex-seen", env).is_file()
    with kept_compiles(env) as first:
        assert first is not None and first[1] is not None
        check(*make_classes())
        assert compile_all() == plain_patterns  # Pattern ==: same pattern, flags and engine code
    assert first[0].made > 0 and first[1].made >= len(PATTERNS)
    assert kept_path("dataclass-code", env).is_file() and kept_path("regex-code", env).is_file()
    assert (
        "exec" not in vars(dataclasses) and sys.modules["re._compiler"].compile is first[1].stdlib
    )  # the stdlib's again
    with kept_compiles(env) as second:
        assert second is not None and second[1] is not None
        kept = make_classes()
        check(*kept)
        patterns = compile_all()
    assert second[0].made == 0 and second[0].used
    assert second[1].made == 0 and second[1].seen.made == 0 and len(second[1].used) >= len(PATTERNS)
    check(*plain)
    for made, base in zip(kept, plain, strict=True):
        assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(base)]
        assert made.__init__.__code__.co_code == base.__init__.__code__.co_code  # type: ignore[misc]
    assert patterns == plain_patterns
    for got, want in zip(patterns, plain_patterns, strict=True):
        assert (got.flags, got.groups, got.groupindex) == (want.flags, want.groups, want.groupindex)
        for text in SAMPLES:
            subject: str | bytes = text.encode() if isinstance(want.pattern, bytes) else text
            g, w = got.search(subject), want.search(subject)  # type: ignore[arg-type]
            assert (g and (g.span(), g.groups())) == (w and (w.span(), w.groups()))


def test_forward_references_compile_once_to_the_same_code(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    texts = ["dict[str, list[int]]", "Path | None", "*Ts", "tuple[int, ...]"]
    plain = [typing.ForwardRef(t).__forward_code__ for t in texts]
    for n in range(2):
        with kept_compiles(env) as made:
            assert made is not None
            refs = [typing.ForwardRef(t) for t in texts]
            assert typing.get_type_hints(make_classes()[1]) == {"name": str, "deps": list[str]}
        assert made[2].made >= (len(texts) if n == 0 else 0) and (n == 0 or made[2].made == 0)
        assert [r.__forward_code__ for r in refs] == plain  # code objects compare by their contents
        assert "compile" not in vars(typing)  # the builtin again after the block


def test_a_pattern_made_anew_at_every_command_is_never_kept(tmp_path: Path) -> None:
    """tokenize's pattern differs with the hash seed: each command notes its own, none is kept."""
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    for n in range(3):
        with kept_compiles(env) as made:
            assert made is not None and made[1] is not None
            re.purge()
            re.compile("|".join(f"p{(n + i) % 3}" for i in range(3)) + f"|x{n}")
        assert made[1].made == 0 and made[1].seen.made == 1
    assert read_kept(kept_path("regex-code", env), lambda k, v: True) == {}


def test_a_damaged_file_is_ignored_and_written_again(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    path = kept_path("dataclass-code", env)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 40 + b"not marshal")
    valid = DataclassCode(path).kept
    assert valid == {}
    with kept_compiles(env) as made:
        check(*make_classes())
    assert made is not None and made[0].made > 0
    assert len(read_kept(path, lambda k, v: True)) == len(made[0].used)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # torn: the digest no longer matches
    assert read_kept(path, lambda k, v: True) == {}


def test_a_file_others_may_write_is_not_run(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    with kept_compiles(env):
        make_classes()
    path = kept_path("dataclass-code", env)
    assert path.stat().st_mode & 0o077 == 0 and read_kept(path, lambda k, v: True)
    path.chmod(0o664)
    assert read_kept(path, lambda k, v: True) == {}
    with kept_compiles(env) as made:
        make_classes()
    assert made is not None and made[0].made > 0  # compiled as if there were no file


def test_turned_off_with_the_probe_cache(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "HETFLOW_PROBE_CACHE": "0"}
    with kept_compiles(env) as made:
        assert made is None
        check(*make_classes())
        compile_all()
    assert not kept_path("dataclass-code", env).exists() and not kept_path("regex-code", env).exists()


def test_each_command_has_files_of_its_own(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    compiled = []
    for command in ("ps", "validate", "../x", "ps"):
        with kept_compiles(env, command=command) as made:
            assert made is not None
            make_classes()
        compiled.append(made[0].made)
    assert compiled[0] == compiled[1] == compiled[2] > 0 and compiled[3] == 0  # ps read its own file
    names = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "hetflow").glob("dataclass-code-*"))
    assert names == ["dataclass-code-other", "dataclass-code-ps", "dataclass-code-validate"]

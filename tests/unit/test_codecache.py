"""Dataclass methods compiled once and kept between commands (issue 43: ``hetflow.codecache``)."""

from __future__ import annotations

import dataclasses
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest

from hetflow.codecache import code_path, kept_dataclass_code, read_code


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


def test_second_command_compiles_nothing_and_makes_the_same_classes(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    plain = make_classes()
    with kept_dataclass_code(env) as first:
        assert first is not None
        check(*make_classes())
    assert first.compiled > 0 and code_path(env).is_file()
    assert "exec" not in vars(dataclasses)  # the stdlib's own exec again after the block
    with kept_dataclass_code(env) as second:
        assert second is not None
        kept = make_classes()
        check(*kept)
    assert second.compiled == 0 and second.used
    check(*plain)
    for made, base in zip(kept, plain, strict=True):
        assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(base)]
        assert made.__init__.__code__.co_code == base.__init__.__code__.co_code  # type: ignore[misc]


def test_a_damaged_file_is_ignored_and_written_again(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    path = code_path(env)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 40 + b"not marshal")
    assert read_code(path) == {}
    with kept_dataclass_code(env) as code:
        check(*make_classes())
    assert code is not None and code.compiled > 0
    assert len(read_code(path)) == len(code.used)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # torn: the digest no longer matches
    assert read_code(path) == {}


def test_turned_off_with_the_probe_cache(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "HETFLOW_PROBE_CACHE": "0"}
    with kept_dataclass_code(env) as code:
        assert code is None
        check(*make_classes())
    assert not code_path(env).exists()

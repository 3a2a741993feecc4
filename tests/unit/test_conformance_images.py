"""bench.conformance.images with a fake engine: each stand-in is made the way its recipe says,
only when its recipe (or the image it is built on) changed, and never by copying a root."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench.conformance.images import LABEL, STANDINS, StandIn, build_standin, root_name

BY_NAME = {image.name: image for image in STANDINS}


@dataclass
class FakeEngine:
    """Images as {name: labels}; records what was imported and built."""

    images: dict[str, dict[str, str]] = field(default_factory=dict)
    made: list[tuple[str, str, str]] = field(default_factory=list)  # (how, name, root or Containerfile)

    def exists(self, name: str) -> bool:
        return name in self.images

    def image_id(self, name: str) -> str:
        return f"id-{name}-{len(self.made)}" if name in self.images else ""

    def label(self, name: str, key: str) -> str:
        return self.images.get(name, {}).get(key, "")

    def build(self, containerfile: Path, context: Path, name: str) -> None:
        text = containerfile.read_text()
        files = sorted(p.name for p in context.iterdir() if p.name != "Containerfile")
        self.made.append(("build", name, text + "files:" + ",".join(files)))
        self.images[name] = {LABEL: text.rsplit(f"LABEL {LABEL}=", 1)[1].strip()}

    def import_dir(self, root: Path, name: str, changes: Sequence[str]) -> None:
        self.made.append(("import", name, str(root)))
        labels = [c.split("=", 1)[1] for c in changes if c.startswith(f"LABEL {LABEL}=")]
        self.images[name] = {LABEL: labels[0]}

    def drop(self, image_id: str) -> None:
        pass

    def run(self, *args: str, what: str, stdin: int | None = None) -> str:
        raise AssertionError("not used")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding finished roots for every package list, so no debootstrap runs."""
    for image in STANDINS:
        if image.root == "debian":
            folder = tmp_path / root_name(image.packages)
            (folder / "bin").mkdir(parents=True)
            (folder / "bin/sh").write_text("")
            folder.with_name(folder.name + ".ok").write_text("ok\n")
    return tmp_path


def test_the_four_names_the_suite_pulls() -> None:
    assert sorted(BY_NAME) == [
        "docker.io/alpine:latest", "docker.io/bash:4.4", "docker.io/debian:stable-slim", "docker.io/python:3-slim",
    ]  # fmt: skip
    assert set(BY_NAME["docker.io/python:3-slim"].packages) == {"python3", "python-is-python3"}


@pytest.mark.parametrize(
    ("name", "how"),
    [
        ("docker.io/debian:stable-slim", "import"),
        ("docker.io/python:3-slim", "import"),
        ("docker.io/bash:4.4", "build"),
        ("docker.io/alpine:latest", "import"),
    ],
    ids=["debian", "python", "bash", "alpine"],
)
def test_each_is_made_once_then_found_up_to_date(cache: Path, name: str, how: str) -> None:
    engine = FakeEngine()
    assert build_standin(engine, BY_NAME[name], cache, False, lambda _: None)
    assert [m[:2] for m in engine.made] == [(how, name)]
    assert not build_standin(engine, BY_NAME[name], cache, False, lambda _: None)
    assert len(engine.made) == 1
    assert build_standin(engine, BY_NAME[name], cache, True, lambda _: None)  # force


def test_the_debian_roots_are_imported_from_the_cache_never_copied(cache: Path) -> None:
    engine = FakeEngine()
    build_standin(engine, BY_NAME["docker.io/python:3-slim"], cache, False, lambda _: None)
    assert Path(engine.made[0][2]).parent == cache  # the cached root itself: a copy would read /dev/zero


def test_bash_is_built_on_debian_with_the_entrypoint(cache: Path) -> None:
    engine = FakeEngine()
    build_standin(engine, BY_NAME["docker.io/bash:4.4"], cache, False, lambda _: None, salt="debian-id-1")
    text = engine.made[0][2]
    assert text.startswith("FROM docker.io/debian:stable-slim\n")
    assert "COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh" in text
    assert 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' in text
    assert text.endswith("files:docker-entrypoint.sh")


def test_a_new_base_image_rebuilds_what_is_built_on_it(cache: Path) -> None:
    engine, bash = FakeEngine(), BY_NAME["docker.io/bash:4.4"]
    assert build_standin(engine, bash, cache, False, lambda _: None, salt="debian-id-1")
    assert not build_standin(engine, bash, cache, False, lambda _: None, salt="debian-id-1")
    assert build_standin(engine, bash, cache, False, lambda _: None, salt="debian-id-2")


def test_a_changed_recipe_has_another_digest() -> None:
    debian = BY_NAME["docker.io/debian:stable-slim"]
    more = StandIn(debian.name, debian.root, ("procps",), debian.changes)
    assert more.digest() != debian.digest()
    assert debian.digest("a") != debian.digest("b")

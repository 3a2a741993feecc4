"""Big workflows are kept parsed in HETFLOW_HOME/cache/specs, by content: a second load reads
the kept copy, and any change to the text, the params or an included file parses again."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.errors import SpecError
from hetflow.spec import load_workflow as parse_file
from hetflow.state import PARSE_CACHE_MIN_BYTES
from hetflow.state import load_workflow_cached as load_workflow


def big(tmp_path: Path, word: str = "hi", steps: int = 2500) -> Path:
    lines = ["apiVersion: hetflow/v1", "name: big", "params: {w: x}", "include: [lib.yaml]", "steps:"]
    for i in range(steps):
        lines += [f"  s{i}:", "    use: t", f"    command: [sh, -c, 'echo {word} {{{{ params.w }}}} > /out/o.txt']"]
        lines += [f"    inputs: {{a: s{i - 1}/o.txt}}"] if i else []
    (tmp_path / "lib.yaml").exists() or (tmp_path / "lib.yaml").write_text(
        "templates:\n  t: {image: 'localhost/x:1', outputs: [o.txt]}\n"
    )
    path = tmp_path / "wf.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size >= PARSE_CACHE_MIN_BYTES
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HETFLOW_NO_PARSE_CACHE", raising=False)
    return tmp_path / "home"


def kept(home: Path) -> list[Path]:
    return sorted((home / "cache" / "specs").glob("*.pickle"))


def test_a_big_workflow_is_kept_and_read_back_equal(tmp_path: Path, home: Path) -> None:
    path = big(tmp_path)
    first = load_workflow(path)
    assert len(kept(home)) == 1
    second = load_workflow(path)
    assert second.workflow == first.workflow and second.line("steps", "s7") == first.line("steps", "s7")
    assert second.workflow.steps["s3"].command == ("sh", "-c", "echo hi x > /out/o.txt")
    assert len(kept(home)) == 1


def test_text_params_and_includes_are_part_of_the_key(tmp_path: Path, home: Path) -> None:
    path = big(tmp_path)
    load_workflow(path)
    assert load_workflow(path, {"w": "y"}).workflow.steps["s0"].command[2] == "echo hi y > /out/o.txt"
    big(tmp_path, word="bye")
    assert load_workflow(path).workflow.steps["s0"].command[2] == "echo bye x > /out/o.txt"
    (tmp_path / "lib.yaml").write_text("templates:\n  t: {image: 'localhost/y:2', outputs: [o.txt]}\n")
    assert load_workflow(path).workflow.steps["s0"].image == "localhost/y:2"  # the include changed: parsed again
    assert len(kept(home)) == 3  # the first, -p w=y, the new text (whose kept copy the include change replaced)


def test_a_damaged_kept_copy_means_a_parse_and_a_bad_file_is_never_kept(tmp_path: Path, home: Path) -> None:
    path = big(tmp_path)
    load_workflow(path)
    [copy] = kept(home)
    copy.write_bytes(b"not a pickle")
    assert load_workflow(path).workflow.steps["s1"].image == "localhost/x:1"
    path.write_text(path.read_text().replace("use: t", "use: nope", 1))
    with pytest.raises(SpecError, match="'use: nope' names no template"):
        load_workflow(path)
    assert len(kept(home)) == 1


def test_spec_itself_never_keeps_a_parse(tmp_path: Path, home: Path) -> None:
    """spec/ is pure: its own load_workflow parses and writes nothing under HETFLOW_HOME."""
    path = big(tmp_path)
    assert parse_file(path).workflow.steps["s2"].image == "localhost/x:1"
    assert not home.exists()
    assert load_workflow(path).workflow == parse_file(path).workflow
    assert len(kept(home)) == 1


def test_no_parse_cache_env_always_parses(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETFLOW_NO_PARSE_CACHE", "1")
    load_workflow(big(tmp_path))
    assert kept(home) == []


def test_a_small_file_that_expands_to_many_steps_is_kept_and_a_small_workflow_is_not(
    tmp_path: Path, home: Path
) -> None:
    fanout = tmp_path / "fanout.yaml"
    fanout.write_text(
        "apiVersion: hetflow/v1\nname: fan\nsteps:\n  w:\n    image: localhost/x:1\n"
        "    foreach: {range: 1200}\n    command: [echo, '{{ item }}']\n"
    )
    assert fanout.stat().st_size < PARSE_CACHE_MIN_BYTES
    first = load_workflow(fanout)
    assert len(first.workflow.steps) == 1200 and len(kept(home)) == 1
    assert load_workflow(fanout).workflow == first.workflow
    small = tmp_path / "small.yaml"
    small.write_text("apiVersion: hetflow/v1\nname: s\nsteps:\n  a: {image: 'localhost/x:1', command: ['true']}\n")
    assert load_workflow(small).workflow.steps["a"].command == ("true",)
    assert len(kept(home)) == 1

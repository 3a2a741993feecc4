"""The documentation site (issue 42): it builds strict with no warning, a broken link or
anchor fails that build, the reference pages are what the code says now, the example
workflows validate against the shipped JSON Schema, the README is a short quick start whose
links resolve, and the tutorial shows exactly the commands tests/integration/test_tour.py
runs."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.docref import stale

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCHEMA = ROOT / "src" / "hetflow" / "share" / "workflow.schema.json"
# what the site's build reads beside docs/
SITE_INPUTS = ("mkdocs.yml", "ARCHITECTURE.md", "tools/docs_nav.py", "examples/tour")


def _mkdocs_missing() -> str | None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        return "mkdocs and mkdocs-material are not installed (pip install -e '.[docs]'; make install does)"
    return None


needs_mkdocs = pytest.mark.skipif(_mkdocs_missing() is not None, reason=str(_mkdocs_missing()))


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _copy_site_sources(dest: Path) -> Path:
    shutil.copytree(DOCS, dest / "docs", ignore=shutil.ignore_patterns("*.txt", "*.xml", "*.csv"))
    for name in SITE_INPUTS:
        src, dst = ROOT / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return dest


@needs_mkdocs
def test_the_site_builds_strict_with_no_warning(tmp_path: Path) -> None:
    done = _build(ROOT, tmp_path / "site")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "WARNING" not in said, said
    for page in ("index.html", "tutorial.html", "promises.html", "reference/cli.html", "guides/gpus.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert (tmp_path / "site" / "reference" / "workflow.schema.json").is_file()
    # offline: no page loads a font or script from elsewhere
    index = (tmp_path / "site" / "index.html").read_text()
    assert not re.findall(r"<(?:script|link)[^>]+(?:src|href)=\"https?://", index)


@needs_mkdocs
def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    root = _copy_site_sources(tmp_path / "copy")
    page = root / "docs" / "guides" / "profiles.md"
    page.write_text(page.read_text() + "\nSee [a page](../no-such-page.md) and [a part](gpus.md#no-such-part).\n")
    done = _build(root, tmp_path / "site")
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "no-such-page.md" in said and "#no-such-part" in said, said


def test_every_guide_is_in_the_nav_even_one_mkdocs_yml_does_not_name(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_nav
    finally:
        sys.path.remove(str(ROOT / "tools"))
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "listed.md").write_text("# Listed\n")
    (tmp_path / "guides" / "zz-new.md").write_text("intro\n\n# Brand new guide\n")
    config: dict[str, Any] = {
        "docs_dir": str(tmp_path),
        "nav": [{"Home": "index.md"}, {"Guides": [{"L": "guides/listed.md"}]}],
    }
    docs_nav.on_config(config)
    assert config["nav"][1]["Guides"] == [{"L": "guides/listed.md"}, {"Brand new guide": "guides/zz-new.md"}]


def test_the_reference_pages_and_the_schema_are_what_the_code_says() -> None:
    old = [str(p.relative_to(ROOT)) for p in stale()]
    assert not old, f"stale, run `python -m tools.docref`: {old}"


def _validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _workflows() -> list[Path]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and data.get("apiVersion") == "hetflow/v1" and "kind" not in data:
            found.append(path)
    return found


@pytest.mark.parametrize("path", _workflows(), ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_every_example_workflow_validates_against_the_schema(path: Path) -> None:
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(yaml.safe_load(path.read_text()))
    ]
    assert not errors


def test_every_workflow_the_pages_show_validates_against_the_schema() -> None:
    """A YAML block with ``steps:`` in the site (the README's is tested below) is a workflow
    or most of one: the name and apiVersion it leaves out are added."""
    shown, bad = 0, []
    for page in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"```ya?ml\n(.*?)```", page.read_text(), re.S):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and "steps" in data and "kind" not in data:
                shown += 1
                errors = _validator().iter_errors({"apiVersion": "hetflow/v1", "name": "shown", **data})
                bad += [f"{page.relative_to(ROOT)}: {list(e.absolute_path)}: {e.message}" for e in errors]
    assert shown >= 4 and not bad


def test_the_schema_refuses_what_hetflow_refuses() -> None:
    good = yaml.safe_load((ROOT / "examples" / "tour" / "workflow.yaml").read_text())
    typo = {**good, "steps": {"a": {"image": "busybox", "command": ["true"], "resorces": {"cpus": 1}}}}
    unknown_top = {**good, "stpes": {}}
    wrong_type = {**good, "steps": {"a": {"image": "busybox", "command": ["true"], "needs": "b"}}}
    validator = _validator()
    for bad in (typo, unknown_top, wrong_type):
        assert list(validator.iter_errors(bad)), bad
    assert len(_workflows()) >= 8  # the examples are found at all


def test_hetflow_schema_prints_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from hetflow.cli.schema import schema

    schema(path=False)
    assert json.loads(capsys.readouterr().out) == json.loads(SCHEMA.read_text())
    schema(path=True)
    assert Path(capsys.readouterr().out.strip()) == SCHEMA


# --- the README: a quick start that links into the site --------------------------------------


def _slug(heading: str) -> str:
    """A heading's anchor as mkdocs makes it (markdown's toc ``slugify``)."""
    text = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_is_a_short_quick_start() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 400
    for part in ("## Set up", "make demo", "make test", "## A workflow", "make docs", "docs/index.md"):
        assert part in text, part


def test_every_readme_link_resolves() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert sum(link.startswith("docs/") for link in links) >= 15
    broken = []
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists() or (anchor and anchor not in _anchors(target)):
            broken.append(link)
    assert not broken


def test_the_readme_workflow_is_valid() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    assert not [e.message for e in _validator().iter_errors(yaml.safe_load(block.group(1)))]


# --- the tutorial shows what test_tour runs -------------------------------------------------

TOUR_TEST = ROOT / "tests" / "integration" / "test_tour.py"
MACHINE_FLAGS = {"--json", "-q"}  # what the test adds to read the answers; the page leaves them out


SECRET_READERS = ("run", "validate")  # the commands whose answer depends on TOUR_TOKEN being set


def _page_commands() -> list[tuple[tuple[str, ...], bool | None]]:
    """Each ``hetflow`` line of the tutorial's shell blocks, and whether the secret is set
    then (None for a command that does not read it)."""
    page = (DOCS / "tutorial.md").read_text()
    commands, token = [], False
    for block in re.findall(r"```sh\n(.*?)```", page, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"] and words[1].startswith("TOUR_TOKEN="):
                token = True
            elif words[:2] == ["unset", "TOUR_TOKEN"]:
                token = False
            elif words[:1] == ["hetflow"]:
                commands.append((tuple(words[1:]), token if words[1] in SECRET_READERS else None))
    return commands


def _word(node: ast.expr, names: dict[str, ast.expr]) -> list[str]:
    """A call argument of test_tour.py as the page writes it ($T/..., RUN)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "str" and isinstance(node.args[0], ast.BinOp):
        part = node.args[0].right
        assert isinstance(part, ast.Constant)
        return [f"$T/{part.value}"]
    if isinstance(node, ast.Name) and node.id == "rid":
        return ["RUN"]
    if isinstance(node, ast.Starred):
        return _word(node.value, names)
    if isinstance(node, ast.Name) and node.id in names:
        value = names[node.id]
        return [w for e in value.elts for w in _word(e, names)] if isinstance(value, ast.Tuple) else _word(value, names)
    raise AssertionError(f"test_tour.py: cannot read {ast.unparse(node)}")


def _test_commands() -> list[tuple[tuple[str, ...], bool | None]]:
    """The hetflow commands test_tour runs, in order, and whether it gives them the secret."""
    tree = ast.parse(TOUR_TEST.read_text())
    names: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Tuple)
        ):
            names.update(
                {t.id: v for t, v in zip(node.targets[0].elts, node.value.elts, strict=True) if isinstance(t, ast.Name)}
            )
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    calls = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) in ("hf", "hf.show")),
        key=lambda n: (n.lineno, n.col_offset),
    )
    commands = []
    for call in calls:
        words = ["show"] if ast.unparse(call.func) == "hf.show" else []
        words += [w for a in call.args for w in _word(a, names)]
        secret = any(k.arg == "extra_env" for k in call.keywords) if words[0] in SECRET_READERS else None
        commands.append((tuple(w for w in words if w not in MACHINE_FLAGS), secret))
    return commands


def test_the_tutorial_shows_exactly_the_commands_the_tour_test_runs() -> None:
    page = _page_commands()
    ran = _test_commands()
    # the test reads `show` twice (the steps, then the workdir); the page shows it once
    deduped = [
        c for i, c in enumerate(ran) if c[0] != ("show", "RUN") or ("show", "RUN") not in [r[0] for r in ran[:i]]
    ]
    assert len(page) >= 7
    assert page == deduped


def test_the_tutorial_says_what_the_tour_test_checks() -> None:
    page, test = " ".join((DOCS / "tutorial.md").read_text().split()), TOUR_TEST.read_text()
    token = re.search(r'"TOUR_TOKEN": "([^"]+)"', test)
    assert token is not None and f"export TOUR_TOKEN={token.group(1)}" in page
    assert "T=examples/tour" in page and '"examples" / "tour"' in test  # $T is the test's TOUR
    for said in (
        "valid (6 step(s))",
        "token ***",
        "needs secret 'TOUR_TOKEN'",
        '"best_lr": 0.1',
        "[lr=0.1]",
        "[lr=0.001]",
    ):
        assert said in page and said in test, said

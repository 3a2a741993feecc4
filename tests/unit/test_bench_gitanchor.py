"""bench/gitanchor.py: bench/loader.py's anchor, the spec loader as of commit 4aabbd9, is taken
from git at bench time (it was a vendored copy): the commit's files, only their imports of
each other renamed, loading what today's loader loads; and a plain message where git or the
commit is not there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench.gitanchor import AnchorUnavailable, archived, old_package, rewritten
from bench.local.loader import PREVIOUS, PREVIOUS_MODULES, generate

from hetflow.spec import load_workflow

SPEC = "src/hetflow/spec"
ROOT = Path(__file__).resolve().parents[2]


def test_the_anchor_is_the_commits_files_with_only_their_imports_of_each_other_renamed() -> None:
    paths = [f"{SPEC}/{m}.py" for m in PREVIOUS_MODULES]
    texts = archived(PREVIOUS, paths)
    for path in paths:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{PREVIOUS}:{path}"], capture_output=True, text=True)
        assert texts[path] == shown.stdout
        old = texts[path].splitlines()
        new = rewritten(texts[path], "hetflow.spec", "anchor", PREVIOUS_MODULES).splitlines()
        changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
        assert all(a.replace("from hetflow.spec.", "from anchor.") == b for a, b in changed), changed
    assert "from anchor.models import" in rewritten(
        texts[f"{SPEC}/loader.py"], "hetflow.spec", "anchor", PREVIOUS_MODULES
    )


def test_the_anchor_loads_what_todays_loader_loads_and_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(generate(40))
    with old_package(PREVIOUS, SPEC, PREVIOUS_MODULES) as previous:
        name = previous.__name__
        old = previous.loader.load_workflow(path).workflow
        assert old.steps["s11"].command == load_workflow(path).workflow.steps["s11"].command
        assert sorted(old.steps) == sorted(load_workflow(path).workflow.steps)
    assert not [m for m in sys.modules if m == name or m.startswith(f"{name}.")]
    assert not [p for p in sys.path if "hetflow-anchor-" in p]


def test_an_import_of_a_module_not_taken_is_refused() -> None:
    text = "from hetflow.spec.models import Workflow\nfrom hetflow.spec.fields.units import parse_memory\n"
    with pytest.raises(AnchorUnavailable, match="not taken"):
        rewritten(text, "hetflow.spec", "anchor", ("models",))


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("unknown-commit", "git cannot give it here"),
        ("not-a-clone", "run from a clone of hetflow with its history"),
        ("no-git", "install git"),
    ],
    ids=["unknown-commit", "not-a-clone", "no-git"],
)
def test_no_git_or_no_commit_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, said: str
) -> None:
    commit, repo = PREVIOUS, ROOT
    if where == "unknown-commit":
        commit = "0000000000000000000000000000000000000001"
    elif where == "not-a-clone":
        repo = tmp_path
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    else:
        monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AnchorUnavailable, match=said) as caught, old_package(commit, SPEC, PREVIOUS_MODULES, repo=repo):
        pass
    assert f"as of commit {commit}" in str(caught.value)


def test_bench_loader_says_so_and_exits_when_the_anchor_is_not_there(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [sys.executable, "-m", "bench.local.loader", "--steps", "10"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 1 and r.stderr.startswith("bench.local.loader: the anchor is src/hetflow/spec/checks.py"), (
        r.stderr
    )
    assert "install git" in r.stderr

"""A clone runs its tests and benches with nothing beside it (issue 42): no test, bench,
demo, tool or Makefile line reads data from outside the repository (``../shared``,
``/work/shared``, a ``Path(__file__).parents[N]`` above the root), and the benchmark data they
read (``bench.data``) is in the repository, tracked by git, license included."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from bench.data import CANONICAL, DATA, TRACES

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "bench", "demo", "tools", "src")
SUFFIXES = {".py", ".sh", ".yaml", ".toml"}
# ../shared, /work/shared, or "shared" joined to a parent (ROOT.parent / "shared")
OUTSIDE = re.compile(r"\.\./shared|/work/shared|\.parents?(?:\[\d+\])?\s*/\s*[\"']shared[\"']")
# Path(__file__).resolve().parents[N], or .parent chained N+1 times
PARENTS = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
PARENT_CHAIN = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parent(?!s))+)")


def _texts() -> list[tuple[Path, str]]:
    files = [ROOT / "Makefile"]
    for top in SCANNED:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES or p.name == "build"]
    return [(p, p.read_text(errors="replace")) for p in files if p.is_file() and p != Path(__file__).resolve()]


def outside_reads(path: Path, text: str) -> list[str]:
    """The lines of ``text`` (the file at ``path``) that reach outside the repository."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if OUTSIDE.search(line) and not line.lstrip().startswith("#"):
            found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
        ups = [int(m) for m in PARENTS.findall(line)] + [c.count(".parent") - 1 for c in PARENT_CHAIN.findall(line)]
        if any(not path.parents[u].is_relative_to(ROOT) if u < len(path.parents) else True for u in ups):
            found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()} (above the repository)")
    return found


def test_no_test_bench_or_makefile_path_leaves_the_repository() -> None:
    found = [hit for path, text in _texts() for hit in outside_reads(path, text)]
    assert found == [], "data read from outside the repository (carry it in, e.g. bench/data):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("rel", "line"),
    [
        ("tests/unit/test_x.py", 'CANONICAL = Path("../shared/bench/canonical")'),
        ("bench/planning/x.py", 'TRACES = Path("/work/shared/bench/wfinstances")'),
        ("tests/unit/test_x.py", "ROOT = Path(__file__).resolve().parents[3] / 'shared'"),
        ("bench/planning/x.py", "ROOT = Path(__file__).parent.parent.parent.parent"),
        ("bench/planning/x.py", 'TRACES = ROOT.parent / "shared" / "bench" / "wfinstances"'),
    ],
)
def test_the_guard_sees_each_way_out(rel: str, line: str) -> None:
    assert outside_reads(ROOT / rel, line)


def test_the_guard_lets_the_root_through() -> None:
    assert outside_reads(ROOT / "tests/unit/test_x.py", "ROOT = Path(__file__).resolve().parents[2]") == []


def test_the_benchmark_data_is_tracked_with_its_license() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", str(DATA.relative_to(ROOT))], capture_output=True, text=True, check=True
    ).stdout.split()
    names = {Path(p).relative_to(DATA.relative_to(ROOT)).as_posix() for p in tracked}
    assert {"README.md", "canonical/topcuoglu2002.json", "wfinstances/LICENSE", "wfinstances/README.md"} <= names
    assert len([n for n in names if n.startswith("wfinstances/") and n.endswith(".json")]) == 5
    assert (CANONICAL / "topcuoglu2002.json").stat().st_size > 0 and TRACES.is_dir()

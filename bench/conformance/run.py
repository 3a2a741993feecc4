"""``python -m bench.conformance``: what ``make conformance`` runs.

The CWL v1.2 conformance suite (third_party/cwl-v1.2) through ``cwltest``, against hetflow's
runner (``hetflow-cwl-runner``) and against ``cwltool --podman`` (the reference
implementation: the anchor, on the same images, the same machine, in the same run), one after
the other so that neither takes the other's cores; then one table of passed / failed /
unsupported per tag for both, the required-tag line, and build/conformance/summary.json.

cwltool run as root: ``cwltool --podman`` adds ``--userns=keep-id``, which podman refuses
outside rootless mode ("keep-id is only supported in rootless mode", every container test
fails).  The cwltool run gets a ``podman`` first on its PATH that drops that one flag (as
root the container's root is the caller already); nothing else is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.conformance.images import build_standins
from bench.conformance.table import (
    ALL,
    REQUIRED,
    Column,
    Counts,
    JunitError,
    SuiteTest,
    read_junit,
    relabel,
    render,
    summary,
)
from hetflow.config import engine_env
from hetflow.errors import HetflowError

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "third_party/cwl-v1.2/conformance_tests.yaml"
HETFLOW_RUNNER = "hetflow-cwl-runner"
MISSING = "runner not installed"

# The podman cwltool calls when we are root: the same podman without --userns=keep-id.
_SHIM = """#!/bin/sh
# Made by bench.conformance: rootful podman refuses --userns=keep-id, which cwltool --podman adds.
for a; do shift; [ "$a" = "--userns=keep-id" ] && continue; set -- "$@" "$a"; done
exec {podman} "$@"
"""


def _path(env: dict[str, str]) -> str:
    """PATH with this Python's bin folder first: the venv's cwltool and hetflow-cwl-runner."""
    return os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])


def _shim_dir(out: Path, env: dict[str, str]) -> Path | None:
    """A folder holding the keep-id-dropping ``podman``, when we are root and podman exists."""
    podman = shutil.which("podman", path=env["PATH"])
    if os.geteuid() != 0 or podman is None:
        return None
    folder = out / "shim"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "podman").write_text(_SHIM.format(podman=podman))
    (folder / "podman").chmod(0o755)
    return folder


def run_cwltest(
    runner: str, tool: str, tool_args: Sequence[str], select: Sequence[str], out: Path, env: dict[str, str], jobs: int
) -> Column:
    """One cwltest run over the suite against ``tool``; its JUnit XML and log land in ``out``."""
    junit, log = out / f"{runner}.xml", out / f"{runner}.log"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "cwltest", "--test", str(SUITE), "--tool", tool, f"-j{jobs}"]
    cmd += [*select, f"--junit-xml={junit}", "--", *tool_args]
    print(f"== {runner}: {' '.join(cmd[2:])}  (log: {log})", file=sys.stderr, flush=True)
    started = time.monotonic()
    with log.open("w") as sink:
        done = subprocess.run(cmd, cwd=SUITE.parent, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False)
    seconds = round(time.monotonic() - started, 1)
    if not junit.is_file():
        return Column.absent(runner, f"cwltest exited {done.returncode} without results (see {log})")
    cases = read_junit(junit)
    if "-n" in select or "-s" in select:
        cases = relabel(cases, selected_tests(select))
    return Column.of(runner, cases, seconds)


def selected_tests(select: Sequence[str]) -> list[SuiteTest]:
    """The tests cwltest runs for ``-n N`` / ``-s NAMES`` (after ``--tags``), in its order
    (cwltest/main.py: the tags filter first, then the numbers, then the names)."""
    from cwltest.utils import load_and_validate_tests, shortname

    tests, _ = load_and_validate_tests(str(SUITE))
    args = dict(zip(select[::2], select[1::2], strict=True))
    wanted = set(filter(None, args.get("--tags", "").split(",")))
    infos = [
        SuiteTest(shortname(t.get("id", "")) or str(i + 1), tuple(t.get("tags", ())))
        for i, t in enumerate(tests)
        if not wanted or wanted & set(t.get("tags", ()))
    ]
    picked: list[int] = []
    for part in filter(None, args.get("-n", "").split(",")):
        first, _, last = part.partition("-")
        picked += range(int(first) - 1, int(last or first))
    names = [info.name for info in infos]
    picked += [names.index(name) for name in filter(None, args.get("-s", "").split(",")) if name in names]
    return [infos[i] for i in picked]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.conformance",
        description="CWL v1.2 conformance: hetflow's runner and cwltool (the anchor) in one run, one table.",
    )
    parser.add_argument("--tags", help="only tests with one of these tags (comma-separated), e.g. required")
    parser.add_argument("-n", dest="numbers", help="only these test numbers, e.g. 1,3-6 (cwltest -n)")
    parser.add_argument("-s", dest="names", help="only these short names, comma-separated (cwltest -s)")
    parser.add_argument("-j", dest="jobs", type=int, default=2, help="tests run at once by each cwltest (2)")
    parser.add_argument("--runners", default="hetflow,cwltool", help="which columns to run (hetflow,cwltool)")
    parser.add_argument("--out", type=Path, default=REPO / "build/conformance", help="results folder")
    parser.add_argument("--no-images", dest="images", action="store_false", help="skip `make cwl-images`")
    parser.add_argument(
        "--cwltool-arg",
        dest="cwltool_args",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for cwltool, e.g. --cwltool-arg=--relax-path-checks (repeatable)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 unless hetflow passes every required test and 95%% of all"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Build the stand-in images, run both columns, print the table, write summary.json."""
    args = _parser().parse_args(argv)
    select = [x for flag, value in (("--tags", args.tags), ("-n", args.numbers), ("-s", args.names)) if value
              for x in (flag, value)]  # fmt: skip
    runners = args.runners.split(",")
    unknown = sorted(set(runners) - {"hetflow", "cwltool"})
    if unknown:
        print(f"error: --runners: unknown runner {unknown[0]!r}; use hetflow and/or cwltool", file=sys.stderr)
        return 2
    if args.images:
        try:
            build_standins(log=lambda m: print(m, file=sys.stderr, flush=True))
        except HetflowError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = engine_env()
    env["PATH"] = _path(env)
    columns = []
    try:
        for runner in runners:
            columns.append(_column(runner, select, out, env, args.jobs, args.cwltool_args))
    except JunitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "suite": "cwl-v1.2 @ 551d58d", "select": select}
    (out / "summary.json").write_text(json.dumps(summary(columns, meta), indent=2) + "\n")
    print(render(columns))
    print(f"\n(passed/failed/unsupported per tag; JSON: {out / 'summary.json'})")
    hetflow = next((c for c in columns if c.runner == "hetflow"), Column.absent("hetflow", "not run (--runners)"))
    return 1 if args.check and not meets_the_bar(hetflow) else 0


def meets_the_bar(column: Column) -> bool:
    """Issue 40's bar for hetflow's column: every required test passed, and 95% of all."""
    if column.missing:
        print(f"--check: {column.runner}: {column.missing}", file=sys.stderr)
        return False
    required, everything = column.counts.get(REQUIRED, Counts()), column.counts.get(ALL, Counts())
    ok = required.passed == required.total and everything.passed >= 0.95 * everything.total
    print(f"--check: {column.runner} {'meets' if ok else 'misses'} the bar (required all, 95% of all)", file=sys.stderr)
    return ok


def _column(
    runner: str, select: Sequence[str], out: Path, env: dict[str, str], jobs: int, cwltool_args: Sequence[str]
) -> Column:
    if runner == "hetflow":
        tool = shutil.which(HETFLOW_RUNNER, path=env["PATH"])
        if tool is None:
            return Column.absent(runner, MISSING)
        return run_cwltest(runner, tool, [], select, out, env, jobs)
    if runner == "cwltool":
        tool = shutil.which("cwltool", path=env["PATH"])
        if tool is None:
            return Column.absent(runner, MISSING)
        shim = _shim_dir(out, env)
        own = {**env, "PATH": os.pathsep.join([str(shim), env["PATH"]])} if shim else env
        return run_cwltest(runner, tool, ["--podman", *cwltool_args], select, out, own, jobs)
    raise ValueError(runner)  # main() checked the names

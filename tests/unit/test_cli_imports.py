"""Each everyday command imports only what it uses (issue 43): a budget of modules, not of time.

Every command runs as ``hetflow.cli.main.main(argv)`` in a fresh interpreter over a small
store (three finished runs recorded through the Store API, the newest with a fan-out's items)
and prints ``sorted(sys.modules)``; the test fails when a module the command has no use for
is among them: the execute stage's submit path, the planner, the hardware inventory, the
image resolver, pydantic, httpx, the web servers, the CWL runner, ortools, rich's traceback.
A command that stops early imports less, so each case also checks the command's exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.uikit import synthetic_run

# modules no store-reading command needs (prefixes of sys.modules' names)
HEAVY = (
    "hetflow.execute.submit",
    "hetflow.execute.backends.local.podman",
    "hetflow.execute.data.inputs",
    "hetflow.plan",
    "hetflow.inventory",
    "hetflow.images",
    "hetflow.report.runreport",
    "hetflow.spec.models",
    "hetflow.cwl",
    "hetflow.ui",
    "hetflow.tes",
    "pydantic",
    "httpx",
    "starlette",
    "uvicorn",
    "ortools",
    "cwltool",
    "rich.traceback",
)
# never needed by validate, plan or a dry run on this machine (a dry run posts no notification)
NEVER = ("hetflow.cwl", "hetflow.ui", "hetflow.tes", "hetflow.report.runreport", "starlette", "uvicorn",
         "ortools", "cwltool", "rich.traceback", "httpx")  # fmt: skip
# validate checks what a run would refuse (data, images, fit): the planner's search, the plan
# and the dry run's walk are not among its checks
VALIDATE = (*NEVER, "hetflow.execute.submit.prepare", "hetflow.execute.submit.preview",
            "hetflow.execute.submit.session", "hetflow.execute.submit.runplan", "hetflow.plan.search")  # fmt: skip
# nodes describes this machine (the inventory's models are pydantic): no planner, no images
NODES = (*NEVER, "hetflow.plan", "hetflow.execute.submit", "hetflow.images")

RUN = "r0002imports"
WORKFLOW = """apiVersion: hetflow/v1
name: chain
steps:
  a:
    image: localhost/hetflow-test/busybox:latest
    command: [sh, -c, "echo a > /out/a.txt"]
    outputs: [a.txt]
  b:
    needs: [a]
    image: localhost/hetflow-test/busybox:latest
    command: [sh, -c, "cat /in/a/a.txt"]
    inputs: {a: a/a.txt}
"""


def tab(line: str) -> dict[str, str]:
    return {"_HETFLOW_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(line.split(" ")) - 1)}


CASES: list[tuple[str, list[str], dict[str, str], tuple[str, ...], tuple[int, ...]]] = [
    ("ps", ["ps"], {}, HEAVY, (0,)),
    ("ps-all-json", ["ps", "--all", "--json"], {}, HEAVY, (0,)),
    ("show", ["show", RUN], {}, HEAVY, (0,)),
    ("show-json", ["show", RUN, "--json"], {}, HEAVY, (0,)),
    ("logs", ["logs", RUN], {}, HEAVY, (0,)),
    ("logs-step", ["logs", RUN, "a"], {}, HEAVY, (0,)),
    ("logs-group", ["logs", RUN, "fan"], {}, HEAVY, (0,)),
    ("logs-no-such-step", ["logs", RUN, "nope"], {}, ("hetflow.execute.submit", "hetflow.plan", "httpx"), (2,)),
    ("trace", ["trace", RUN], {}, HEAVY, (0,)),
    ("cache-ls", ["cache", "ls"], {}, HEAVY, (0,)),
    ("tab-first-word", [], tab("hetflow "), (*HEAVY, "typer", "rich", "hetflow.state", "hetflow.execute"), (0,)),
    # a TAB prints no rich text (the consoles are made on first use); an option's name needs no store
    ("tab-run-ids", [], tab("hetflow logs r"), (*HEAVY, "rich"), (0,)),
    ("tab-steps", [], tab(f"hetflow logs {RUN} "), (*HEAVY, "rich"), (0,)),
    ("tab-run-options", [], tab("hetflow run --"), (*HEAVY, "rich", "hetflow.state"), (0,)),
    ("nodes", ["nodes"], {}, NODES, (0,)),
    ("validate", ["validate", "WORKFLOW"], {}, VALIDATE, (0, 2)),
    ("plan", ["plan", "WORKFLOW"], {}, NEVER, (0, 2)),
    ("dry-run", ["run", "--dry-run", "WORKFLOW"], {}, NEVER, (0, 2)),
]

CODE = """
import json, sys
from hetflow.cli.main import main
code = 0
try:
    main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
print("\\n" + json.dumps({"exit": code, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hetflow.state import Store

    home = tmp_path_factory.mktemp("home")
    store = Store(home / "state.db")
    try:
        for n, steps in enumerate((["a", "b"], ["a", "b"], ["a", "fan.0", "fan.1"])):
            synthetic_run(store, home, f"r{n:04d}imports", steps=steps, workflow_yaml=WORKFLOW, created=1.0e9 + n)
    finally:
        store.close()
    (home / "chain.yaml").write_text(WORKFLOW)
    return home


@pytest.mark.parametrize(("argv", "extra", "banned", "codes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_command_imports_only_what_it_uses(
    home: Path, argv: list[str], extra: dict[str, str], banned: tuple[str, ...], codes: tuple[int, ...]
) -> None:
    argv = [str(home / "chain.yaml") if a == "WORKFLOW" else a for a in argv]
    env = {**os.environ, "HETFLOW_HOME": str(home), **extra}
    env.pop("HETFLOW_DEBUG", None)
    done = subprocess.run([sys.executable, "-c", CODE, json.dumps(argv)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["exit"] in codes, (report["exit"], done.stdout[-2000:], done.stderr[-2000:])
    loaded = [m for m in report["modules"] if m.startswith(banned)]
    assert loaded == [], f"{' '.join(argv) or extra}: imports {loaded[:12]} ({len(loaded)} in all)"


def test_the_first_word_of_bash_completion_is_typers_answer(home: Path) -> None:
    """``hetflow <TAB>`` answers from main's command table without loading the command
    modules: the same names typer gives once every module is loaded (``hetflow run --<TAB>``,
    which names a command, goes through typer)."""
    from hetflow.cli.main import COMMANDS, OWN_COMMANDS

    env = {**os.environ, "HETFLOW_HOME": str(home)}
    typer_names = _typer_first_words(env)
    assert set(COMMANDS)  # the table the fast answer is made from
    for typed in ("", "c", "lo", "re", "zz"):
        fast = subprocess.run(
            [sys.executable, "-m", "hetflow.cli.main"], env={**env, **tab(f"hetflow {typed}")},
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert sorted(fast) == sorted(n for n in typer_names if n.startswith(typed)), typed
    assert set(OWN_COMMANDS) <= typer_names


def _typer_first_words(env: dict[str, str]) -> set[str]:
    """Every visible command name as typer lists it, all modules registered."""
    code = (
        "from hetflow.cli.main import app, register_commands\n"
        "import typer.main\n"
        "register_commands([])\n"
        "group = typer.main.get_command(app)\n"
        "ctx = group.context_class(group)\n"
        "print(' '.join(n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("argv", [["validate", "WORKFLOW"], ["nodes"]], ids=["validate", "nodes"])
def test_pydantics_plugin_look_up_imports_no_package_metadata_once_kept(
    home: Path, tmp_path: Path, argv: list[str]
) -> None:
    """pydantic's plugin loader imports importlib.metadata (email, zipfile, csv: 10-20 ms)
    to find the plugins the probe cache already says are none (``hetflow.probecache``): the
    command's second run, the answer kept, does not import it."""
    argv = [str(home / "chain.yaml") if a == "WORKFLOW" else a for a in argv]
    env = {**os.environ, "HETFLOW_HOME": str(home), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("HETFLOW_PROBE_CACHE", None)
    seen = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CODE, json.dumps(argv)], capture_output=True, text=True, env=env)
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["exit"] in (0, 2), done.stderr[-2000:]
        seen.append("importlib.metadata" in report["modules"])
    assert seen == [True, False]  # the first run probes, the second reads the answer

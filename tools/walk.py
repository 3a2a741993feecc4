#!/usr/bin/env python3
"""The walk of one ``hetflow run``: which of hetflow's modules and functions a run passes from
the command line to its first stored output, and how often the path comes back to the module
that drives it (issue 39's "returns to session").

    .venv/bin/python tools/walk.py [--json] [WORKFLOW]

Runs ``hetflow run -q WORKFLOW`` (default: a one-step busybox workflow written to a temporary
folder, under a temporary HETFLOW_HOME) in this process with a profile hook and stops counting
at the first ``Store.succeed_step`` (the first output stored).  It counts, among hetflow's own
code only (``src/hetflow``), before that point:

- modules: the distinct modules whose functions were called;
- functions: the distinct functions called (module.qualname);
- returns: how many times a call made by the driving module (``--driver``, default the module
  of ``submit_run``) to another stage returned to it: the hand-offs a reader follows back.

The figures depend on the workflow and the backend (local podman here), not on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src" / "hetflow")
ONE_STEP = """apiVersion: hetflow/v1
name: walk
steps:
  hello:
    image: localhost/hetflow-test/busybox:latest
    command: [sh, -c, "echo hello > /out/o"]
    outputs: [o]
"""


class Walk:
    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.modules: dict[str, None] = {}
        self.functions: dict[str, None] = {}
        self.returns = 0
        self.done = False

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if self.done or event not in ("call", "return"):
            return
        code = frame.f_code
        if not code.co_filename.startswith(SRC):
            return
        module = frame.f_globals.get("__name__", "?")
        if event == "call":
            self.modules.setdefault(module, None)
            self.functions.setdefault(f"{module}.{code.co_qualname}", None)
            if code.co_name == "succeed_step":
                self.done = True
            return
        caller = frame.f_back
        if caller is not None and caller.f_globals.get("__name__") == self.driver and module != self.driver:
            self.returns += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflow", nargs="?", help="a workflow file (default: one busybox step)")
    parser.add_argument("--driver", default="", help="the driving module (default: where submit_run lives)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hetflow-walk-") as tmp:
        os.environ["HETFLOW_HOME"] = str(Path(tmp) / "home")
        workflow = args.workflow
        if workflow is None:
            workflow = str(Path(tmp) / "walk.yaml")
            Path(workflow).write_text(ONE_STEP)
        from hetflow.cli.main import main as hetflow_main
        from hetflow.execute import submit_run

        walk = Walk(args.driver or submit_run.__module__)
        sys.setprofile(walk.hook)
        try:
            hetflow_main(["run", "-q", "--no-cache", workflow])
        except SystemExit as exc:
            if exc.code not in (0, None):
                print(f"hetflow run exited {exc.code}", file=sys.stderr)
                return 1
        finally:
            sys.setprofile(None)
    packages: dict[str, int] = {}
    for m in walk.modules:
        top = ".".join(m.split(".")[:2])
        packages[top] = packages.get(top, 0) + 1
    result = {
        "packages": packages,
        "execute_modules": sum(m.startswith("hetflow.execute") for m in walk.modules),
        "execute_functions": sum(f.startswith("hetflow.execute") for f in walk.functions),
        "modules": len(walk.modules),
        "functions": len(walk.functions),
        "returns_to_driver": walk.returns,
        "driver": walk.driver,
        "module_list": list(walk.modules),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['modules']} modules, {result['functions']} functions before the first stored output;")
        print(f"  of them in execute/: {result['execute_modules']} modules, {result['execute_functions']} functions")
        print(f"{walk.returns} returns to {walk.driver}")
        print("  " + ", ".join(f"{p.removeprefix('hetflow.')} {n}" for p, n in packages.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

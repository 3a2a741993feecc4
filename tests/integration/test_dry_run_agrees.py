"""The dry run agrees with the run (issue 42), step by step, with real podman: each example
that runs here in seconds (and a fan-out over an upstream step's output) is previewed with
`run --dry-run --json`, run, previewed again and run again; each preview must say what the run
after it did (runs / cached / skipped, the variant, and the run's own reason for the variant).
A missing secret is refused by the dry run as by the run, with the same message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from demo.images import build_examples

from tests.integration.hfkit import BUSYBOX, Hetflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PENDING = "its items are known when"  # a fan-out whose items only the run can read

# A fan-out over an upstream step's output (no example has one): after a full run, the dry
# run said 'each' and 'sum' would run, and the run took all of them from the cache.
DYNAMIC = f"""apiVersion: hetflow/v1
name: dynamic
steps:
  list:
    image: {BUSYBOX}
    command: [sh, -c, "mkdir -p /out/parts && for i in 1 2 3; do echo $i > /out/parts/p$i.txt; done"]
    outputs: [parts]
  each:
    image: {BUSYBOX}
    foreach: {{files: list/parts}}
    inputs: {{part: "{{{{ item.path }}}}"}}
    command: [sh, -c, "cat /in/part/{{{{ item.name }}}} > /out/n.txt"]
    outputs: [n.txt]
  sum:
    image: {BUSYBOX}
    inputs: {{ns: each/n.txt}}
    command: [sh, -c, "cat /in/ns/*/n.txt > /out/all.txt"]
    outputs: [all.txt]
"""

# (example, its workflow file, arguments, environment): the examples that run here in seconds
CASES = [
    ("meanpool", "workflow.yaml", ("-p", "size=256", "-p", "iterations=4"), {}),
    ("wordcount", "workflow.yaml", (), {}),
    ("tour", "workflow.yaml", ("--params-file", "params.yaml"), {"TOUR_TOKEN": "s3cret-42"}),
    ("dynamic", "workflow.yaml", (), {}),
]


@pytest.fixture(scope="module")
def example_images() -> list[str]:
    return build_examples(EXAMPLES, gpu=False, log=lambda _: None)  # cached per machine


def _copy(tmp_path: Path, name: str) -> Path:
    """The example in a folder of the test's own (wordcount publishes beside its file)."""
    folder = tmp_path / name
    if name == "dynamic":
        folder.mkdir()
        (folder / "workflow.yaml").write_text(DYNAMIC)
    else:
        shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("results"))
    return folder


def _said(preview: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in preview["steps"]}


def _did(run: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Each step of a run as (runs | cached | skipped, its variant, its reason)."""
    out = {}
    for s in run["steps"]:
        reason = s.get("reason") or ""
        status = "skipped" if s["state"] == "skipped" else "cached" if reason.startswith("cached") else "runs"
        out[s["step"]] = (status, s.get("variant") or "", reason)
    return out


def _disagreements(said: dict[str, dict[str, Any]], did: dict[str, tuple[str, str, str]]) -> list[str]:
    found = []
    pending = {n for n, s in said.items() if s["status"] == "runs" and PENDING in s["why"]}
    for name, (status, variant, reason) in did.items():
        parent = name.rsplit(".", 1)[0]
        if name not in said and parent in pending:
            if status != "runs":  # its items were unknown: the dry run said the fan-out runs
                found.append(f"{name}: dry run said its fan-out {parent!r} runs, the run: {status}")
            continue
        s = said.get(name)
        if s is None:
            found.append(f"{name}: the run had it, the dry run did not")
        elif s["status"] != status:
            found.append(f"{name}: dry run said {s['status']} ({s['why']}), the run: {status} ({reason})")
        elif status == "runs" and (s["variant"] != variant or reason not in s["why"]):
            found.append(f"{name}: dry run chose {s['variant']} ({s['why']}), the run {variant} ({reason})")
    found += [f"{n}: the dry run had it, the run did not" for n in said if n not in did and n not in pending]
    return found


@pytest.mark.parametrize(("name", "file", "args", "env"), CASES, ids=[c[0] for c in CASES])
def test_each_dry_run_says_what_the_run_after_it_does(
    hf: Hetflow, tmp_path: Path, example_images: list[str], name: str, file: str, args: tuple[str, ...], env: dict
) -> None:
    folder = _copy(tmp_path, name)
    wf = str(folder / file)
    args = tuple(str(folder / a) if (folder / a).is_file() else a for a in args)
    for round_ in ("fresh", "after a full run"):
        preview = json.loads(hf("run", "--dry-run", "--json", *args, wf, extra_env=env, timeout=300).stdout)
        hf("run", "-q", *args, wf, extra_env=env, timeout=300)
        found = _disagreements(_said(preview), _did(hf.show(hf.last_run())))
        assert found == [], f"{name}, {round_}:\n" + "\n".join(found)
    if name == "dynamic":  # the second preview expanded the fan-out from the cached output
        assert preview["totals"] == {"runs": 0, "cached": 5, "skipped": 0, "steps": 5, "run_seconds": 0.0}


def test_no_cache_dry_run_says_why_the_variant(hf: Hetflow, example_images: list[str]) -> None:
    wf, args = str(EXAMPLES / "meanpool" / "workflow.yaml"), ("-p", "size=256", "-p", "iterations=4")
    said = _said(json.loads(hf("run", "--dry-run", "--json", "--no-cache", *args, wf).stdout))
    assert said["pool"]["why"].startswith("--no-cache; cpu: planned (")
    assert "gpu rejected: asks for 1 GPU" in said["pool"]["why"]


SECRET = f"""apiVersion: hetflow/v1
name: secret
steps:
  s:
    image: {BUSYBOX}
    secrets: [HF_DRY_RUN_UNSET_SECRET]
    command: [true]
"""


def test_a_missing_secret_is_refused_by_the_dry_run_as_by_the_run(hf: Hetflow, tmp_path: Path) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(SECRET)
    run = hf("run", str(wf), check=False)
    dry = hf("run", "--dry-run", "--json", str(wf), check=False)
    assert run.returncode == dry.returncode == 2
    assert "needs secret 'HF_DRY_RUN_UNSET_SECRET'" in run.stderr
    assert dry.stderr == run.stderr and dry.stdout == ""
    assert "Traceback" not in dry.stderr

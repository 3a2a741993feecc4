"""`hetflow run --dry-run` (issue 25): what would run, what is cached (from which run, which
key) and what is skipped (why), with real podman: the keys it predicts are the keys the real
run keeps in the cache, an edit sends exactly the edited step and what follows it back to
"runs", and a dry run starts no container and records no run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.hfkit import BUSYBOX, Hetflow, podman

WORKFLOW = """apiVersion: hetflow/v1
name: preview
params: {greeting: hello}
data:
  texts: texts/*.txt
steps:
  count:
    foreach: {files: data.texts}
    image: {busybox}
    command: [sh, -c, 'wc -w < "/in/text/{{ item.name }}" > /out/n']
    inputs: {text: "{{ item.path }}"}
    outputs: [n]
  total:
    needs: [count]
    image: {busybox}
    command: [sh, -c, 'cat /in/parts/* > /out/sum; echo {{ params.greeting }} >> /out/sum']
    inputs: {parts: count/n}
    outputs: [sum]
  drystamp:
    image: {busybox}
    command: [sh, -c, 'date > /out/when']
    outputs: [when]
    cache: false
  render:
    optional: true
    image: {busybox}
    command: [sh, -c, 'echo gpu > /out/img']
    resources: {gpus: 1}
    outputs: [img]
"""


def _setup(tmp_path: Path) -> Path:
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("one two three\n")
    (texts / "b.txt").write_text("four five\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.replace("{busybox}", BUSYBOX))
    return wf


def _preview(hf: Hetflow, wf: Path, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(hf("run", "--dry-run", "--json", *args, str(wf)).stdout)
    return data


def _status(data: dict[str, Any]) -> dict[str, str]:
    return {s["step"]: s["status"] for s in data["steps"]}


def _containers() -> list[str]:
    """Containers of a step named as this test's (other tests may run at once: see conftest)."""
    return podman("ps", "-a", "--filter", "label=hetflow.step=drystamp", "--format", "{{.Names}}")


def test_dry_run_predicts_the_cache_and_records_nothing(hf: Hetflow, tmp_path: Path) -> None:
    wf = _setup(tmp_path)
    before = _containers()

    first = _preview(hf, wf)
    assert _status(first) == {
        "count.0": "runs",
        "count.1": "runs",
        "total": "runs",
        "drystamp": "runs",
        "render": "skipped",
    }
    why = {s["step"]: s["why"] for s in first["steps"]}
    # the cache's reason, then the variant's in the run's words (issue 42: --no-cache hid it)
    assert why["total"] == "its input comes from 'count.0', which runs; default: planned (est. 60s)"
    assert why["drystamp"] == "cache: false; default: planned (est. 60s)"
    assert why["render"].startswith("optional step: no variant fits this machine")
    runs = sum(s["estimate"] for s in first["steps"] if s["status"] == "runs")
    assert first["totals"] == {"runs": 4, "cached": 0, "skipped": 1, "steps": 5, "run_seconds": runs}
    assert json.loads(hf("ps", "--all", "--json").stdout) == []  # nothing recorded
    assert _containers() == before  # nothing started
    predicted = {s["step"]: s["key"] for s in first["steps"] if s["key"]}
    assert sorted(predicted) == ["count.0", "count.1"]  # total's key needs count's outputs

    hf("run", "-q", str(wf))
    run_id = hf.last_run()
    kept = {e["step"]: e["key"] for e in json.loads(hf("cache", "ls", "--json").stdout)["entries"]}
    assert {s: kept[s] for s in predicted} == predicted  # the keys the run kept are the ones predicted

    again = _preview(hf, wf)
    assert _status(again) == {**_status(first), "count.0": "cached", "count.1": "cached", "total": "cached"}
    cached = [s for s in again["steps"] if s["status"] == "cached"]
    assert {(s["step"], s["from_run"], s["key"]) for s in cached} == {(s, run_id, kept[s]) for s in kept}
    assert again["totals"]["cached"] == 3

    # an edit: one input file and a param; what reads them runs again, the rest stays cached
    (tmp_path / "texts" / "b.txt").write_text("four five six\n")
    edited = _preview(hf, wf, "-p", "greeting=hi")
    assert _status(edited) == {**_status(again), "count.1": "runs", "total": "runs"}
    nocache = _preview(hf, wf, "--no-cache")
    whys = [s["why"] for s in nocache["steps"] if s["status"] == "runs"]
    assert whys and all(w.startswith("--no-cache; default: planned (est. ") for w in whys), whys
    assert [r["id"] for r in json.loads(hf("ps", "--all", "--json").stdout)] == [run_id]


def test_dry_run_refuses_what_run_would_refuse_and_says_so(hf: Hetflow, tmp_path: Path) -> None:
    wf = _setup(tmp_path)
    wf.write_text(wf.read_text().replace("texts/*.txt", "nothing/*.txt").replace(BUSYBOX, "localhost/no/such:1"))
    done = hf("run", "--dry-run", str(wf), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{wf}:5: error: data 'texts'" in done.stderr and "matched no file" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []
    bad = hf("run", "--json", str(wf), check=False)
    assert bad.returncode == 2 and "--json goes with --dry-run" in bad.stderr

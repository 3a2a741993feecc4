"""The tour of docs/tutorial.md (issue 25), command by command, in the example image: validate
with a params file, a dry run, the run (a sweep from the params file, a condition on a param
and one on an upstream output, a secret), what `show` and `logs` say, then a profile's dry
run.  tests/unit/test_docs.py checks that the page shows exactly these commands."""

from __future__ import annotations

import json
from pathlib import Path

from demo.images import build_examples

from tests.integration.hfkit import Hetflow

TOUR = Path(__file__).resolve().parents[2] / "examples" / "tour"
TOKEN = {"TOUR_TOKEN": "s3cret-42"}


def test_the_readme_tour_runs_as_written(hf: Hetflow) -> None:
    build_examples(TOUR.parent, gpu=False, log=lambda _: None)  # cached per machine
    wf, params = str(TOUR / "workflow.yaml"), str(TOUR / "params.yaml")
    profile = ("--config", str(TOUR / "config.yaml"), "--profile", "full")

    assert "valid (6 step(s))" in hf("validate", wf, "--params-file", params, extra_env=TOKEN).stdout
    plan = json.loads(hf("run", wf, "--params-file", params, "--dry-run", "--json", extra_env=TOKEN).stdout)
    assert plan["totals"]["runs"] == 5 and plan["totals"]["skipped"] == 1

    hf("run", wf, "--params-file", params, "-q", extra_env=TOKEN)
    rid = hf.last_run()
    steps = {s["step"]: s for s in hf.show(rid)["steps"]}
    assert [steps[f"train.{i}"]["item_label"] for i in range(3)] == ["[lr=0.1]", "[lr=0.01]", "[lr=0.001]"]
    assert steps["evaluate"]["state"] == "skipped" and steps["report"]["state"] == "succeeded"
    best = json.loads((Path(hf.show(rid)["workdir"]) / "steps" / "report" / "out" / "best.json").read_text())
    assert best == {"runs": 3, "best_lr": 0.1}
    logs = hf("logs", rid, "train").stdout
    assert "token ***" in logs and TOKEN["TOUR_TOKEN"] not in logs

    again = json.loads(hf("run", wf, "--params-file", params, *profile, "--dry-run", "--json", extra_env=TOKEN).stdout)
    assert {s["step"]: s["status"] for s in again["steps"]} == {
        "check": "cached",
        "train.0": "cached",
        "train.1": "cached",
        "train.2": "cached",
        "evaluate": "runs",
        "report": "cached",
    }
    refused = hf("run", wf, "--params-file", params, check=False)
    assert refused.returncode == 2 and "needs secret 'TOUR_TOKEN'" in refused.stderr

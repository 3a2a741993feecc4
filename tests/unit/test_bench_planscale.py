"""bench.planning.planscale's figures on a small generated workflow: every planner's plan is checked
(``check_plan``) and the dict the throughput table reads has its keys.  Nothing is timed
against a threshold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.local.loader import generate
from bench.planning.planscale import ROOT, _one_run, plan_figures


def test_plan_figures_on_a_small_workflow(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(generate(120))
    got = plan_figures(path, 1, wfcommons=False)
    assert got["nodes"] == 256
    row = got["generated"]
    assert row["steps"] == 120
    assert row["hetflow_s"] > 0 and row["heft_s"] > 0
    assert row["hetflow_makespan"] > 0 and row["heft_makespan"] > 0
    assert "epigenomics" not in got


def test_the_store_run_that_show_reads(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(tmp_path)}
    run_id = _one_run(env, steps=5)
    assert run_id
    shown = subprocess.run(
        [sys.executable, "-m", "hetflow.cli.main", "show", run_id, "--json"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert '"steps_total": 6' in shown.stdout

"""Sweeps from the command line (issue 25): a matrix axis may be a list param, set with
`-p lrs='[...]'`, and each item's values are recorded with the run and shown beside its
step in `show`, `show --json`, the report and the dashboard's run view (only `train.0..N`
was shown before), with real podman."""

from __future__ import annotations

import json
from pathlib import Path

from hetflow.state import Store
from hetflow.ui.views import RunCache, run_detail
from tests.integration.hfkit import BUSYBOX, Hetflow

WORKFLOW = f"""apiVersion: hetflow/v1
name: sweep
params: {{lrs: [0.1], batch: 32}}
data:
  texts: texts/*.txt
steps:
  train:
    image: {BUSYBOX}
    matrix: {{lr: "{{{{ params.lrs }}}}", bs: ["{{{{ params.batch }}}}", 64]}}
    command: [sh, -c, 'echo {{{{ item.lr }}}} {{{{ item.bs }}}} > /out/r']
    outputs: [r]
  count:
    image: {BUSYBOX}
    foreach: {{files: data.texts}}
    inputs: {{t: "{{{{ item.path }}}}"}}
    command: [sh, -c, 'wc -c < "/in/t/{{{{ item.name }}}}" > /out/n']
    outputs: [n]
"""


def test_a_sweep_set_from_the_command_line_shows_each_items_values(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("abc\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW)

    hf("run", "-q", "--no-cache", "-p", "lrs=[0.1, 0.01]", str(wf))
    rid = hf.last_run()
    data = hf.show(rid)
    items = {s["step"]: (s["item"], s["item_label"]) for s in data["steps"]}
    assert items == {
        "train.0": ({"lr": 0.1, "bs": 32}, "[lr=0.1,bs=32]"),
        "train.1": ({"lr": 0.1, "bs": 64}, "[lr=0.1,bs=64]"),
        "train.2": ({"lr": 0.01, "bs": 32}, "[lr=0.01,bs=32]"),
        "train.3": ({"lr": 0.01, "bs": 64}, "[lr=0.01,bs=64]"),
        "count.0": ({"name": "a.txt", "stem": "a", "rel": "a.txt", "path": "data.texts/a.txt"}, "[a.txt]"),
    }
    assert data["state"] == "succeeded"

    text = hf("show", rid).stdout
    rows = {
        line.split()[0]: line.split()[1] for line in text.splitlines() if line.split()[:1] and "." in line.split()[0]
    }
    assert rows["train.2"] == "[lr=0.01,bs=32]" and rows["count.0"] == "[a.txt]"

    page = tmp_path / "report.html"
    hf("report", rid, "-o", str(page))
    assert "train.3 [lr=0.01,bs=64]" in page.read_text()

    dashboard = run_detail(Store(hf.home / "state.db"), rid, RunCache())
    assert {s["step"]: s["item_label"] for s in dashboard["steps"]}["train.1"] == "[lr=0.1,bs=64]"


def test_a_matrix_axis_naming_a_scalar_param_is_refused_at_its_line(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("abc\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.replace('lr: "{{ params.lrs }}"', 'lr: "{{ params.batch }}"'))
    done = hf("validate", str(wf), check=False)
    assert done.returncode == 2
    assert f"{wf}:9: error: matrix axis 'lr' of step 'train'" in done.stderr
    assert "(or a param declared as a list)" in " ".join(done.stderr.split())
    assert json.loads(hf("ps", "--all", "--json").stdout) == []

"""Data in, fan-out and gather, publishing out: real podman containers, host files.

A glob of host files is declared once as workflow data; one step per file (foreach over
the data) reads only its own file; a gather step sees every item's output; its result is
published to a host directory, never overwriting a different file silently.  Fan-outs over
an upstream step's output expand when that step succeeds, and a resumed run keeps them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

FAN = f"""
apiVersion: hetflow/v1
name: fan
data:
  docs: docs/*.txt
templates:
  bb: {{image: {BUSYBOX}, resources: {{cpus: 0.5, memory: 64Mi}}}}
steps:
  count:
    use: bb
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    command: [sh, -c, "ls /in/doc > /out/seen.txt; wc -w < /in/doc/{{{{ item.name }}}} > /out/n.txt"]
    outputs: [n.txt, seen.txt]
  total:
    use: bb
    inputs: {{n: count/n.txt}}
    command: [sh, -c, "t=0; for f in /in/n/*/n.txt; do t=$((t + $(cat $f))); done; echo $t > /out/total.txt"]
    outputs: [total.txt]
    publish: {{to: results}}
"""


def docs(tmp_path: Path, words: dict[str, int]) -> None:
    (tmp_path / "docs").mkdir(exist_ok=True)
    for name, n in words.items():
        (tmp_path / "docs" / f"{name}.txt").write_text(" ".join(["w"] * n) + "\n")


def test_foreach_over_host_files_gathers_and_publishes(hf: Hetflow, tmp_path: Path) -> None:
    docs(tmp_path, {"a": 3, "b": 5, "c": 11})
    checked = hf("validate", write(tmp_path, FAN)).stdout
    assert "fan-out count: one step per file of data.docs, known when a run is submitted" in checked
    hf("run", write(tmp_path, FAN))
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert {s["step"]: s["state"] for s in data["steps"]} == {
        "count.0": "succeeded",
        "count.1": "succeeded",
        "count.2": "succeeded",
        "total": "succeeded",
    }
    # each item saw its own file and nothing else
    seen = [(step_out(hf, run_id, f"count.{i}") / "seen.txt").read_text().split() for i in range(3)]
    assert seen == [["a.txt"], ["b.txt"], ["c.txt"]]
    assert (step_out(hf, run_id, "total") / "total.txt").read_text().strip() == "19"
    assert (tmp_path / "results" / "total.txt").read_text().strip() == "19"
    # publishing the same bytes again is no conflict; every step comes from the cache
    hf("run", write(tmp_path, FAN))
    again = hf.show(hf.last_run())
    assert again["state"] == "succeeded" and all(s["attempts"] == 0 for s in again["steps"])
    # a new file sorts first and shifts every index: the other files' counts are still reused
    docs(tmp_path, {"0": 1})
    (tmp_path / "results" / "total.txt").unlink()
    hf("run", write(tmp_path, FAN))
    third = {s["step"]: s["attempts"] for s in hf.show(hf.last_run())["steps"]}
    assert third == {"count.0": 1, "count.1": 0, "count.2": 0, "count.3": 0, "total": 1}
    assert (tmp_path / "results" / "total.txt").read_text().strip() == "20"


def test_publish_never_replaces_a_different_file_unless_told(hf: Hetflow, tmp_path: Path) -> None:
    docs(tmp_path, {"a": 2})
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "total.txt").write_text("precious\n")
    proc = hf("run", write(tmp_path, FAN), check=False)
    assert proc.returncode != 0
    total = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["total"]
    assert total["state"] == "failed"
    assert "already exists and was not published by hetflow" in total["reason"] and "mode: overwrite" in total["reason"]
    assert total["attempts"] == 1  # publishing again cannot mend it: no retry
    assert (tmp_path / "results" / "total.txt").read_text() == "precious\n"
    hf("run", write(tmp_path, FAN.replace("publish: {to: results}", "publish: {to: results, mode: overwrite}")))
    assert (tmp_path / "results" / "total.txt").read_text().strip() == "2"
    # a result taken from the cache is published too, under the same rule
    (tmp_path / "results" / "total.txt").write_text("edited by hand\n")
    proc = hf("run", write(tmp_path, FAN), check=False)
    assert proc.returncode != 0
    total = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}["total"]
    assert (total["state"], total["attempts"]) == ("failed", 0)
    assert "cached outputs could not be published" in total["reason"]
    assert (tmp_path / "results" / "total.txt").read_text() == "edited by hand\n"


def test_missing_data_is_refused_before_anything_runs(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    proc = hf("run", write(tmp_path, FAN), check=False)
    assert proc.returncode == 2
    assert "'*.txt' matched no file in" in proc.stderr and str(tmp_path / "docs") in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []
    proc = hf("run", write(tmp_path, FAN.replace("docs/*.txt", "nothere.txt")), check=False)
    assert proc.returncode == 2 and "no such file or directory 'nothere.txt'" in proc.stderr


DYNAMIC = f"""
apiVersion: hetflow/v1
name: dyn
data:
  flag: flag.txt
steps:
  list:
    image: {BUSYBOX}
    command: [sh, -c, "printf 'a\\\\nbb\\\\n\\\\nccc\\\\n' > /out/names.txt;
      mkdir /out/chunks; echo 1 > /out/chunks/x; echo 22 > /out/chunks/y"]
    outputs: [names.txt, chunks]
  each:
    image: {BUSYBOX}
    foreach: {{lines: list/names.txt}}
    command: [sh, -c, "echo -n {{{{ item }}}} | wc -c > /out/len.txt"]
    outputs: [len.txt]
  per:
    image: {BUSYBOX}
    foreach: {{files: list/chunks}}
    inputs: {{c: "{{{{ item.path }}}}"}}
    command: [sh, -c, "cat /in/c/{{{{ item.name }}}} > /out/copy.txt"]
    outputs: [copy.txt]
  sum:
    image: {BUSYBOX}
    inputs: {{l: each/len.txt, p: per/copy.txt, flag: data.flag}}
    command: [sh, -c, "grep -q go /in/flag/flag.txt || exit 3; cat /in/l/*/len.txt /in/p/*/copy.txt > /out/all.txt"]
    outputs: [all.txt]
"""


def test_fanout_over_an_upstream_output_expands_at_run_time_and_resume_keeps_it(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "flag.txt").write_text("stop\n")
    proc = hf("run", write(tmp_path, DYNAMIC), check=False)
    assert proc.returncode != 0
    run_id = hf.last_run()
    states = {s["step"]: s["state"] for s in hf.show(run_id)["steps"]}
    assert states == {
        "list": "succeeded",
        "each.0": "succeeded",
        "each.1": "succeeded",
        "each.2": "succeeded",
        "per.0": "succeeded",
        "per.1": "succeeded",
        "sum": "failed",
    }
    (tmp_path / "flag.txt").write_text("go\n")
    hf("resume", run_id)
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["sum"]["state"] == "succeeded"
    assert all(s["attempts"] == 1 for n, s in steps.items() if n != "sum")  # nothing ran twice
    assert (step_out(hf, run_id, "sum") / "all.txt").read_text().split() == ["1", "2", "3", "1", "22"]


# The same declarations on a cluster engine (Slurm, Ray): host data is mounted where it is
# (the test clusters share this machine's file system, as a real cluster shares home and
# project directories), fan-outs expand alike, and results are published by the executor.
CLUSTER_FAN = f"""
apiVersion: hetflow/v1
name: clusterfan
data:
  docs: docs/*.txt
steps:
  count:
    image: {BUSYBOX}
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    command: [sh, -c, "wc -w < /in/doc/{{{{ item.name }}}} > /out/n.txt; echo {{{{ item.stem }}}} > /out/name.txt"]
    resources: {{cpus: 1, memory: 128Mi}}
    estimate: 1s
    outputs: [n.txt, name.txt]
  again:
    image: {BUSYBOX}
    foreach: {{lines: count.1/name.txt}}
    command: [sh, -c, "echo again-{{{{ item }}}} > /out/a.txt"]
    resources: {{cpus: 1, memory: 128Mi}}
    estimate: 1s
    outputs: [a.txt]
  total:
    image: {BUSYBOX}
    inputs: {{n: count/n.txt, a: again/a.txt}}
    command: [sh, -c, "t=0; for f in /in/n/*/n.txt; do t=$((t + $(cat $f))); done; echo $t > /out/total.txt;
      cat /in/a/*/a.txt >> /out/total.txt"]
    resources: {{cpus: 1, memory: 128Mi}}
    estimate: 1s
    outputs: [total.txt]
    publish: {{to: results}}
"""


def check_cluster_fan(hf: Hetflow, tmp_path: Path, config: str) -> None:
    docs(tmp_path, {"a": 4, "b": 6})
    hf("run", "-q", "--config", config, write(tmp_path, CLUSTER_FAN), timeout=300)
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded"
    assert sorted(s["step"] for s in data["steps"]) == ["again.0", "count.0", "count.1", "total"]
    assert (tmp_path / "results" / "total.txt").read_text().split() == ["10", "again-b"]

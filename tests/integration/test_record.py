"""The run record with real podman: a step that holds a known amount of memory and burns
CPU, measured through its own parent cgroup; `hetflow trace` and `hetflow report` show it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, write

MI = 1 << 20
# `tail` keeps the last line of its input, and /dev/zero has no newline: tail holds all
# 64 MiB at once.  The loop burns CPU in the shell.
WF = f"""
apiVersion: hetflow/v1
name: hog
steps:
  hog:
    image: {BUSYBOX}
    command: [sh, -c, "head -c 64m /dev/zero | tail > /dev/null; i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done"]
    resources: {{cpus: 1, memory: 1Gi}}
"""


def test_trace_shows_peak_memory_and_cpu_time_and_report_writes_one_page(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", "-q", write(tmp_path, WF))
    run_id = hf.last_run()

    rows = {r["step"]: r for r in json.loads(hf("trace", run_id, "--json").stdout)}
    hog = rows["hog"]
    assert 64 * MI <= hog["peak_rss"] <= 160 * MI, hog  # the 64 MiB tail held, plus the shell and runc's init
    assert hog["cpu_time"] > 0
    assert hog["memory"] == 1 << 30 and hog["cpus"] == 1
    assert str(hog["image_id"]).startswith("sha256:")
    assert 0 < hog["realtime"] <= hog["duration"]

    tsv = hf("trace", run_id).stdout.splitlines()
    assert tsv[0].startswith("task_id\tstep\titem\tattempt") and len(tsv) == 2
    assert "MiB" in tsv[1].split("\t")[tsv[0].split("\t").index("peak_rss")]

    out = tmp_path / "report.html"
    hf("report", run_id, "-o", str(out))
    html = out.read_text()
    assert 'data-step="hog"' in html
    assert 'data-flag="over-ask"' in html  # 1Gi asked, about 70 MiB used
    assert not re.search(r"https?://", html)

    # the attempts' parent cgroups are gone with their containers
    assert not list(Path("/sys/fs/cgroup/memory/hetflow").glob(f"hf-{run_id}-*"))
    assert not list(Path("/sys/fs/cgroup").glob(f"hetflow/hf-{run_id}-*"))


def test_trace_and_report_say_what_to_fix(hf: Hetflow, tmp_path: Path) -> None:
    bad = hf("trace", "nosuchrun", check=False)
    assert bad.returncode != 0 and "no run 'nosuchrun'" in bad.stderr and "Traceback" not in bad.stderr
    fields = hf("trace", "anyrun", "--fields", "step,bogus", check=False)
    assert fields.returncode != 0 and "unknown field(s) bogus" in fields.stderr
    nowhere = hf("report", "anyrun", "-o", str(tmp_path / "missing" / "r.html"), check=False)
    said = " ".join(nowhere.stderr.split())  # a long tmp path wraps the message
    assert nowhere.returncode != 0 and "does not exist" in said and "Traceback" not in said

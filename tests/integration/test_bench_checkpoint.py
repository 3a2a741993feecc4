"""``python -m bench.checkpoint --quick`` on real podman with the built CRIU (about 30 s): every
restore goes on from its dump, and the crashed counter restored from its checkpoint finishes from
there rather than from zero.  Skipped, saying why, where CRIU 4 is not built (``make criu``)."""

from __future__ import annotations

import json
import shutil

import pytest
from bench.checkpoint import criu_problem, main

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.skipif(bool(criu_problem()), reason=criu_problem() or "CRIU works"),
]


def test_quick_run_restores_state_and_saves_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    sizes = got["sizes"]
    assert [(r["mib"], r["compress"]) for r in sizes] == [(64, "none"), (64, "zstd")]
    for row in sizes:
        assert row["kept_state"], row
        assert row["rss_mib"] >= 64 and row["archive_mib"] >= 60, row  # the dump holds the memory
    work = got["work"]
    runs = work["runs"]
    assert all(r["finished"] for r in runs.values()), runs
    restore, restart = runs["restore"], runs["restart"]
    assert restore["checkpoints"] >= 1
    # restored from a checkpoint taken before the kill: past zero, not past the kill
    assert 0 < restore["ticks_resumed"] <= restore["ticks_at_kill"] < work["ticks"]
    assert restart["ticks_resumed"] < restart["ticks_at_kill"]  # the restart began again below its progress

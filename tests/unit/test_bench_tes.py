"""bench.tes's parts that need no server: the anchor's argv carries hetflow's hardening, p99
picks the 99th percentile, and the table's ratio is hetflow over the loop of the same run."""

from __future__ import annotations

from pathlib import Path

from bench.tes import Row, loop_argv, p99, table


def test_the_loop_runs_hetflows_hardened_argv(tmp_path: Path) -> None:
    argv = loop_argv(3, tmp_path)
    assert argv[:3] == ["podman", "run", "--rm"]
    for flag in ("--cap-drop=all", "no-new-privileges", "--read-only", "--pull", "never"):
        assert flag in argv
    assert argv[argv.index("--network") + 1] == "none"
    assert argv[-3:] == ["localhost/alpine:latest", "echo", "hello"]
    assert f"path={tmp_path}/3.log" in argv


def test_p99_and_the_ratio() -> None:
    assert p99([float(i) for i in range(1, 101)]) == 100.0
    assert p99([2.0]) == 2.0
    text = table([Row("hetflow", 10, 0, 50.0, 1.0, 4.0), Row("loop", 10, 0, None, 2.0, 2.0)])
    assert "| ratio hetflow / loop | | | | 0.50 | 2.00 |" in text
    assert "(queued at once)" in text

"""bench.local.checkpoint's pure parts (no containers): the workload's state record, the container
arguments (hetflow's flags plus --passwd=false), and the tables on made-up figures."""

from __future__ import annotations

from pathlib import Path

from bench.local.checkpoint import RECORD, container_args, read_state, reset_state
from bench.local.checkpoint_report import render


def test_state_record_is_read_and_reset_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state"
    assert read_state(path) is None
    path.write_bytes(b"42 00ab 00cd 1 7".ljust(RECORD - 1) + b"\n")
    state = read_state(path)
    assert state is not None and (state.tick, state.seed, state.checksum, state.done) == (42, "00ab", "00cd", True)
    reset_state(path)
    assert read_state(path) is None
    assert path.stat().st_size == RECORD  # a restore needs the open file at its dumped size


def test_container_args_are_hetflows_with_passwd_off(tmp_path: Path) -> None:
    args = container_args("c1", tmp_path / "out", 256, ticks=10, iters=5)
    assert args[:2] == ["run", "--passwd=false"]
    for flag in ("--cap-drop=all", "--read-only", "--user", "--memory"):
        assert flag in args
    assert args[args.index("--network") + 1] == "none"
    assert f"{tmp_path / 'out'}:/out:rw" in args
    assert args[-5:] == ["/ckptwork", "256", "10", "5", "/out/state"]
    assert int(args[args.index("--memory") + 1]) > 256 << 20


def test_render_shows_both_tables() -> None:
    row = {"mib": 64, "compress": "none", "reps": 3, "rss_mib": 65.0, "archive_mib": 64.0}
    run = {"checkpoints": 0, "checkpoint_s": 0.0, "restore_s": 0.0, "finished": True}
    got: dict[str, object] = {
        "machine": "test",
        "sizes": [{**row, "checkpoint_s": 0.3, "restore_s": 0.4, "kept_state": True}],
        "work": {
            "work_s": 6.0,
            "every_s": 1.5,
            "kill_at": 0.7,
            "mib": 32,
            "ticks": 600,
            "iters_per_tick": 1000,
            "runs": {
                "plain": {**run, "wall_s": 6.0, "kill_s": 4.0, "ticks_at_kill": 0, "ticks_resumed": 0},
                "restart": {**run, "wall_s": 10.0, "kill_s": 4.0, "ticks_at_kill": 400, "ticks_resumed": 1},
                "restore": {
                    **run,
                    "wall_s": 7.0,
                    "kill_s": 4.5,
                    "ticks_at_kill": 400,
                    "ticks_resumed": 300,
                    "checkpoints": 2,
                    "restore_s": 0.3,
                },
            },
        },
    }
    text = render(got)
    assert "    64 MiB" in text and "yes" in text
    assert "saved against the restart: 3.0 s" in text
    assert "work redone 1.0 s: 400 -> 300 ticks" in text
    assert "reference 4.0 s, with 2 checkpoints 4.5 s (+0.5 s" in text
    assert "reference 2.0 s for the rest of the work; restored 2.5 s" in text

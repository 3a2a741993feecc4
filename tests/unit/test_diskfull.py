"""A failed step's partial outputs go only when its disk is full (``execute.diskfull``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute.data import diskfull

CASES = [
    pytest.param(0, True, True, id="full-disk-removed-and-said"),
    pytest.param(diskfull.LOW_WATER - 1, True, True, id="nearly-full-counts"),
    pytest.param(diskfull.LOW_WATER, True, False, id="room-left-kept"),
    pytest.param(0, False, False, id="no-outputs-nothing-to-say"),
]


def test_a_step_that_did_not_fill_the_disk_is_not_blamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: 0)
    staging = tmp_path / "attempts" / "small" / "1" / "out"
    staging.mkdir(parents=True)
    (staging / "s.txt").write_bytes(b"")

    reason = diskfull.out_of_space(staging)

    assert reason is not None and not staging.exists()
    assert "is full (" in reason and "not by this step's outputs; free space there" in reason


@pytest.mark.parametrize(("free", "wrote", "full"), CASES)
def test_out_of_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, wrote: bool, full: bool) -> None:
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: free)
    staging = tmp_path / "attempts" / "big" / "1" / "out"
    if wrote:
        (staging / "d").mkdir(parents=True)
        (staging / "big").write_bytes(b"x" * 3_000_000)
        (staging / "d" / "part").write_bytes(b"y" * 500_000)

    reason = diskfull.out_of_space(staging)

    assert (reason is not None) == full
    assert staging.exists() == (wrote and not full)
    if reason is not None:
        assert reason.startswith("out of disk space: the disk at /")
        assert f"(holding {staging.parent})" in reason and "had written 3.5 MB" in reason
        assert "free more than 3.5 MB there" in reason and "hetflow resume" in reason

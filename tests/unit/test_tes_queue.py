"""The TES queue's fair share and limits (``hetflow.tes.service.decide``), as named tables."""

from __future__ import annotations

import pytest

from hetflow.tes.service import Limits, Queued, TesConfig, decide


def _queue(*owners: str, gpus: int = 0) -> list[Queued]:
    return [Queued(f"t{i}", owner, gpus, i) for i, owner in enumerate(owners)]


@pytest.mark.parametrize(
    ("queue", "running", "free", "starts"),
    [
        pytest.param(_queue("a", "a", "a", "b"), {}, 2, ["t0", "t3"], id="second-user-starts-beside-a-long-queue"),
        pytest.param(_queue("a", "b", "a"), {"b": (3, 0)}, 2, ["t0", "t2"], id="the-user-running-fewest-goes-first"),
        pytest.param(_queue("a", "b"), {}, 0, [], id="a-full-server-starts-nothing"),
    ],
)
def test_fair_share(queue: list[Queued], running: dict[str, tuple[int, int]], free: int, starts: list[str]) -> None:
    decisions = decide(queue, running, TesConfig(max_running=8), free=free, free_gpus=0)
    assert [d.task_id for d in decisions if d.start] == starts
    assert len(decisions) == len(queue)


def test_limits_say_why() -> None:
    config = TesConfig(max_running=8, users={"a": Limits(max_running=1), "b": Limits(max_gpus=0)})
    decisions = decide([*_queue("a", "a"), Queued("g", "b", 1, 9)], {"a": (1, 0)}, config, free=4, free_gpus=4)
    assert not any(d.start for d in decisions)
    whys = {d.task_id: d.why for d in decisions}
    assert whys["t0"] == "a runs 1 of at most 1 tasks"
    assert whys["g"] == "b holds 0 of at most 0 GPUs; it asks 1"

"""What one client address may take from the dashboard (``hetflow.ui.limits``), and the log
feed's unfinished last line (``hetflow.ui.streams``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.ui.limits import MAX_ADDRESSES, Streams, WrongTokens, client_address
from hetflow.ui.streams import log_tail


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wrong_tokens_lock_an_address_out_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    wrong = WrongTokens(3, window=60, clock=clock)
    for _ in range(3):
        assert wrong.retry_after("10.0.0.1") is None
        wrong.failed("10.0.0.1")
        clock.now += 10
    assert wrong.retry_after("10.0.0.1") == 30  # the first failure leaves the minute at 1060
    assert wrong.retry_after("10.0.0.2") is None  # another address
    clock.now += 30
    assert wrong.retry_after("10.0.0.1") is None
    wrong.failed("10.0.0.1")
    assert wrong.retry_after("10.0.0.1") == 10


def test_wrong_tokens_remember_a_bounded_number_of_addresses() -> None:
    wrong = WrongTokens(1, clock=Clock())
    for n in range(MAX_ADDRESSES + 10):
        wrong.failed(f"a{n}")
    assert wrong.retry_after("a0") is None  # the oldest forgotten
    assert wrong.retry_after(f"a{MAX_ADDRESSES + 9}") is not None


def test_streams_are_limited_in_all_and_per_address() -> None:
    streams = Streams(limit=4, per_client=2)
    for address in ("a", "a", "b"):
        assert streams.refusal(address) is None
        streams.opened(address)
    refused = streams.refusal("a")
    assert refused is not None and refused[0] == 429 and "per client address" in refused[1]
    streams.opened("c")
    assert streams.refusal("d") == (503, "4 event streams are open; close one or try again later")
    streams.closed("a")
    assert streams.refusal("a") is None and streams.open == 3


@pytest.mark.parametrize(
    ("client", "address"),
    [(("127.0.0.2", 5000), "127.0.0.2"), (["::1", 1], "::1"), (None, "unknown"), ((), "unknown")],
    ids=["tuple", "list", "none", "empty"],
)
def test_the_client_address_of_a_scope(client: object, address: str) -> None:
    assert client_address(client) == address


LINE = "2026-01-01T00:00:00.000000000Z stdout {} {}\n"


def test_an_unfinished_last_line_is_sent_partial_and_read_again(tmp_path: Path) -> None:
    log = tmp_path / "a.1.log"
    log.write_text(LINE.format("F", "starting") + LINE.format("P", "progress 4"))
    lines, offset = log_tail(log, None)
    assert lines == [
        {"stream": "stdout", "text": "starting"},
        {"stream": "stdout", "text": "progress 4", "partial": True},
    ]
    assert offset == len(LINE.format("F", "starting"))  # where the unfinished line starts
    with log.open("a") as f:
        f.write(LINE.format("P", "5%"))
    assert log_tail(log, offset)[0] == [{"stream": "stdout", "text": "progress 45%", "partial": True}]
    with log.open("a") as f:
        f.write(LINE.format("F", " done"))
    lines, end = log_tail(log, offset)
    assert lines == [{"stream": "stdout", "text": "progress 45% done"}] and end == log.stat().st_size

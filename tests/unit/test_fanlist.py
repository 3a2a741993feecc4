"""A fan-out's list read from a file or a folder at submit or run time is counted as it is
read and reading stops at the first item over the limit (issue 37): an endless source ends."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hetflow.execute.data.fanlist import TooManyItems, check_count, list_files, read_lines


def test_lines_are_the_non_empty_lines_stripped(tmp_path: Path) -> None:
    f = tmp_path / "names.txt"
    f.write_text(" a \n\nbb\r\nccc\x0bd\n   \n")
    assert read_lines(f, "s/names.txt", limit=4) == ["a", "bb", "ccc", "d"]


def test_reading_an_endless_list_stops_at_the_item_over_the_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    written = [0]

    def write_forever() -> None:
        try:
            with fifo.open("w") as f:
                while True:
                    f.write("item\n")
                    written[0] += 1
        except BrokenPipeError:
            pass  # the reader stopped and closed its end

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    with pytest.raises(TooManyItems, match=r"s/endless \(.*\) holds more than 1000 items .* at most 1000"):
        read_lines(fifo, "s/endless", limit=1000)
    writer.join(timeout=60)
    assert not writer.is_alive()


def test_files_under_a_folder_are_counted_as_walked(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / "d" / str(i % 2)).mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / str(i % 2) / f"f{i}").write_text("x")
    assert sorted(list_files(tmp_path / "d", "s/d", limit=5)) == ["0/f0", "0/f2", "0/f4", "1/f1", "1/f3"]
    with pytest.raises(TooManyItems, match="holds more than 4 items"):
        list_files(tmp_path / "d", "s/d", limit=4)


def test_a_list_in_hand_is_checked_against_the_limit() -> None:
    check_count("files", "data.docs", 3, "listed at submit", limit=3)
    with pytest.raises(TooManyItems, match=r"foreach files of data.docs \(listed at submit\) holds 4 items"):
        check_count("files", "data.docs", 4, "listed at submit", limit=3)

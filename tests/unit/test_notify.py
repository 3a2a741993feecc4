"""Notifications without a server: how often a POST is tried and what a failure leaves,
through the Notifier's post and sleep seams, on a real store."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetflow.errors import UsageError
from hetflow.execute import NOTIFY_FAILED, Notifier, Notify, check_urls, urls_of
from hetflow.state import Store


class Answers:
    """A post seam answering from a list: an int is an HTTP status, an exception is raised."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, url: str, payload: Mapping[str, Any], timeout: float) -> int:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize(
    ("answers", "calls", "delivered", "why"),
    [
        pytest.param((200,), 1, True, "", id="first-try"),
        pytest.param((503, 200), 2, True, "", id="5xx-then-ok"),
        pytest.param((httpx.ConnectTimeout("slow"), 204), 2, True, "", id="timeout-then-ok"),
        pytest.param((429,), 3, False, "HTTP 429", id="429-every-time"),
        pytest.param((404,), 1, False, "HTTP 404", id="4xx-not-tried-again"),
        pytest.param((httpx.ConnectError("refused"),), 3, False, "ConnectError: refused", id="no-answer"),
    ],
)
def test_a_post_is_tried_again_only_when_asking_again_can_help(
    tmp_path: Path, answers: tuple[int | Exception, ...], calls: int, delivered: bool, why: str
) -> None:
    post, slept = Answers(*answers), []
    notifier = Notifier(tmp_path / "state.db", "r", Notify(("http://h/x",), tries=3), post=post, sleep=slept.append)
    assert notifier.try_post("http://h/x", {}) == (None if delivered else why)
    assert post.calls == calls
    assert slept == [0.5, 1.0][: calls - 1]  # the backoff doubles


def test_an_undelivered_notification_is_a_note_in_the_runs_events(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.close()
    to = Notify(("http://u:pw@h:81/x?k=v",), tries=2)
    notifier = Notifier(tmp_path / "state.db", "r1", to, post=Answers(500), sleep=lambda _: None)
    notifier.deliver({"event": "run-ended", "step": None})
    reader = Store(tmp_path / "state.db", read_only=True)
    notes = [e for e in reader.events("r1") if e.kind == NOTIFY_FAILED]
    reader.close()
    assert [n.message for n in notes] == ["notification (run-ended) to http://h:81/x failed after 2 tries: HTTP 500"]


def test_the_wait_for_the_last_posts_is_bounded_by_the_tries() -> None:
    assert Notify(("a", "b"), timeout=5, tries=3, backoff=0.5).budget == 2 * (15 + 1.5) + 1


@pytest.mark.parametrize(
    ("value", "urls"),
    [
        pytest.param("http://h/x", ("http://h/x",), id="one"),
        pytest.param(["http://a/", "https://b:8443/x"], ("http://a/", "https://b:8443/x"), id="a-list"),
        pytest.param((), (), id="none"),
    ],
)
def test_notify_in_the_settings_file_is_a_url_or_a_list(value: str | list[str], urls: tuple[str, ...]) -> None:
    assert check_urls(urls_of(value)) == urls


def test_a_url_without_a_host_is_refused() -> None:
    with pytest.raises(UsageError, match="http:// or https://"):
        check_urls(["https:///x"])

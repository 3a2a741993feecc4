"""A stop's grace: durations as `hetflow stop --grace` and HETFLOW_STOP_GRACE read them."""

from __future__ import annotations

import pytest

from hetflow.errors import UsageError
from hetflow.execute import grace_from_env, parse_grace


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("10", 10), ("30s", 30), ("2m", 120), ("1h", 3600), ("1.5s", 2), ("500ms", 1), (" 5s ", 5)],
    ids=["zero", "bare", "seconds", "minutes", "hours", "fraction-up", "millis-up", "spaces"],
)
def test_parse_grace(text: str, seconds: int) -> None:
    assert parse_grace(text) == seconds


@pytest.mark.parametrize(
    "text", ["abc", "10x", "-5s", "", "s", "1 m 2"], ids=["word", "unit", "negative", "empty", "unit-only", "two"]
)
def test_parse_grace_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(UsageError, match=f"--grace {text!r} is not a duration"):
        parse_grace(text)


@pytest.mark.parametrize(
    ("env", "grace"),
    [({}, None), ({"HETFLOW_STOP_GRACE": ""}, None), ({"HETFLOW_STOP_GRACE": "2m"}, 120)],
    ids=["unset", "empty", "set"],
)
def test_grace_from_env(env: dict[str, str], grace: int | None) -> None:
    assert grace_from_env(env) == grace


def test_grace_from_env_names_the_variable() -> None:
    with pytest.raises(UsageError, match="HETFLOW_STOP_GRACE 'soon'"):
        grace_from_env({"HETFLOW_STOP_GRACE": "soon"})

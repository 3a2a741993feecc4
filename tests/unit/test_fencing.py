"""Only the accepted attempt writes (issue 37): the fencing token, as the executor's own accept
path (local, Ray, Kubernetes) holds it; the Slurm job script's is in test_slurm_publish."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute.data import fencing
from hetflow.execute.data.outputs import accept_outputs


def _attempt(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """Attempt ``n``'s /out with its output, and the step's folder (an accepted one's inside)."""
    staging, final = tmp_path / "attempts" / "s" / str(n) / "out", tmp_path / "steps" / "s" / "out"
    staging.mkdir(parents=True)
    (staging / "o").write_text(f"{n}\n")
    if not final.exists():
        final.mkdir(parents=True)
        (final / "o").write_text("accepted\n")
    return staging, final


@pytest.mark.parametrize(
    ("grants", "revokes", "accepted"),
    [
        ((), (), True),  # no token yet: a run begun before fencing
        ((1,), (), True),
        ((1, 2), (), False),  # attempt 2 was granted since
        ((1,), (1,), False),  # hetflow gave attempt 1 up
        ((1, 2), (1,), False),  # giving 1 up leaves 2's grant as it is
    ],
    ids=["no-token", "its-own", "a-later-grant", "given-up", "a-late-revoke"],
)
def test_accept_outputs_moves_them_only_while_the_token_names_the_attempt(
    tmp_path: Path, grants: tuple[int, ...], revokes: tuple[int, ...], accepted: bool
) -> None:
    staging, final = _attempt(tmp_path, 1)
    for n in grants:
        fencing.grant(final, n)
    for n in revokes:
        fencing.revoke(final, n)
    if accepted:
        (record,) = accept_outputs("r", "s", staging, final, ["o"], attempt=1)
        assert ((final / "o").read_text(), staging.exists(), record.path) == ("1\n", False, str(final / "o"))
        return
    with pytest.raises(fencing.Fenced) as exc:
        accept_outputs("r", "s", staging, final, ["o"], attempt=1)
    assert (final / "o").read_text() == "accepted\n" and (staging / "o").read_text() == "1\n"
    assert fencing.discarded_file(staging).read_text() == f"{exc.value}\n"
    assert exc.value.holder == (2 if 2 in grants else fencing.NOBODY)


def test_a_revoked_attempts_next_one_is_accepted(tmp_path: Path) -> None:
    first, final = _attempt(tmp_path, 1)
    fencing.grant(final, 1)
    fencing.revoke(final, 1)  # lost with its node
    second, _ = _attempt(tmp_path, 2)
    fencing.grant(final, 2)
    accept_outputs("r", "s", second, final, ["o"], attempt=2)
    with pytest.raises(fencing.Fenced, match="attempt 1 ended after attempt 2 holds the step"):
        accept_outputs("r", "s", first, final, ["o"], attempt=1)
    assert (final / "o").read_text() == "2\n"

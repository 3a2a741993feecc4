"""A Ray step task stopped by ``ray.cancel`` (a simulated SIGINT in its main thread) stops its
container to the end, however many cancels come: Ray sends one again when the reply to the first
comes late, as on a loaded machine, and a second KeyboardInterrupt inside ``podman stop`` ended
the task while its container ran on (issue 43: a step that saves on SIGTERM was reported
stopped before it had saved, and its container was left at the session's end).  A podman that
does what it is asked stands in for the node's."""

from __future__ import annotations

import _thread
import os
import threading
import time
from pathlib import Path

import pytest

from hetflow.execute.backends.ray.container import _foreground, cancels_held
from tests.contract.backend_contract import job


def _podman(tmp_path: Path) -> str:
    """``run`` waits until a ``stop`` has ended it (137, as podman stop's SIGKILL); ``stop``
    takes a second, as podman's does for a step that saves on SIGTERM."""
    binary = tmp_path / "podman"
    binary.write_text(
        "#!/bin/sh\n"
        f'd="{tmp_path}"\n'
        'if [ "$3" = run ]; then echo $$ > "$d/run.pid"\n'
        '  while [ ! -e "$d/stopped" ]; do sleep 0.05; done; exit 137; fi\n'
        'if [ "$1" = stop ]; then echo stop >> "$d/said"; sleep 1; touch "$d/stopped"; fi\n'
    )
    binary.chmod(0o755)
    return str(binary)


def _when(path: Path, then: threading.Event) -> None:
    while not path.exists():
        time.sleep(0.01)
    _thread.interrupt_main()
    then.set()


def test_a_second_cancel_during_the_stop_does_not_cut_it_short(tmp_path: Path) -> None:
    spec = job("hf-r-s-1", tmp_path / "out", "true", run_id="r").container
    first, second = threading.Event(), threading.Event()

    def cancels() -> None:
        _when(tmp_path / "run.pid", first)  # the container runs: the cancel
        _when(tmp_path / "said", second)  # its stop has begun: the same cancel again

    threading.Thread(target=cancels, daemon=True).start()
    try:
        said = _foreground(_podman(tmp_path), spec, 2, dict(os.environ))
    except KeyboardInterrupt:
        pytest.fail("a second cancel ended the task while its container was being stopped")
    assert first.is_set() and second.is_set()
    assert said == (137, "CANCELLED", "")
    assert (tmp_path / "stopped").exists()  # the stop ran to its end before the task returned


def test_cancels_held_notes_a_cancel_and_lets_the_next_one_through() -> None:
    with cancels_held() as came:
        _thread.interrupt_main()
        sum(range(10_000))  # the simulated signal is handled between bytecodes
    assert came == [True]
    with pytest.raises(KeyboardInterrupt):  # the task's own handler is back
        _thread.interrupt_main()
        sum(range(10_000))

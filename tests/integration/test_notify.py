"""``hetflow run --notify URL`` (and ``notify:`` in the settings file) against a real HTTP
server on loopback: a JSON POST for each step failure and one at the run's end, tried again
when the server fails; a dead endpoint never fails the run, it leaves a note in its events."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, free_port, write


class Hook:
    """A webhook receiver: records every POST's JSON; answers 500 to the first ``fail`` ones."""

    def __init__(self, fail: int = 0) -> None:
        self.fail, self.tries, self.received = fail, 0, []
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.tries += 1
                ok = hook.tries > hook.fail
                if ok:
                    hook.received.append(body)
                self.send_response(200 if ok else 500)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?token=abc"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook(fail=1)
    yield h
    h.close()


def _wf(tmp_path: Path, code: int) -> str:
    return write(
        tmp_path,
        f"""apiVersion: hetflow/v1
name: notified
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo bye; exit {code}"]
  b:
    image: {BUSYBOX}
    needs: [a]
    command: ["true"]
""",
    )


def test_a_failed_step_and_the_runs_end_are_posted_once_the_server_answers(
    tmp_path: Path, hf: Hetflow, hook: Hook
) -> None:
    proc = hf("run", _wf(tmp_path, 3), "--notify", hook.url, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the run failed; the first POST's 500 did not matter
    run_id = hf.last_run()
    assert hook.tries == 3  # the first answered 500 and was tried again
    step, end = hook.received
    assert {k: step[k] for k in ("event", "run_id", "workflow", "state", "step", "attempt", "exit_code")} == {
        "event": "step-failed",
        "run_id": run_id,
        "workflow": "notified",
        "state": "failed",
        "step": "a",
        "attempt": 1,
        "exit_code": 3,
    }
    assert "bye" in step["message"] and step["show"] == f"hetflow show {run_id}"
    assert (end["event"], end["state"], end["step"]) == ("run-ended", "failed", None)
    assert end["started"] <= end["ended"]


def test_a_detached_run_notifies_the_url_of_the_settings_file(tmp_path: Path, hf: Hetflow) -> None:
    h = Hook()
    try:
        (tmp_path / "config.yaml").write_text(f"notify: {h.url}\n")
        run_id = hf("run", "-d", "--config", str(tmp_path / "config.yaml"), _wf(tmp_path, 0)).stdout.strip()
        hf.wait_for(lambda: bool(h.received))
        assert [(b["event"], b["run_id"], b["state"]) for b in h.received] == [("run-ended", run_id, "succeeded")]
    finally:
        h.close()


def test_a_dead_endpoint_leaves_a_note_and_the_run_succeeds(tmp_path: Path, hf: Hetflow) -> None:
    dead = f"http://127.0.0.1:{free_port()}/hook?token=s3cret"
    proc = hf("run", _wf(tmp_path, 0), "--notify", dead, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = Store(hf.home / "state.db", read_only=True)
    notes = [e.message for e in store.events(hf.last_run()) if e.kind == "notify-failed"]
    store.close()
    assert len(notes) == 1 and "run-ended" in notes[0] and "failed after 3 tries" in notes[0], notes
    assert "s3cret" not in notes[0]  # a query may carry a credential: the note leaves it out


@pytest.mark.parametrize("url", ["ftp://host/x", "localhost:8080", "http://"], ids=["scheme", "no-scheme", "no-host"])
def test_a_bad_url_is_refused_before_the_run(tmp_path: Path, hf: Hetflow, url: str) -> None:
    proc = hf("run", _wf(tmp_path, 0), "--notify", url, check=False)
    assert proc.returncode == 2 and f"--notify {url!r}" in proc.stderr, proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []

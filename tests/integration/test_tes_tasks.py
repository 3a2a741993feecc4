"""py-tes (the GA4GH client, from PyPI) against a real ``hetflow tes serve`` in a process of its
own: tasks created, watched to their end, canceled while they run, listed; executors in
order with ignore_error; and the server killed with SIGKILL while tasks are queued and
running, then started again: no task lost, none run twice."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tes  # py-tes, the GA4GH client (the test extra)

from tests.integration.teskit import ENDED, Server, serving, until, wait_end

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path) as s:
        yield s


def test_create_watch_outputs(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    (server.data / "in.txt").write_text("from the host\n")
    task = tes.Task(
        name="two-steps",
        executors=[
            tes.Executor(image="alpine", command=["sh", "-c", "cat /data/in.txt > /work/a.txt; echo made"]),
            tes.Executor(image="alpine", command=["cat", "/work/a.txt", "/msg"], stdout="/work/out.txt"),
        ],
        inputs=[tes.Input(url=f"file://{server.data}/in.txt", path="/data/in.txt"),
                tes.Input(content="inline\n", path="/msg")],
        outputs=[tes.Output(url=f"file://{server.data}/out.txt", path="/work/out.txt")],
    )  # fmt: skip
    done = wait_end(client, client.create_task(task))
    assert done.state == "COMPLETE", done.logs
    assert [e.exit_code for e in done.logs[-1].logs] == [0, 0]
    assert done.logs[-1].logs[0].stdout == "made\n"
    assert (server.data / "out.txt").read_text() == "from the host\ninline\n"
    run = next(line for line in done.logs[-1].system_logs if line.startswith("hetflow run "))
    ps = subprocess.run([sys.executable, "-m", "hetflow.cli.main", "ps", "--all"], capture_output=True, text=True,
                        env={**os.environ, "HETFLOW_HOME": str(server.home)})  # fmt: skip
    assert run.split()[-1] in ps.stdout


def test_ignore_error(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    ids = [
        client.create_task(tes.Task(executors=[
            tes.Executor(image="alpine", command=["sh", "-c", "exit 3"], ignore_error=ignore),
            tes.Executor(image="alpine", command=["echo", "second"]),
        ]))
        for ignore in (False, True)
    ]  # fmt: skip
    stops, goes = (wait_end(client, i) for i in ids)
    assert (stops.state, [e.exit_code for e in stops.logs[-1].logs]) == ("EXECUTOR_ERROR", [3])
    assert (goes.state, [e.exit_code for e in goes.logs[-1].logs]) == ("COMPLETE", [3, 0])


def test_cancel_and_list(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    task_id = client.create_task(
        tes.Task(name="sleeper", executors=[tes.Executor(image="alpine", command=["sleep", "300"])])
    )
    until(lambda: client.get_task(task_id).state == "RUNNING", "the task runs")
    client.cancel_task(task_id)
    until(lambda: client.get_task(task_id).state == "CANCELED", "the task is canceled")
    assert [t.id for t in client.list_tasks(view="MINIMAL").tasks] == [task_id]
    # py-tes 1.x has no name_prefix: the API's own filter, asked directly
    found = httpx.get(f"{server.url}/ga4gh/tes/v1/tasks", params={"name_prefix": "slee", "state": "CANCELED"}).json()
    assert [t["id"] for t in found["tasks"]] == [task_id]
    # its own containers, not the machine's: other tests run theirs beside it
    said = [line for log in client.get_task(task_id, view="FULL").logs for line in log.system_logs or []]
    (run_id,) = [line.split()[-1] for line in said if line.startswith("hetflow run ")]
    listed = ["podman", "ps", "-q", "--filter", f"label=hetflow.run={run_id}"]
    assert not subprocess.run(listed, capture_output=True, text=True).stdout.strip()


def test_sigkill_and_restart_lose_and_repeat_nothing(server: Server) -> None:
    """50 tasks, each appending one line to its own file under a file root: after the server
    is killed mid-way and started again, every task ends COMPLETE and its output says it ran
    to its end once per attempt the server reported (a task killed mid-run runs again)."""
    client = tes.HTTPClient(server.url, timeout=30)
    ids = []
    for i in range(50):
        task = tes.Task(
            name=f"n{i}",
            executors=[tes.Executor(image="alpine", command=["sh", "-c", "sleep 0.2; echo done > /out/r.txt"])],
            outputs=[tes.Output(url=f"file://{server.data}/r{i}.txt", path="/out/r.txt")],
        )
        ids.append(client.create_task(task))
    until(lambda: sum(client.get_task(i).state == "COMPLETE" for i in ids[:10]) >= 3, "a few tasks completed")
    server.kill()
    server.start()
    client = tes.HTTPClient(server.url, timeout=30)
    until(lambda: all(client.get_task(i).state in ENDED for i in ids), "every task ends", timeout=600)
    tasks = [client.get_task(i, view="FULL") for i in ids]
    assert [t.state for t in tasks] == ["COMPLETE"] * 50
    assert all((server.data / f"r{i}.txt").read_text() == "done\n" for i in range(50))
    listed = client.list_tasks(view="MINIMAL", page_size=100)
    assert sorted(t.id for t in listed.tasks) == sorted(ids)  # none lost, none duplicated
    # a task runs again only when the server died while it ran, and then says so
    again = [t for t in tasks if len(t.logs) > 1]
    assert all("queued to run again" in " ".join(t.logs[0].system_logs) for t in again)


def test_sigterm_ends_running_tasks_containers_and_queues_them_again(server: Server) -> None:
    """A server stopped with SIGTERM while a task runs ends that task's container before it
    exits (none is left sleeping, nor a `podman run` still making one) and queues the task:
    started again, the server runs it as a new attempt, whose log says why."""
    client = tes.HTTPClient(server.url, timeout=30)
    task_id = client.create_task(
        tes.Task(name="long", executors=[tes.Executor(image="alpine", command=["sh", "-c", "sleep 2; echo ok"])])
    )
    until(lambda: client.get_task(task_id).state == "RUNNING", "the task runs")
    said = [line for log in client.get_task(task_id, view="FULL").logs for line in log.system_logs or []]
    (run_id,) = [line.split()[-1] for line in said if line.startswith("hetflow run ")]
    assert server.proc is not None
    server.proc.terminate()
    assert server.proc.wait(timeout=120) is not None
    listed = ["podman", "ps", "-a", "-q", "--filter", f"label=hetflow.run={run_id}"]
    assert not subprocess.run(listed, capture_output=True, text=True).stdout.strip()
    server.start()
    client = tes.HTTPClient(server.url, timeout=30)
    done = wait_end(client, task_id)
    assert done.state == "COMPLETE" and done.logs[-1].logs[-1].stdout == "ok\n"
    assert "the server stopped during attempt 1; queued to run again" in " ".join(done.logs[0].system_logs)

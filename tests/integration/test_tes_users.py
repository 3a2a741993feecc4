"""Two users of one ``hetflow tes serve`` with ``auth: tokens``, end to end with py-tes and
real containers: tokens made by ``hetflow tes token add``; a missing or wrong token is a 401
that says what to send; each user lists and gets only their own tasks (another's is a 404,
as is canceling it), the admin sees all; and with limits (alice runs at most 1, the server
2) bob's tasks start and finish while alice's long queue waits behind her one running task,
in the order ``hetflow tes queue --explain`` gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tes  # py-tes, the GA4GH client (the test extra)

from tests.integration.teskit import ENDED, Server, serving, until

pytestmark = pytest.mark.integration
CONFIG = """
auth: tokens
max_running: 2
users: {alice: {max_running: 1}}
"""
ALICE_TASKS = 30


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path, config=CONFIG) as s:
        yield s


def token(server: Server, user: str, *more: str) -> str:
    made = server.hetflow("tes", "token", "add", user, *more)
    assert made.returncode == 0, made.stderr
    assert f"the token of {user}: shown once" in made.stderr
    return made.stdout.strip()


def sleeper(name: str, seconds: int) -> tes.Task:
    return tes.Task(name=name, executors=[tes.Executor(image="alpine", command=["sleep", str(seconds)])])


def test_tokens_own_tasks_and_admin(server: Server) -> None:
    alice = tes.HTTPClient(server.url, timeout=30, token=token(server, "alice"))
    bob = tes.HTTPClient(server.url, timeout=30, token=token(server, "bob"))
    admin = tes.HTTPClient(server.url, timeout=30, token=token(server, "root", "--admin"))
    tasks = f"{server.url}/ga4gh/tes/v1/tasks"
    for headers in ({}, {"Authorization": "Bearer hft_not-a-token"}, {"Authorization": "Basic YTpi"}):
        answer = httpx.get(tasks, headers=headers)
        assert answer.status_code == 401, (headers, answer.text)
        assert "give a valid bearer token (Authorization: Bearer TOKEN" in answer.json()["msg"]
    assert httpx.post(tasks, json={"executors": [{"image": "alpine", "command": ["true"]}]}).status_code == 401

    mine = alice.create_task(tes.Task(name="a", executors=[tes.Executor(image="alpine", command=["echo", "a"])]))
    theirs = bob.create_task(tes.Task(name="b", executors=[tes.Executor(image="alpine", command=["echo", "b"])]))
    assert [t.id for t in alice.list_tasks().tasks] == [mine]
    assert [t.id for t in bob.list_tasks().tasks] == [theirs]
    assert sorted(t.id for t in admin.list_tasks().tasks) == sorted([mine, theirs])
    for client, other in ((alice, theirs), (bob, mine)):
        headers = {"Authorization": f"Bearer {client.token}"}
        assert httpx.get(f"{tasks}/{other}", headers=headers).status_code == 404
        assert httpx.post(f"{tasks}/{other}:cancel", headers=headers).status_code == 404
    until(lambda: admin.get_task(mine).state in ENDED and admin.get_task(theirs).state in ENDED, "both tasks end")
    assert admin.get_task(mine, view="FULL").logs[-1].logs[0].stdout == "a\n"
    assert bob.get_task(theirs, view="FULL").logs[-1].logs[0].stdout == "b\n"
    # a new token replaces the old one
    old = alice.token
    token(server, "alice")
    assert httpx.get(tasks, headers={"Authorization": f"Bearer {old}"}).status_code == 401


def test_second_user_runs_while_the_first_has_a_long_queue(server: Server) -> None:
    alice = tes.HTTPClient(server.url, timeout=30, token=token(server, "alice"))
    bob = tes.HTTPClient(server.url, timeout=30, token=token(server, "bob"))
    # alice's first task holds her one slot (max_running 1) until the test cancels it: her
    # other 29 can only wait, whatever the machine's speed
    theirs = [alice.create_task(sleeper(f"a{i}", 600)) for i in range(ALICE_TASKS)]
    until(lambda: alice.get_task(theirs[0]).state == "RUNNING", "alice's first task runs")
    explained = server.hetflow("tes", "queue", "--explain", "--config", str(server.config))
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.count("alice runs 1 of at most 1 tasks") == ALICE_TASKS - 1, explained.stdout
    bobs = [
        bob.create_task(tes.Task(name=f"b{i}", executors=[tes.Executor(image="alpine", command=["echo", f"b{i}"])]))
        for i in range(3)
    ]
    until(lambda: all(bob.get_task(t).state in ENDED for t in bobs), "bob's tasks end")
    assert [bob.get_task(t).state for t in bobs] == ["COMPLETE"] * 3
    states = [alice.get_task(t).state for t in theirs]
    assert states == ["RUNNING"] + ["QUEUED"] * (ALICE_TASKS - 1), states
    # fair share's order: each of bob's started before alice's second, in the order he sent them
    starts = [bob.get_task(t, view="FULL").logs[-1].start_time for t in bobs]
    assert starts == sorted(starts)
    for t in theirs:
        alice.cancel_task(t)
    until(lambda: all(alice.get_task(t).state == "CANCELED" for t in theirs), "alice's tasks are canceled")

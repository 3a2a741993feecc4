"""GPUs for TES tasks on the local backend, through py-tes against a real ``hetflow tes
serve`` on a machine with two fake GPUs (HETFLOW_FAKE_GPUS: real device nodes made with
mknod, an A100 and a T4): a task's ``backend_parameters`` choose its GPU from the inventory,
its container sees only that GPU's device node (and NVIDIA_VISIBLE_DEVICES as hetflow's
launch sets it), two tasks asking the one A100 never hold it at once, and a task no GPU
can serve ends SYSTEM_ERROR saying why (or is refused at create when strict)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import tes

from tests.integration.teskit import Server, serving, wait_end

pytestmark = pytest.mark.integration

SHOW = "echo visible=$NVIDIA_VISIBLE_DEVICES; ls /dev | grep nvidia || true"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path, env={"HETFLOW_FAKE_GPUS": "a100:1,t4:1"}) as s:
        yield s


def when(value: datetime | str) -> datetime:
    """A log's time as py-tes gives it (parsed, or the string as sent)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def gpu_task(command: str, **params: str) -> tes.Task:
    return tes.Task(
        executors=[tes.Executor(image="alpine", command=["sh", "-c", command])],
        resources=tes.Resources(backend_parameters=params) if params else None,
    )


def test_a_task_gets_the_gpu_it_asks_and_sees_only_it(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    t4, cc8, cpu = (
        client.create_task(gpu_task(SHOW, gpu_model="t4")),
        client.create_task(gpu_task(SHOW, gpu_compute_capability="8.0", gpu_min_memory="16Gi")),
        client.create_task(gpu_task(SHOW)),
    )
    done = {name: wait_end(client, i) for name, i in (("t4", t4), ("cc8", cc8), ("cpu", cpu))}
    for task in done.values():
        assert task.state == "COMPLETE", task.logs
    # the T4 is GPU 1 (minor 1), the A100 GPU 0: each container has its own node and nvidiactl only
    out = {name: task.logs[-1].logs[0].stdout.split() for name, task in done.items()}
    assert out["t4"] == ["visible=0", "nvidia1", "nvidiactl"]
    assert out["cc8"] == ["visible=0", "nvidia0", "nvidiactl"]
    assert out["cpu"] == ["visible=void"]
    assert any(" T4" in line for line in done["t4"].logs[-1].system_logs if line.startswith("GPUs 1 ("))
    assert any("A100" in line for line in done["cc8"].logs[-1].system_logs if line.startswith("GPUs 0 ("))


def test_two_tasks_asking_the_one_a100_never_hold_it_at_once(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    ids = [client.create_task(gpu_task("sleep 2", gpu_model="a100", gpu_count="1")) for _ in range(2)]
    a, b = (wait_end(client, i) for i in ids)
    assert a.state == b.state == "COMPLETE", (a.logs, b.logs)
    spans = sorted((when(t.logs[-1].start_time), when(t.logs[-1].end_time)) for t in (a, b))
    assert spans[0][1] <= spans[1][0], f"both held the A100 at once: {spans}"


def test_a_task_no_gpu_can_serve_ends_system_error_or_is_refused_when_strict(server: Server) -> None:
    client = tes.HTTPClient(server.url, timeout=30)
    task = wait_end(client, client.create_task(gpu_task("true", gpu_compute_capability="9.0")))
    assert task.state == "SYSTEM_ERROR"
    why = " ".join(task.logs[-1].system_logs)
    assert "no GPU here can serve this task" in why and "compute capability >= 9.0" in why, why
    assert not task.logs[-1].logs  # nothing ran
    two = wait_end(client, client.create_task(gpu_task("true", gpu_model="t4", gpu_count="2")))
    assert two.state == "SYSTEM_ERROR" and "1 of this machine's GPUs fit" in " ".join(two.logs[-1].system_logs)

    body = {
        "executors": [{"image": "alpine", "command": ["true"]}],
        "resources": {"backend_parameters": {"gpu_model": "h100"}, "backend_parameters_strict": True},
    }
    r = httpx.post(f"{server.url}/ga4gh/tes/v1/tasks", json=body, timeout=30)
    assert r.status_code == 400 and "model 'h100'" in r.text and "backend_parameters_strict" in r.text, r.text
    bad = {**body, "resources": {"backend_parameters": {"gpu_min_memory": "lots"}}}
    r = httpx.post(f"{server.url}/ga4gh/tes/v1/tasks", json=bad, timeout=30)
    assert r.status_code == 400 and "gpu_min_memory" in r.text, r.text

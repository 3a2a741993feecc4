"""GPU isolation and hardening, checked from inside real containers.

The GPUs are FAKE: device nodes made with mknod (195:N) under HETFLOW_HOME, no driver.
These tests prove which device nodes and variables a container gets, not that CUDA works."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, HOSTILE, Hetflow, step_out, write

PROBE = "ls /dev > /out/dev.txt; env > /out/env.txt; sleep {sleep}"


def _gpu_step(name: str, image: str = BUSYBOX, sleep: float = 1.5, extra: str = "") -> str:
    return f"""
  {name}:
    image: {image}
    command: [sh, -c, "{PROBE.format(sleep=sleep)}"]
    resources: {{cpus: 0.5, gpus: 1}}
    outputs: [dev.txt, env.txt]{extra}
"""


def _nvidia_nodes(out: Path) -> set[str]:
    return {d for d in (out / "dev.txt").read_text().split() if d.startswith("nvidia") and d[6:].isdigit()}


def _env(out: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (out / "env.txt").read_text().splitlines() if "=" in line)


def test_two_concurrent_gpu_steps_see_disjoint_device_nodes(hf: Hetflow, tmp_path: Path) -> None:
    wf = "apiVersion: hetflow/v1\nname: twogpu\nsteps:" + _gpu_step("one") + _gpu_step("two")
    hf("run", write(tmp_path, wf), extra_env={"HETFLOW_FAKE_GPUS": "a100:2"})
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    # they really ran at the same time
    assert steps["one"]["started"] < steps["two"]["ended"] and steps["two"]["started"] < steps["one"]["ended"]
    one, two = (_nvidia_nodes(step_out(hf, run_id, s)) for s in ("one", "two"))
    assert len(one) == 1 and len(two) == 1 and one != two
    assert one | two == {"nvidia0", "nvidia1"}
    assert {f"nvidia{steps[s]['gpus'][0]}" for s in ("one", "two")} == one | two
    for s in ("one", "two"):
        out = step_out(hf, run_id, s)
        assert "nvidiactl" in (out / "dev.txt").read_text().split()
        env = _env(out)
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["NVIDIA_VISIBLE_DEVICES"] == "0"


def test_step_without_gpu_sees_no_gpu(hf: Hetflow, tmp_path: Path) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: nogpu
steps:
  plain:
    image: {BUSYBOX}
    command: [sh, -c, "{PROBE.format(sleep=0)}"]
    outputs: [dev.txt, env.txt]
"""
    hf("run", write(tmp_path, wf), extra_env={"HETFLOW_FAKE_GPUS": "a100:2"})
    out = step_out(hf, hf.last_run(), "plain")
    assert _nvidia_nodes(out) == set()
    assert "nvidiactl" not in (out / "dev.txt").read_text().split()
    assert _env(out)["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_image_and_user_env_cannot_widen_the_gpu_set(hf: Hetflow, tmp_path: Path, hostile: str) -> None:
    extra = "\n    env: {NVIDIA_VISIBLE_DEVICES: all, CUDA_VISIBLE_DEVICES: '0,1,2,3', LD_PRELOAD: /lib/user-evil.so}"
    wf = "apiVersion: hetflow/v1\nname: hostile\nsteps:" + _gpu_step("greedy", image=HOSTILE, sleep=0, extra=extra)
    proc = hf("run", write(tmp_path, wf), extra_env={"HETFLOW_FAKE_GPUS": "t4:4"})
    assert "sets NVIDIA_VISIBLE_DEVICES, which hetflow sets itself" in proc.stderr
    out = step_out(hf, hf.last_run(), "greedy")
    assert len(_nvidia_nodes(out)) == 1
    env = _env(out)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "0"
    # the step's own LD_PRELOAD never reaches the container (the image's ENV is the image's business:
    # a preloaded library cannot open a device node the container was not given)
    assert env.get("LD_PRELOAD") != "/lib/user-evil.so"
    assert len(env["HETFLOW_GPU_UUIDS"].split(",")) == 1


def test_gpu_held_by_one_step_across_two_hetflow_processes(hf: Hetflow, tmp_path: Path) -> None:
    wf = "apiVersion: hetflow/v1\nname: NAME\nsteps:" + _gpu_step("only", sleep=2)
    files = [write(tmp_path, wf.replace("NAME", n), f"{n}.yaml") for n in ("first", "second")]
    env = {"HETFLOW_FAKE_GPUS": "a100:1"}
    results: list[int] = []

    def go(f: str) -> None:
        results.append(hf("run", f, "-q", extra_env=env, check=False).returncode)

    threads = [threading.Thread(target=go, args=(f,)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0, 0]
    intervals = []
    for run in (r["id"] for r in json.loads(hf("ps", "--all", "--json").stdout)):
        step = hf.show(run)["steps"][0]
        intervals.append((step["started"], step["ended"]))
    (_, e1), (s2, _) = sorted(intervals)
    assert e1 <= s2 + 0.05, f"the one GPU was held by two steps at once: {intervals}"


def test_runs_as_submitter_uid_gid_with_hardening(hf: Hetflow, tmp_path: Path) -> None:
    probe = (
        "id -u > /out/uid; id -g > /out/gid; grep -E 'CapEff|NoNewPrivs' /proc/self/status > /out/status; "
        "(touch /etc/x 2>/dev/null && echo yes || echo no) > /out/rootfs_writable; "
        "ls /sys/class/net > /out/net; touch /tmp/ok"
    )
    wf = f"""
apiVersion: hetflow/v1
name: whoami
steps:
  who:
    image: {BUSYBOX}
    command: [sh, -c, "{probe}"]
    outputs: [uid, gid, status, rootfs_writable, net]
"""
    hf("run", write(tmp_path, wf), extra_env={"SUDO_UID": "1234", "SUDO_GID": "2345"})
    run_id = hf.last_run()
    assert hf.show(run_id)["user"] == "1234:2345"
    out = step_out(hf, run_id, "who")
    assert (out / "uid").read_text().strip() == "1234"
    assert (out / "gid").read_text().strip() == "2345"
    status = dict(line.split(":\t") for line in (out / "status").read_text().splitlines())
    assert int(status["CapEff"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    assert (out / "rootfs_writable").read_text().strip() == "no"
    assert (out / "net").read_text().split() == ["lo"]
    assert os.stat(out / "uid").st_uid == 1234

"""Ray backend overhead: ``python -m bench.engines.ray [--steps N] [--address ADDR] [--cpus N]``.

The anchor is plain Ray tasks running the same hardened ``podman run --rm`` container;
hetflow is ``RayBackend`` submit + poll; both in one run on the same local Ray.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence

import ray
from demo.images import build_tiny_image

from hetflow.config import engine_env
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray import NAMESPACE, RayBackend, foreground_argv, ray_nodes
from hetflow.execute.engine import ContainerSpec


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.engines.ray")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--address", default=None, help="a running cluster; default: a local Ray with --cpus")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    p.add_argument("--poll", type=float, default=0.25, help="poll interval (the runner's default)")
    a = p.parse_args(argv)
    image = build_tiny_image("localhost/hetflow-test/busybox:latest")
    if a.address:
        ray.init(address=a.address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(
            num_cpus=a.cpus,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
        )
    with tempfile.TemporaryDirectory(prefix="hetflow-raybench-") as tmp:
        os.chmod(tmp, 0o777)

        def spec(name: str) -> ContainerSpec:
            return ContainerSpec(
                name=name, image=image, command=("true",), user=f"{os.getuid()}:{os.getgid()}",
                labels={"hetflow.run": name.split("-")[1]}, env={}, cpus=1, memory=64 << 20,
                log_path=f"{tmp}/{name}.log",
            )  # fmt: skip

        tag = f"{os.getpid()}{time.time_ns() % 10**6}"

        @ray.remote(num_cpus=1, max_retries=0)
        def anchor(s: ContainerSpec) -> int:
            return subprocess.run(foreground_argv(s), env=engine_env(), capture_output=True, check=False).returncode

        ray.get(anchor.remote(spec(f"hf-warm{tag}-w-1")))  # a warm worker and podman cache for both
        t0 = time.perf_counter()
        codes = ray.get([anchor.remote(spec(f"hf-a{tag}-s{i}-1")) for i in range(a.steps)])
        t_anchor = time.perf_counter() - t0
        assert set(codes) == {0}, codes

        backend, run_id = RayBackend(), f"b{tag}"
        jobs = [
            Job(f"hf-{run_id}-s{i}-1", run_id, f"s{i}", 1, spec(f"hf-{run_id}-s{i}-1"), 1, 64 << 20)
            for i in range(a.steps)
        ]
        t0 = time.perf_counter()
        for j in jobs:
            backend.submit(j)
        t_submit = time.perf_counter() - t0
        while True:
            states = backend.poll(run_id)
            if len(states) == len(jobs) and not any(st.running for st in states.values()):
                break
            time.sleep(a.poll)
        t_backend = time.perf_counter() - t0
        assert {st.exit_code for st in states.values()} == {0}, states
        backend.release([j.name for j in jobs])
    n = a.steps
    cpus = sum(n["Resources"].get("CPU", 0) for n in ray_nodes() if n.get("Alive"))
    print(f"ray {ray.__version__}, {len(ray_nodes())} node(s), {cpus:g} CPUs; "
          f"{n} steps of `true` in hardened `podman run --rm` containers")  # fmt: skip
    print(f"  anchor  (plain Ray tasks):        {t_anchor:6.2f} s  {t_anchor / n * 1000:6.1f} ms/step")
    print(f"  hetflow (RayBackend submit+poll): {t_backend:6.2f} s  {t_backend / n * 1000:6.1f} ms/step "
          f"(submit {t_submit / n * 1000:.1f} ms/step, poll every {a.poll:g} s)")  # fmt: skip
    print(f"  overhead: {(t_backend - t_anchor) / n * 1000:+.1f} ms/step ({t_backend / t_anchor:.2f}x)")


if __name__ == "__main__":
    main()

"""``python -m demo.hwmatch``: hardware-matched images end to end, on loopback.

The last part of ``make demo``.  It shows one image reference serving different
builds to different hardware, with real tools and nothing from the network:

1. build examples/hwmatch/whichbuild.c three ways (generic x86-64, x86-64-v3, and a
   "GPU" build standing for a CUDA sm_80 one) into busybox images;
2. start Debian's ``docker-registry`` on a free loopback port (storage under
   ``$HETFLOW_HOME/hwdemo``), ``podman push`` the builds, and
   ``hetflow images build-index`` them into one index, ``whichbuild:latest``;
3. ``hetflow images inspect`` the index and ``hetflow images resolve`` it for three
   machine descriptions (x86-64-v2, haswell-cpu, a100-node), then for this machine;
4. show the problem: a plain ``podman pull`` of the index gets the first build
   whatever the CPU;
5. start the proxy (``hetflow registry serve``), ``hetflow registry login`` as each
   of the three machine types (one podman auth file each), pull
   ``PROXY/hetflow-examples/whichbuild:latest`` as each and run what came: three builds;
6. ``hetflow run`` examples/hwmatch/workflow.yaml.in (the registry address filled in)
   straight from the registry: each step is pinned to this machine's build by digest,
   which ``hetflow show RUN --json`` records per attempt;
7. stop the proxy and the registry (always, also on failure or Ctrl-C).

Every hetflow step runs the real CLI in a subprocess and prints the command as a user
would type it.  Exit status 0 when every check held, 1 with a message otherwise.

Why the workflow is written from a template rather than kept with a fixed registry
port: an image reference names HOST:PORT and the format does not template images, so
a fixed port (say 127.0.0.1:5111) would make the checked-in file runnable as is, but
only while this demo's registry runs, and the demo would fail whenever that port is
taken (the test suite and other demos start registries on this machine too).  A
free port and a written-out file always work; ``--registry-port`` pins the port for
people who want to keep trying commands against a registry of their own.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from demo.hwmatch_services import DemoError, start_registry
from demo.hwmatch_steps import REPO, TEMPLATE, Demo, render_workflow
from hetflow.config import hetflow_home
from hetflow.errors import HetflowError

__all__ = ["REPO", "DemoError", "main", "render_workflow", "start_registry"]
# The steps are demo/hwmatch_steps.py (``Demo``); the servers it starts, demo/hwmatch_services.py.


def _default_examples() -> Path:
    """examples/ of the checkout this module lives in, else ./examples."""
    checkout = Path(__file__).resolve().parents[1] / "examples"
    return checkout if (checkout / TEMPLATE).is_file() else Path("examples")


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (0 picks a free one)")
    return value


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a TERM (a CI timeout, say) unwinds like Ctrl-C: cleanup runs


def _walk(demo: Demo) -> None:
    demo.build()
    registry = demo.registry()
    index = f"{registry.host}/{REPO}:latest"
    demo.resolve(index)
    demo.plain_pull(index)
    demo.proxy(registry)
    demo.workflow(registry)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.hwmatch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, default=None, help="the examples/ folder (default: this checkout's)")
    parser.add_argument("--workdir", type=Path, default=None, help="default: $HETFLOW_HOME/hwdemo")
    parser.add_argument("--registry-port", type=_port, default=0, help="loopback port of the registry (0: a free one)")
    parser.add_argument("--proxy-port", type=_port, default=0, help="loopback port of the proxy (0: a free one)")
    args = parser.parse_args(argv)
    try:
        demo = Demo(
            workdir=(args.workdir or hetflow_home() / "hwdemo").resolve(),
            examples=(args.examples or _default_examples()).resolve(),
            registry_port=args.registry_port,
            proxy_port=args.proxy_port,
        )
        demo.workdir.mkdir(parents=True, exist_ok=True)
    except (HetflowError, OSError) as exc:
        print(f"hwdemo FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    failure, code = "", 0
    try:
        _walk(demo)
    except (DemoError, HetflowError) as exc:
        failure, code = str(exc), 1
    except KeyboardInterrupt:
        failure, code = "interrupted", 130
    finally:
        demo.section("7. Stopping the proxy and the registry")
        demo.cleanup()
        signal.signal(signal.SIGTERM, previous)
    if failure:
        print(f"\nhwdemo FAILED: {failure}", file=sys.stderr, flush=True)
        return code
    print(f"hwdemo: all checks passed in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

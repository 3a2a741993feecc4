"""``hetflow-cwl-runner [--outdir DIR] [--quiet] PROCESS [JOB]``: the cwl-runner interface.

cwltool's own argument parser and ``main`` (every flag cwltest passes: --basedir,
--tmp-outdir-prefix, --tmpdir-prefix, ...; the output object as JSON on stdout; exit 0, 1, or
33 for an unsupported requirement), with hetflow's tool objects, job class and executor."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cwltool.argparser import arg_parser
from cwltool.context import LoadingContext
from cwltool.executors import MultithreadedJobExecutor
from cwltool.main import main as cwltool_main

from hetflow.config import hetflow_home
from hetflow.cwl.containers.batch import LINGER
from hetflow.cwl.requests import DEFAULT_IMAGE
from hetflow.cwl.session import HetflowContext, Session
from hetflow.cwl.tool import make_tool
from hetflow.errors import HetflowError
from hetflow.execute import Settings, load_settings, make_backend

UNLIMITED = float(2**40)
MAX_BATCHED_IN_FLIGHT = 512  # cwltool starts a thread per job in flight
# Jobs in flight at once on a cluster backend (its scheduler queues the rest): cwltool's task
# queue starts one thread per core it is given, so the bound is a thread count, not the cluster's
CLUSTER_JOBS = 64


class HetflowExecutor(MultithreadedJobExecutor):
    """cwltool's parallel executor, its capacity that of the machines hetflow runs on (not
    the submitting host's): ``cores``/``ram`` bound how many jobs are in flight at once, a
    CUDA job waits for GPUs of the inventory."""

    def __init__(self, cores: float, ram_mib: float, gpus: int) -> None:
        super().__init__()
        self.max_cores = max(1.0, cores)
        self.max_ram = int(ram_mib)
        self.max_cuda = gpus


def _parser() -> argparse.ArgumentParser:
    """cwltool's own argument parser with hetflow's flags (``--hetflow-*``)."""
    parser = arg_parser()
    parser.add_argument(
        "--hetflow-backend",
        metavar="NAME",
        default=None,
        help="hetflow's backend (else config.yaml or HETFLOW_BACKEND)",
    )
    parser.add_argument("--hetflow-no-cache", action="store_true", help="reuse no cached job result, keep none")
    parser.add_argument(
        "--hetflow-batch",
        metavar="N",
        type=int,
        default=0,
        help="run up to N small jobs one after another in one container (no GPU, no time limit)",
    )
    parser.add_argument(
        "--hetflow-batch-linger",
        metavar="SECONDS",
        type=float,
        default=LINGER,
        help=f"how long a batch waits for one more job before it is sent (default {LINGER:g})",
    )
    parser.add_argument("--hetflow-cluster", metavar="FILE", default=None, help="the cluster file to plan on")
    parser.add_argument(
        "--hetflow-config",
        metavar="FILE",
        default=None,
        help="hetflow's settings file (default $HETFLOW_HOME/config.yaml)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, *, session: Session | None = None, resume: tuple[str, Settings] | None = None
) -> int:
    """``resume``: run the recorded run of that id again, with its recorded settings
    (``control.resume``), instead of a new one."""
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.hetflow_batch_linger < 0:
        print(
            f"hetflow-cwl-runner: --hetflow-batch-linger {args.hetflow_batch_linger}: give 0 or more", file=sys.stderr
        )
        return 2
    if args.hetflow_batch < 0:
        print(f"hetflow-cwl-runner: --hetflow-batch {args.hetflow_batch}: give 0 (no batches) or more", file=sys.stderr)
        return 2
    if not args.default_container:
        args.default_container = DEFAULT_IMAGE
    args.podman = True
    args.enable_ext = True  # cwltool:CUDARequirement and the other cwltool extensions (docs/guides/cwl.md)
    # file names as the spec allows them (item #1.txt): hetflow passes arguments as argv and
    # quotes the one shell line it writes, so cwltool's strict name check guards nothing here
    args.relax_path_checks = True
    args.use_container = True  # every job runs in hetflow's container (docs/guides/cwl.md)
    workflow = Path(args.workflow) if args.workflow else Path("-")
    try:
        config = Path(args.hetflow_config) if args.hetflow_config else None
        if resume is not None:
            settings = resume[1]
        else:
            cluster = Path(args.hetflow_cluster) if args.hetflow_cluster else None
            settings = load_settings(config, hetflow_home(), os.environ, backend=args.hetflow_backend, cluster=cluster)
        session = session or Session.open(
            hetflow_home(),
            workflow,
            default_image=args.default_container,
            backend=make_backend(settings),
            cache=settings.cache and not args.hetflow_no_cache,
            settings=settings,
            argv=argv,
            resume=resume[0] if resume is not None else None,
        )
    except HetflowError as exc:  # a store that cannot be opened, no container engine: what to fix
        print(f"hetflow-cwl-runner: {exc}", file=sys.stderr)
        return 1
    session.batch, session.batch_linger = args.hetflow_batch, args.hetflow_batch_linger
    runtime = HetflowContext(vars(args))
    runtime.hetflow = session
    loading = LoadingContext(vars(args))
    loading.construct_tool_object = make_tool
    cores, ram, gpus = capacity(session)
    if session.batch > 1:  # a batch runs its jobs one after another: as many in flight as it holds
        cores, ram = max(cores, min(cores * session.batch, MAX_BATCHED_IN_FLIGHT)), ram * session.batch
    code = 1
    try:
        code = cwltool_main(
            args=args,
            executor=HetflowExecutor(cores, ram, gpus),
            loadingContext=loading,
            runtimeContext=runtime,
        )
        return code
    finally:
        if session.recorder is not None:
            session.recorder.finish(code == 0)
        session.close()


def capacity(session: Session) -> tuple[float, float, int]:
    """How many cores, MiB and GPUs the session's jobs may hold at once: this machine's for
    the local backend; a cluster's scheduler queues what does not fit, so no bound there."""
    if not session.local:
        return float(CLUSTER_JOBS), UNLIMITED, CLUSTER_JOBS
    cores = float(os.cpu_count() or 1)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**20
    # at least 1: a CUDA job on a node without one reaches hetflow's placement, which says why it cannot run
    return cores, math.floor(ram), max(1, len(session.node.gpus) if session.node is not None else 0)

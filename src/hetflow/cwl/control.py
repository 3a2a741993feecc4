"""``hetflow stop RUN`` and ``hetflow resume RUN`` for a CWL run.

A CWL run's executor is its cwl-runner, whose state (cwltool's job graph) lives only in its
threads: it cannot hand a stop over as hetflow's executor does.  So a stop ends that process
and the processes it started (a ``podman run`` or ``sbatch`` under way) with SIGKILL, after
freezing it (SIGSTOP) so that it starts nothing more meanwhile, and then stops the run's
containers the store says are running, as ``hetflow stop`` does after a crash
(``execute.stop_run``): they are recorded stopped, and so is the run.

Resume runs the runner again with the arguments and in the folder it was first given
(kept with the run: ``keep.record.Invocation``), with the run's recorded settings, as the
same run: every job that had finished comes from hetflow's cache (as a rerun's does, its
step "cached from run RUN"), every other runs again from its start as the step's next
attempt.  A job's container left running by a runner killed with ``kill -9`` is stopped
first: it is not adopted (cwltool would not know what it was waiting for)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.execute import Backend, Settings, make_backend, stop_run
from hetflow.state import RUN_RUNNING, RUN_SUCCEEDED, RunRecord, Store, pid_alive, process_start

END_WAIT = 10.0  # seconds a SIGKILLed runner has to be gone


def cwl_invocation(record: RunRecord) -> tuple[list[str], str] | None:
    """The runner's arguments and folder kept with a CWL run; None for a hetflow workflow's run."""
    try:
        spec = json.loads(record.spec_json or "{}")
    except ValueError:
        return None
    if not isinstance(spec, dict) or "cwl" not in spec:
        return None
    return [str(a) for a in spec.get("argv") or ()], str(spec.get("cwd") or "")


def _children(pid: int) -> list[int]:
    """Every process descended from ``pid``, read from /proc (parent pid: stat's field 4)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def end_runner(record: RunRecord) -> None:
    """SIGKILL the run's live cwl-runner and what it started (the same process: its start time)."""
    pid = record.pid
    if not pid or pid == os.getpid() or not pid_alive(pid):
        return
    if record.pid_start is not None and process_start(pid) != record.pid_start:
        return  # the pid was given to another process since
    os.kill(pid, signal.SIGSTOP)  # nothing more is started while its children are found and ended
    for child in [pid, *_children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + END_WAIT
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_cwl_run(
    store: Store, backend: Backend, record: RunRecord, grace: int | None, *, checkpoint: bool
) -> list[str]:
    """``hetflow stop`` of a CWL run: its runner ended, its containers stopped, all recorded."""
    if checkpoint:
        raise UsageError(
            f"run {record.id} is a CWL run: --checkpoint dumps hetflow workflows' steps only; stop it without"
        )
    end_runner(record)
    return stop_run(store, backend, record.id, grace=grace, reason="stopped by hetflow stop")


def resume_cwl_run(store: Store, record: RunRecord, *, quiet: bool, refused: Sequence[str] = ()) -> int:
    """``hetflow resume`` of a CWL run (the module's docstring); the runner's exit code.
    ``refused``: the resume flags given that a CWL run does not take."""
    if refused:
        raise UsageError(f"run {record.id} is a CWL run: resume it without {', '.join(refused)}")
    found = cwl_invocation(record)
    assert found is not None
    argv, cwd = found
    if record.state == RUN_SUCCEEDED:
        print(f"run {record.id} already succeeded; nothing to resume")
        return 0
    if not argv or not cwd:
        raise UsageError(
            f"run {record.id} was recorded by a hetflow that kept no runner arguments: "
            f"run 'hetflow run {record.workflow_file}' again (finished jobs come from the cache)"
        )
    if not Path(cwd).is_dir():
        raise UsageError(f"run {record.id} ran in {cwd}, which is gone: its outputs went there; make it again")
    backend = make_backend(Settings.from_json(record.backend_json))
    if record.state == RUN_RUNNING:
        if record.pid and pid_alive(record.pid):
            raise UsageError(f"run {record.id} is being run by process {record.pid}; 'hetflow stop {record.id}' first")
        # its runner died (kill -9): what it left running is stopped, not adopted
        stop_run(store, backend, record.id, reason="its cwl-runner died; stopped for 'hetflow resume'")
    if quiet and "--quiet" not in argv:
        argv = ["--quiet", *argv]
    from hetflow.cwl.runner import main  # cwltool: loaded only to run

    os.chdir(cwd)
    return main(argv, resume=(record.id, Settings.from_json(record.backend_json)))

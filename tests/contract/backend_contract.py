"""The contract every backend passes (after snakemake-interface-executor-plugins' shared
tests), in parts (``tests.contract.parts.PARTS``).  A backend's test module subclasses every
part and provides the fixtures: ``backend`` and ``fresh_backend``, and ``node_fault`` (a
``NodeFault``) for the node-failure part.

    base          BackendContract: every method of ``execute.backends.base.Backend``: check,
                  image_exists, image_id, submit, poll (adoption by name), cancel, release, watch
    ordering      OrderingContract: the engine holds the DAG's order (holds_dependencies)
    gang          GangContract (gang_contract.py): a gang job (``Job.ranks``): every replica
                  runs and sees its rank, one name reports them, one replica failing fails the
                  gang and stops the others
    node failure  NodeFailureContract (node_contract.py): a job or gang whose node goes away
                  ends ``node_failed`` with the reason, and the next attempt runs on a node
                  still up

A backend that truly lacks a capability says so in its class: ``LACKS`` maps a part's name
(or one test's) to the reason, and the part's tests skip saying it (``ContractPart``); a part
whose capability the backend declares (``Capabilities``) cannot be skipped.  ``BUGS`` maps a
test to a bug the backend still has: the test must fail (xfail, strict).  The unit test
tests/unit/test_contract_parts.py fails when a backend's class leaves a part out.

Jobs run tiny busybox containers; outputs go to a directory every node can see.  Every test
here is honest without containers too: the fake backend (tests/unit/test_backend_fake.py)
interprets the scripts and writes the same files.  Tests wait on events: a job that must
still run waits for a gate file the test writes (``gated``), and every wait polls a
condition with a generous limit that only a broken backend reaches.  Checks that need a real
container (GPU device nodes inside it) live in the real backends' own test classes."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from hetflow.execute.backends import registry
from hetflow.execute.backends.base import (
    DISCARDED_CODE,
    PUBLISH_FAILED_CODE,
    Backend,
    Job,
    JobState,
    MeasuresUsage,
    Publish,
)
from hetflow.execute.data import fencing
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.execute.gang.replicas import LABEL_RANK, LABEL_WORLD, layout, network_name, replica_env, replica_name
from hetflow.spec import Gang

BUSYBOX = "localhost/hetflow-test/busybox:latest"
MISSING = "localhost/hetflow-test/no-such-image:latest"
LIMIT = 300.0  # seconds: only a backend that never gets there waits this long
GATE = "until test -f /out/go; do sleep 0.1; done"  # holds a job until the test calls open_gate


def new_run_id() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


def job(
    name: str, out: Path, script: str, *, gpus: int = 0, depends_on: tuple[str, ...] = (), run_id: str = "contract"
) -> Job:
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o777)
    spec = ContainerSpec(
        name=name,
        image=BUSYBOX,
        command=("sh", "-c", script),
        user=f"{os.getuid()}:{os.getgid()}",
        labels={"hetflow.run": run_id, "hetflow.step": name, "hetflow.attempt": "1"},
        env={"HOME": "/tmp"},
        mounts=(Mount(str(out), "/out", read_only=False),),
        cpus=1,
        memory=256 << 20,
        log_path=str(out / "log"),
    )
    return Job(
        name=name,
        run_id=run_id,
        step=name,
        attempt=1,
        container=spec,
        cpus=1,
        memory=256 << 20,
        gpus=gpus,
        depends_on=depends_on,
    )


def gang_job(name: str, out: Path, scripts: Sequence[str], *, run_id: str, cluster: bool = False) -> Job:
    """A gang of ``len(scripts)`` replicas, replica ``i`` running ``scripts[i]``; they share
    ``out`` (each writes its own files there).  As the launcher makes them (``_gang_specs``):
    on this machine (``cluster`` False) each replica gets the launch contract's variables
    (HETFLOW_RANK, ...) on the gang's private network; for a cluster engine (it places the
    replicas: ``Capabilities.assigns_gpus``) they are templates on the host network and the
    backend adds each one's variables where it runs."""
    single = job(name, out, scripts[0], run_id=run_id)
    world = len(scripts)
    gang = Gang(replicas=world)
    names = [replica_name(name, i) for i in range(world)]
    places = layout(names, ["local"] * world)
    ranks = tuple(
        replace(
            single.container,
            name=names[i],
            command=("sh", "-c", script),
            env=single.container.env if cluster else {**single.container.env, **replica_env(gang, places, i)},
            labels={**single.container.labels, LABEL_RANK: str(i), LABEL_WORLD: str(world)},
            network_name="host" if cluster else network_name(name),
            log_path=str(out / f"log-r{i}"),
        )
        for i, script in enumerate(scripts)
    )
    return replace(single, container=ranks[0], ranks=ranks, gang=gang)


def gated(script: str) -> str:
    """``script`` once the test opens the gate: the job is surely running until then."""
    return f"{GATE}; {script}"


def open_gate(out: Path) -> None:
    (out / "go").write_text("")


def wait_until(
    backend: Backend, run_id: str, done: Callable[[Mapping[str, JobState]], bool], what: str
) -> dict[str, JobState]:
    """Poll until ``done(states)``; fail after ``LIMIT`` seconds saying ``what`` was awaited."""
    deadline = time.monotonic() + LIMIT
    while True:
        states = backend.poll(run_id)
        if done(states):
            return states
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {LIMIT:.0f} s; the backend reports {states}")
        time.sleep(0.1)


def wait_done(backend: Backend, run_id: str, names: list[str], timeout: float = LIMIT) -> dict[str, JobState]:
    """Every job of ``names`` has ended (``timeout``: kept for callers; the limit is ``LIMIT``)."""
    return wait_until(
        backend, run_id, lambda st: all(n in st and not st[n].running for n in names), f"jobs {names} finished"
    )


def wait_running(backend: Backend, run_id: str, name: str) -> JobState:
    """The engine has the job, queued or running (a gated job cannot have ended)."""
    return wait_until(backend, run_id, lambda st: name in st and st[name].running, f"{name} queued or running")[name]


class ContractPart:
    """One part of the contract (``PART``: its name in ``tests.contract.parts.PARTS``).  A
    backend's class may name in ``LACKS`` the parts (or single tests) it truly cannot honour,
    with the reason, and in ``BUGS`` the tests it still fails, with the bug; a part whose
    capability (``CAPABILITY``, a ``Capabilities`` field) the backend declares is not lacking."""

    PART: ClassVar[str] = ""
    CAPABILITY: ClassVar[str] = ""
    LACKS: ClassVar[Mapping[str, str]] = {}
    BUGS: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _honoured(self, request: pytest.FixtureRequest) -> None:
        test = request.function.__name__
        owner = next(c for c in type(self).__mro__ if test in vars(c))
        part = getattr(owner, "PART", "")
        reason = self.LACKS.get(test) or self.LACKS.get(part)
        if reason:
            capability = getattr(owner, "CAPABILITY", "")
            if capability:
                backend = request.getfixturevalue("backend")
                assert not getattr(backend.capabilities, capability), (
                    f"{type(self).__name__} says it lacks the {part} part, yet declares {capability}"
                )
            pytest.skip(f"{type(self).__name__} lacks the {part} part ({test}): {reason}")
        if bug := self.BUGS.get(test):
            request.applymarker(pytest.mark.xfail(strict=True, reason=bug))


class BackendContract(ContractPart):
    """Shared tests; each makes its own run id, which keeps its jobs apart."""

    PART = "base"

    def test_check_passes_and_images_are_known_by_identity(self, backend: Backend) -> None:
        backend.check()
        assert backend.image_exists(BUSYBOX)
        assert not backend.image_exists(MISSING)
        first = backend.image_id(BUSYBOX)
        assert first and first == backend.image_id(BUSYBOX), "an image's identity is stable"
        assert backend.image_id(MISSING) is None

    def test_it_says_what_its_plugin_declares(self, backend: Backend) -> None:
        """The registry reads a backend's capabilities from its plugin without loading it
        (``execute.backends.registry``): they are the backend's own.  An image's ENTRYPOINT
        is a tuple where the engine can say before the run, else None."""
        caps = backend.capabilities
        if caps.name in registry.names():
            assert registry.by_name(caps.name).capabilities == caps
        entrypoint = backend.image_entrypoint(BUSYBOX)
        assert entrypoint is None or isinstance(entrypoint, tuple)

    def test_submit_runs_and_reports_exit_code(self, backend: Backend, tmp_path: Path) -> None:
        rid = new_run_id()
        backend.submit(job(f"hf-{rid}-ok-1", tmp_path / "ok", "echo hi > /out/x", run_id=rid))
        backend.submit(job(f"hf-{rid}-bad-1", tmp_path / "bad", "exit 3", run_id=rid))
        states = wait_done(backend, rid, [f"hf-{rid}-ok-1", f"hf-{rid}-bad-1"])
        assert states[f"hf-{rid}-ok-1"].exit_code == 0
        assert states[f"hf-{rid}-bad-1"].exit_code == 3
        assert (tmp_path / "ok" / "x").read_text() == "hi\n"
        backend.release([f"hf-{rid}-ok-1", f"hf-{rid}-bad-1"])

    def test_cancel_stops_a_running_job(self, backend: Backend, tmp_path: Path) -> None:
        rid = new_run_id()
        name = f"hf-{rid}-long-1"
        backend.submit(job(name, tmp_path / "long", GATE, run_id=rid))
        wait_running(backend, rid, name)
        backend.cancel([name])
        states = wait_done(backend, rid, [name])
        assert states[name].exit_code != 0
        backend.release([name])

    def test_a_new_backend_instance_adopts_by_name(
        self, backend: Backend, fresh_backend: Backend, tmp_path: Path
    ) -> None:
        """After a crash: another instance (another hetflow process) finds the job by name."""
        rid = new_run_id()
        name, out = f"hf-{rid}-adopt-1", tmp_path / "a"
        backend.submit(job(name, out, gated("echo done > /out/x"), run_id=rid))
        assert wait_running(fresh_backend, rid, name).running
        open_gate(out)
        states = wait_done(fresh_backend, rid, [name])
        assert states[name].exit_code == 0 and (out / "x").read_text() == "done\n"
        fresh_backend.release([name])

    def test_release_forgets_finished_jobs_and_may_be_repeated(self, backend: Backend, tmp_path: Path) -> None:
        """A released job is never reported running again (podman and the fake forget it;
        Slurm keeps its record of a finished job), and releasing twice, or a name the
        engine never had, is no error."""
        rid = new_run_id()
        name = f"hf-{rid}-rel-1"
        backend.submit(job(name, tmp_path / "rel", "exit 4", run_id=rid))
        wait_done(backend, rid, [name])
        backend.release([name])
        backend.release([name, f"hf-{rid}-never-1"])
        after = backend.poll(rid).get(name)
        assert after is None or (not after.running and after.exit_code == 4), after

    def test_watch_wakes_when_a_job_ends_or_says_it_cannot(self, backend: Backend, tmp_path: Path) -> None:
        """``watch`` returns a stopper and calls ``wake`` when a job of the run ends, or
        returns None (the runner then polls, and the job is still seen to end)."""
        rid = new_run_id()
        name, out = f"hf-{rid}-watched-1", tmp_path / "w"
        woken = threading.Event()
        stop = backend.watch(rid, woken.set)
        try:
            backend.submit(job(name, out, gated("exit 0"), run_id=rid))
            wait_running(backend, rid, name)
            woken.clear()  # a start may wake it too; the end must
            open_gate(out)
            if stop is not None:
                assert woken.wait(LIMIT), f"watch never woke the runner after {name} ended"
            assert wait_done(backend, rid, [name])[name].exit_code == 0
        finally:
            if stop is not None:
                stop()
        backend.release([name])

    def test_reported_start_and_end_are_when_the_job_ran(self, backend: Backend, tmp_path: Path) -> None:
        """The start and end a backend reports (``JobState.started``/``.ended``: Slurm's
        StartTime/EndTime, a Ray task's; else what it measured, ``MeasuresUsage``: podman's
        StartedAt/FinishedAt) bracket the job's run: the start is not before its submission
        nor after its first command, the end not before its gate opened (2 s after the
        submission at the soonest: an end taken from the start or the submission fails) nor
        after it was seen done.  One second of slack: Slurm keeps whole seconds."""
        rid = new_run_id()
        name, out = f"hf-{rid}-timed-1", tmp_path / "t"
        submitted = time.time()
        backend.submit(job(name, out, "touch /out/began; " + gated("exit 0"), run_id=rid))
        began = _seen(lambda: (out / "began").exists(), f"{name} began")
        opened = _seen(lambda: time.time() >= submitted + 2, "2 s after the submission")
        open_gate(out)
        st = wait_done(backend, rid, [name])[name]
        done = time.time()
        started, ended = reported_times(backend, st)
        assert started is not None and submitted - 1 <= started <= began + 1, (submitted, started, began)
        assert ended is not None and opened - 1 <= ended <= done + 1, (opened, ended, done)
        backend.release([name])


def reported_times(backend: Backend, st: JobState) -> tuple[float | None, float | None]:
    """A finished job's start and end: the engine's (JobState), else what the backend measured."""
    if st.started is not None or not isinstance(backend, MeasuresUsage):
        return st.started, st.ended
    u = backend.usage(st.name)
    return u.started, u.ended


def _seen(happened: Callable[[], bool], what: str) -> float:
    """When ``happened()`` was first seen true (polled)."""
    deadline = time.monotonic() + LIMIT
    while not happened():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {LIMIT:.0f} s")
        time.sleep(0.05)
    return time.time()


class OrderingContract(ContractPart):
    """For backends whose engine holds the DAG's order (capabilities.holds_dependencies)."""

    PART = "ordering"
    CAPABILITY = "holds_dependencies"

    def test_dependencies_hold_when_the_engine_orders_jobs(self, backend: Backend, tmp_path: Path) -> None:
        assert backend.capabilities.holds_dependencies
        rid = new_run_id()
        first, second = f"hf-{rid}-first-1", f"hf-{rid}-second-1"
        shared = tmp_path / "shared"
        backend.submit(job(first, shared, gated("echo 1 > /out/first"), run_id=rid))
        backend.submit(
            job(second, shared, "test -f /out/first && echo ok > /out/second", run_id=rid, depends_on=(first,))
        )
        wait_running(backend, rid, first)
        assert backend.poll(rid)[second].running, "the child ran before its parent ended"
        open_gate(shared)
        states = wait_done(backend, rid, [first, second])
        assert states[second].exit_code == 0 and (shared / "second").read_text() == "ok\n"

    def test_a_dependant_never_starts_before_its_parents_outputs_are_in_place(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """issue 30: the engine starts a child as soon as its parent's job ends, and nobody
        here moves the parent's outputs (no executor, no ``accept_outputs``): the parent's
        job must put them in place itself (``Job.publish``), before it ends 0.  The child
        reads them where dependants mount them (``final``), never from the parent's /out."""
        assert backend.capabilities.holds_dependencies
        rid = new_run_id()
        parent, child = f"hf-{rid}-parent-1", f"hf-{rid}-child-1"
        staging, final = tmp_path / "attempts" / "parent" / "1" / "out", tmp_path / "steps" / "parent" / "out"
        final.parent.mkdir(parents=True)
        (final.parent / "out").mkdir()  # an earlier attempt's outputs: replaced whole
        (final / "stale").write_text("old\n")
        made = job(parent, staging, "echo 1 > /out/x && echo 2 > /out/y", run_id=rid)
        made = replace(
            made,
            container=replace(made.container, log_path=str(tmp_path / "parent.log")),
            publish=Publish(str(staging), str(final), ("x", "y")),
        )
        backend.submit(made)
        reads = "test -f /in/out/x && test -f /in/out/y && echo ok > /out/r"
        reader = job(child, tmp_path / "child", reads, run_id=rid)
        mounts = (*reader.container.mounts, Mount(str(final.parent), "/in", read_only=True))
        backend.submit(replace(reader, container=replace(reader.container, mounts=mounts), depends_on=(parent,)))
        states = wait_done(backend, rid, [parent, child])
        assert (states[parent].exit_code, states[child].exit_code) == (0, 0), states
        assert (tmp_path / "child" / "r").read_text() == "ok\n"
        assert sorted(p.name for p in final.iterdir()) == ["x", "y"] and not staging.exists()
        assert not (final.parent / "out.old").exists()
        backend.release([parent, child])

    def test_a_job_that_left_a_declared_output_out_ends_non_zero_and_its_dependant_never_runs(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """Exit 0 without every declared output would release the child onto missing
        inputs: the job ends ``PUBLISH_FAILED_CODE`` instead, and leaves /out as it was."""
        rid = new_run_id()
        parent, child = f"hf-{rid}-parent-1", f"hf-{rid}-child-1"
        staging, final = tmp_path / "attempts" / "parent" / "1" / "out", tmp_path / "steps" / "parent" / "out"
        made = job(parent, staging, "echo 1 > /out/x", run_id=rid)
        backend.submit(replace(made, publish=Publish(str(staging), str(final), ("x", "missing one"))))
        backend.submit(job(child, tmp_path / "child", "echo ran > /out/r", run_id=rid, depends_on=(parent,)))
        states = wait_done(backend, rid, [parent, child])
        assert states[parent].exit_code == PUBLISH_FAILED_CODE, states[parent]
        assert states[child].dependency_failed and not (tmp_path / "child" / "r").exists(), states[child]
        assert (staging / "x").read_text() == "1\n" and not final.exists()
        assert "did not write declared output(s) missing one under /out" in (staging / "log").read_text()
        backend.release([parent, child])

    def test_a_job_puts_its_outputs_in_place_only_while_the_fencing_token_names_its_attempt(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """issue 37: the job moves its outputs itself, so it checks the step's fencing token under
        the step's lock (``execute.data.fencing``): attempt 1 of a step hetflow has since given to
        attempt 2 ends ``DISCARDED_CODE``, its outputs left in its own folder, marked discarded,
        and the step's outputs are attempt 2's."""
        rid = new_run_id()
        name = f"hf-{rid}-late-1"
        staging, final = tmp_path / "attempts" / "late" / "1" / "out", tmp_path / "steps" / "late" / "out"
        final.mkdir(parents=True)
        (final / "x").write_text("from attempt 2\n")
        fencing.grant(final, 2)
        made = job(name, staging, "echo 1 > /out/x", run_id=rid)
        backend.submit(replace(made, publish=Publish(str(staging), str(final), ("x",))))
        states = wait_done(backend, rid, [name])
        assert states[name].exit_code == DISCARDED_CODE, states[name]
        assert (final / "x").read_text() == "from attempt 2\n" and (staging / "x").read_text() == "1\n"
        said = fencing.discarded_text(1, 2)
        assert fencing.discarded_file(staging).read_text() == said + "\n"
        assert said in (staging / "log").read_text()
        backend.release([name])

    def test_a_held_jobs_start_is_when_the_engine_started_it(self, backend: Backend, tmp_path: Path) -> None:
        """A child held behind its gated parent starts, as reported, once the parent has
        ended (the gate opened 2 s after the child's submission at the soonest): not at its
        submission.  One second of slack: Slurm keeps whole seconds."""
        rid = new_run_id()
        first, second = f"hf-{rid}-first-1", f"hf-{rid}-second-1"
        shared = tmp_path / "held"
        backend.submit(job(first, shared, gated("exit 0"), run_id=rid))
        submitted = time.time()
        backend.submit(job(second, shared, "exit 0", run_id=rid, depends_on=(first,)))
        wait_running(backend, rid, first)
        opened = _seen(lambda: time.time() >= submitted + 2, "2 s after the submission")
        open_gate(shared)
        states = wait_done(backend, rid, [first, second])
        started, _ = reported_times(backend, states[second])
        assert started is not None and started >= opened - 1, (
            f"{second} reported started at {started}, before its parent ended (gate opened at {opened}; "
            f"submitted at {submitted})"
        )
        backend.release([first, second])

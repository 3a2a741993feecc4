"""A backend in memory, for unit tests: no containers, no engine, no cluster.

Each job's command must be ``sh -c SCRIPT``, and the script is interpreted, not run: the
few shell commands the contract suite and unit tests use (``echo``/``touch`` into mounted
directories, ``test -f``, ``sleep``, ``exit N``, ``true``, ``false``, ``:``), joined by
``;``, ``&&`` and ``||``, and one loop: ``until COMMAND; do COMMAND; done`` (a test's gate:
``until test -f /out/go; do sleep 0.1; done`` waits for a file the test writes).  Files
are written into the real host directories the job mounts (read-only mounts refuse), so
tests check outputs as they would for a real backend.  What it cannot interpret ends the
job with 127 and says so, as a shell would.

Jobs advance on a clock: a job ends when its sleeps have passed (``FakeState.clock``; a
test may pass a faster or a manual one).  With ``holds_dependencies`` the fake orders jobs
as Slurm does: a job starts when its parents have succeeded, and is dropped
(``dependency_failed``) when one did not; a job given ``Job.publish`` moves its outputs into
place the moment it ends 0, before any dependant can start, as the Slurm job script does
(or ends ``PUBLISH_FAILED_CODE`` when a declared output is missing).  Adoption: every FakeBackend built on one
``FakeState`` sees the same jobs, as two hetflow processes see one engine.

A gang job (``Job.ranks``) runs every replica's script and is reported as the job's one name
by ``execute.gang.replicas.gang_state``; one replica failing stops the others (exit 143), as podman's
backend does.  ``FakeState.fail_node`` ends every job that runs with ``node_failed``, as
Slurm's NODE_FAIL or a lost Ray node does.  ``watch`` (with ``watches``) wakes the runner
from a thread that advances the run's jobs when one of them ends.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.base import PUBLISH_FAILED_CODE, Capabilities, Job, JobState
from hetflow.execute.data.outputs import missing_message, missing_outputs, move_into_place
from hetflow.execute.gang.replicas import gang_state

CANCELLED_CODE = 143  # 128 + SIGTERM, as `podman stop` and scancel report a stopped job
NOT_FOUND_CODE = 127  # a shell's "command not found"
_OPERATORS = (";", "&&", "||")
WATCH_TICK = 0.02  # seconds between a watcher's looks at the clock
NODE = "fake"  # the one node every job runs on


@dataclass
class _Attempt:
    """One job as the fake engine keeps it; ``at`` is the clock time the next command runs."""

    job: Job
    program: list[tuple[str, list[str]]]  # (the operator before it, argv with redirections)
    at: float | None  # None while waiting for parents
    pc: int = 0
    last: int = 0  # the last command's exit status
    code: int | None = None  # set when it ended
    status: str = "created"
    reason: str = ""
    dependency_failed: bool = False
    node_failed: bool = False
    replicas: list[_Attempt] = field(default_factory=list)  # a gang's ranks 1..n-1
    published: bool = False  # ``Job.publish`` was carried out (once, when the job ended 0)
    # when it started running and ended, by the wall clock (JobState.started, .ended: the
    # engine's own record, as Slurm's StartTime and EndTime are; the fake's clock may be fast)
    began: float | None = None
    finished: float | None = None

    @property
    def ended(self) -> bool:
        return self.code is not None or self.dependency_failed or self.node_failed


@dataclass
class FakeState:
    """The fake engine's memory, shared by every FakeBackend built on it (adoption)."""

    clock: Callable[[], float] = time.monotonic
    images: frozenset[str] | None = None  # None: every image exists
    jobs: dict[str, _Attempt] = field(default_factory=dict)
    # exit codes of released jobs, so that a child submitted later still sees its parents'
    released: dict[str, int | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_node(self) -> list[str]:
        """The node goes down: every job that has started and not ended ends ``node_failed``
        with no exit code of its own; the names of those jobs."""
        with self.lock:
            hit = [a for a in self.jobs.values() if a.at is not None and not a.ended]
            for a in hit:
                for r in [a, *a.replicas]:
                    r.node_failed, r.status, r.reason = True, "NODE_FAIL", f"node {NODE} failed"
            return [a.job.name for a in hit]


class FakeBackend:
    def __init__(
        self,
        state: FakeState | None = None,
        *,
        holds_dependencies: bool = False,
        multi_node: bool = False,
        watches: bool = False,
    ) -> None:
        self.state = state or FakeState()
        self.watches = watches  # False: watch says it cannot, and the runner polls (a manual clock)
        self.capabilities = Capabilities(name="fake", holds_dependencies=holds_dependencies, multi_node=multi_node)

    def check(self) -> None:
        pass

    def image_exists(self, image: str) -> bool:
        return self.state.images is None or image in self.state.images

    def image_id(self, image: str) -> str | None:
        return f"fake:{image}" if self.image_exists(image) else None

    def submit(self, job: Job) -> None:
        command = job.container.command
        if len(command) != 3 or command[:2] != ("sh", "-c"):
            raise EngineError(f"the fake backend runs only `sh -c SCRIPT`, not {shlex.join(command)}")
        with self.state.lock:
            old = self.state.jobs.get(job.name)
            if old is not None and not self._advance(old):
                raise EngineError(f"a job named {job.name} is already running")
            parents = job.depends_on if self.capabilities.holds_dependencies else ()
            unknown = [p for p in parents if p not in self.state.jobs and p not in self.state.released]
            if unknown:
                raise EngineError(f"{job.name} depends on {', '.join(unknown)}, which the fake backend does not know")
            self.state.released.pop(job.name, None)
            start = None if parents else self.state.clock()
            attempt = _Attempt(job, _parse(command[2]), start)
            for spec in job.ranks[1:]:
                if len(spec.command) != 3 or spec.command[:2] != ("sh", "-c"):
                    raise EngineError(f"the fake backend runs only `sh -c SCRIPT`, not {shlex.join(spec.command)}")
                attempt.replicas.append(
                    _Attempt(replace(job, name=spec.name, container=spec), _parse(spec.command[2]), start)
                )
            self.state.jobs[job.name] = attempt
            self._advance(attempt)

    def poll(self, run_id: str) -> dict[str, JobState]:
        with self.state.lock:
            mine = [a for a in self.state.jobs.values() if a.job.run_id == run_id]
            for a in mine:
                self._advance(a)
            return {a.job.name: _job_state(a) for a in mine}

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        with self.state.lock:
            found = [a for a in (self.state.jobs.get(n) for n in names) if a is not None]
            # all at once: a child cancelled with its parent is cancelled, not dropped for the parent
            for a in [a for a in found if not self._advance(a)]:
                for r in [a, *a.replicas]:
                    if not r.ended:
                        r.code, r.status, r.reason = CANCELLED_CODE, "exited", "cancelled"

    def release(self, names: Iterable[str]) -> None:
        with self.state.lock:
            for name in names:
                a = self.state.jobs.pop(name, None)
                if a is not None:
                    self.state.released[name] = a.code

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """A thread that advances the run's jobs on the clock and calls ``wake`` when one
        ends (podman's watcher follows its events); the stopper ends it.  None unless made
        with ``watches``: a test that moves a manual clock wants no thread beside it."""
        if not self.watches:
            return None
        stop = threading.Event()

        def loop() -> None:
            seen: set[str] = set()
            while not stop.wait(WATCH_TICK):
                with self.state.lock:
                    ended = {
                        a.job.name for a in self.state.jobs.values() if a.job.run_id == run_id and self._advance(a)
                    }
                if ended - seen:
                    wake()
                seen = ended

        threading.Thread(target=loop, name=f"fake-watch-{run_id}", daemon=True).start()
        return stop.set

    # --- the engine -------------------------------------------------------------------

    def _parent_codes(self, a: _Attempt) -> dict[str, int | None]:
        """Each parent's exit code; a missing key: still running."""
        out: dict[str, int | None] = {}
        for p in a.job.depends_on:
            parent = self.state.jobs.get(p)
            if parent is None:
                out[p] = self.state.released.get(p)
            elif parent.ended:
                out[p] = None if parent.dependency_failed else parent.code
        return out

    def _advance(self, a: _Attempt) -> bool:
        """Run the job's commands (every replica's, for a gang) up to the clock's now, then
        publish its outputs if it ended 0 (``_publish``); True when it has ended."""
        ended = self._advance_all(a)
        if ended and not a.published and a.job.publish is not None:
            a.published = True
            if all(r.code == 0 for r in [a, *a.replicas]):
                _publish(a)
        return ended

    def _advance_all(self, a: _Attempt) -> bool:
        """Every replica's commands up to now; True when the job has ended.  A gang's replica
        that fails stops the others."""
        if not a.replicas:
            return self._advance_one(a)
        for r in a.replicas:
            r.at = a.at if r.at is None else r.at
        ended = [self._advance_one(r) for r in [a, *a.replicas]]
        if not all(ended) and any(r.code not in (0, None) for r in [a, *a.replicas]):
            for r in [a, *a.replicas]:
                if not r.ended:
                    r.code, r.status, r.reason = CANCELLED_CODE, "exited", "stopped: another replica failed"
            return True
        return all(ended)

    def _advance_one(self, a: _Attempt) -> bool:
        """Run one container's commands up to the clock's now; True when it has ended."""
        now = self.state.clock()
        if a.at is None and not a.ended:
            codes = self._parent_codes(a)
            failed = [p for p, c in codes.items() if c != 0]
            if failed:
                a.dependency_failed, a.status = True, "cancelled"
                a.reason = f"{', '.join(failed)} did not succeed; the job was dropped without running"
                return True
            if len(codes) < len(a.job.depends_on):
                waiting = [p for p in a.job.depends_on if p not in codes]
                a.status, a.reason = "pending", f"waiting for {', '.join(waiting)}"
                return False
            a.at, a.reason = now, ""
        while not a.ended and a.at is not None and a.at <= now:
            a.status = "running"
            a.began = a.began or time.time()
            if a.pc == len(a.program):
                a.code, a.status = a.last, "exited"
                break
            op, argv = a.program[a.pc]
            a.pc += 1
            if (op == "&&" and a.last != 0) or (op == "||" and a.last == 0):
                continue
            if argv[0] == _UNTIL:  # until COND; do BODY; done: repeat BODY until COND succeeds
                cond, body = argv[1 : argv.index(_DO)], argv[argv.index(_DO) + 1 :]
                if _run(a, cond) != 0:
                    _run(a, body)
                    a.pc -= 1
                a.last = 0
                continue
            a.last = _run(a, argv)
        if a.ended and a.began is not None and a.finished is None:
            a.finished = time.time()
        return a.ended


_UNTIL, _DO = "\0until", "\0do"  # a parsed loop: [_UNTIL, *COND, _DO, *BODY] (no word holds NUL)


def _parse(script: str) -> list[tuple[str, list[str]]]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|>")
    lexer.whitespace_split = True
    program: list[tuple[str, list[str]]] = []
    op, argv = ";", list[str]()
    for token in lexer:
        if token in _OPERATORS:
            program.append((op, argv))
            op, argv = token, []
        else:
            argv.append(token)
    program.append((op, argv))
    return _loops([(o, a) for o, a in program if a])


def _loops(program: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """``until C; do B; done`` (three entries) as one entry ``[_UNTIL, *C, _DO, *B]``; a
    malformed loop stays as it is and fails as a command the fake does not know."""
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(program):
        op, argv = program[i]
        nxt = program[i + 1 : i + 3]
        if argv[0] == "until" and len(nxt) == 2 and nxt[0][1][0] == "do" and nxt[1][1] == ["done"]:
            out.append((op, [_UNTIL, *argv[1:], _DO, *nxt[0][1][1:]]))
            i += 3
            continue
        out.append((op, argv))
        i += 1
    return out


def _run(a: _Attempt, argv: list[str]) -> int:
    """One simple command; its exit status.  ``exit`` and ``sleep`` act on the attempt."""
    words, target, append = _redirect(argv)
    if words is None:
        return _fail(a, f"cannot interpret {shlex.join(argv)!r}")
    cmd, args = words[0], words[1:]
    if cmd in ("true", ":"):
        return 0
    if cmd == "false":
        return 1
    if cmd == "exit":
        code = (int(args[0]) if args else a.last) % 256
        a.code, a.status = code, "exited"
        return code
    if cmd == "sleep" and len(args) == 1:
        assert a.at is not None
        a.at += float(args[0])
        return 0
    if cmd == "echo":
        newline = not (args and args[0] == "-n")
        text = " ".join(args if newline else args[1:]) + ("\n" if newline else "")
        return _write(a, target, text, append) if target else _log(a, "stdout", text)
    if cmd == "touch" and args and not target:
        return max(_write(a, path, "", True) for path in args)
    if cmd in ("test", "[") and len(args) in (2, 3) and args[0] in ("-f", "-d", "-e"):
        if cmd == "[" and args[-1] != "]":
            return _fail(a, "[: missing ]", 2)
        host = _host_path(a.job, args[1])
        checks = {"-f": Path.is_file, "-d": Path.is_dir, "-e": Path.exists}
        return 0 if host is not None and checks[args[0]](host[0]) else 1
    return _fail(a, f"{cmd}: not found (the fake backend interprets only a few commands)")


def _redirect(argv: list[str]) -> tuple[list[str] | None, str | None, bool]:
    """(the words, the file of ``>``/``>>``, append); None words when malformed."""
    for i, word in enumerate(argv):
        if word in (">", ">>"):
            if i == 0 or i + 2 != len(argv):
                return None, None, False
            return argv[:i], argv[i + 1], word == ">>"
    if any(w and set(w) <= set(";&|>") for w in argv):
        return None, None, False
    return argv, None, False


def _host_path(job: Job, path: str) -> tuple[Path, bool] | None:
    """The host path behind a container path, and whether it is writable; None: not mounted."""
    for m in sorted(job.container.mounts, key=lambda m: len(m.target), reverse=True):
        target = m.target.rstrip("/")
        if path == target or path.startswith(target + "/"):
            return Path(m.source) / path[len(target) :].lstrip("/"), not m.read_only
    return None


def _write(a: _Attempt, path: str, text: str, append: bool) -> int:
    host = _host_path(a.job, path)
    if host is None or not host[1]:
        return _fail(a, f"can't create {path}: {'Read-only file system' if host else 'not a mounted directory'}", 1)
    try:
        with host[0].open("a" if append else "w") as f:
            f.write(text)
    except OSError as exc:
        return _fail(a, f"can't create {path}: {exc.strerror}", 1)
    return 0


def _log(a: _Attempt, stream: str, text: str) -> int:
    """A CRI record in the job's log, as podman's k8s-file driver writes it."""
    if a.job.container.log_path:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000+00:00", time.gmtime())
        with open(a.job.container.log_path, "a") as f:
            f.writelines(f"{stamp} {stream} F {line}\n" for line in text.rstrip("\n").split("\n"))
    return 0


def _publish(a: _Attempt) -> None:
    """What the Slurm job script does after its container ends 0 (``base.Publish``), under the
    engine's lock, so no dependant starts before it: every declared output under staging, then
    staging renamed to final; else the job ends ``PUBLISH_FAILED_CODE`` and staging stays."""
    assert a.job.publish is not None
    staging, final = Path(a.job.publish.staging), Path(a.job.publish.final)
    missing = missing_outputs(staging, a.job.publish.declared)
    if missing:
        _log(a, "stderr", f"hetflow: {missing_message(missing)}")
        a.code, a.reason = PUBLISH_FAILED_CODE, missing_message(missing)
        return
    try:
        move_into_place(staging, final)
    except OSError as exc:
        _log(a, "stderr", f"hetflow: could not move /out into place ({final}): {exc.strerror or exc}")
        a.code, a.reason = PUBLISH_FAILED_CODE, f"could not move /out into place: {exc.strerror or exc}"


def _fail(a: _Attempt, message: str, code: int = NOT_FOUND_CODE) -> int:
    _log(a, "stderr", f"sh: {message}")
    a.reason = message
    return code


def _job_state(a: _Attempt) -> JobState:
    node = None if a.at is None else NODE
    if a.replicas and not a.node_failed:
        ranks = [a, *a.replicas]
        g = gang_state({i: (not r.ended, r.code, r.status) for i, r in enumerate(ranks)}, len(ranks))
        reason = f"replica {g.failed_rank} failed ({g.status})" if g.failed_rank is not None else ""
        return JobState(a.job.name, g.running, g.exit_code, g.status, node=node, reason=reason)
    reason = a.reason if (a.ended and (a.code or a.dependency_failed or a.node_failed)) or a.status == "pending" else ""
    return JobState(
        a.job.name,
        not a.ended,
        a.code,
        a.status,
        node=node,
        reason=reason,
        dependency_failed=a.dependency_failed,
        node_failed=a.node_failed,
        started=a.began,
        ended=a.finished,
    )

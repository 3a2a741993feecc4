"""The fake backend's jobs and the few shell commands it interprets (``backends.fake``).

A job's command must be ``sh -c SCRIPT``; the script is interpreted, not run: ``echo``/``touch``
into mounted directories, ``test -f``/``-d``/``-e`` (and ``[ ... ]``), ``sleep``, ``exit N``,
``true``, ``false``, ``:``, joined by ``;``, ``&&`` and ``||``, and one loop: ``until COMMAND;
do COMMAND; done``.  A word ``$NAME`` (or ``${NAME}``, in any quotes) is the job's environment
variable NAME (``HETFLOW_ATTEMPT``, say), empty when it has none.  Files are written into the
real host directories the job mounts (read-only mounts refuse).  What it cannot interpret ends
the job with 127 and says so, as a shell would.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.execute.backends.base import Job

__all__ = ["NOT_FOUND_CODE", "FakeJob", "fail", "log", "parse", "step"]

NOT_FOUND_CODE = 127  # a shell's "command not found"
_OPERATORS = (";", "&&", "||")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass
class FakeJob:
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
    # its node lost touch with the engine (``FakeState.lose_node``): reported node_failed, it runs
    # on all the same; a cancel reaches it only once the node is back (``cancelled_later``)
    unreachable: bool = False
    cancelled_later: bool = False
    replicas: list[FakeJob] = field(default_factory=list)  # a gang's ranks 1..n-1
    published: bool = False  # ``Job.publish`` was carried out (once, when the job ended 0)
    # when it started running and ended, by the wall clock (JobState.started, .ended: the
    # engine's own record, as Slurm's StartTime and EndTime are; the fake's clock may be fast)
    began: float | None = None
    finished: float | None = None

    @property
    def ended(self) -> bool:
        return self.code is not None or self.dependency_failed or self.node_failed


_UNTIL, _DO = "\0until", "\0do"  # a parsed loop: [_UNTIL, *COND, _DO, *BODY] (no word holds NUL)


def parse(script: str) -> list[tuple[str, list[str]]]:
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


def step(a: FakeJob) -> None:
    """Run the job's next command; a loop (``until C; do B; done``) runs one turn: ``C``, and
    ``B`` when ``C`` failed, staying on the loop until ``C`` succeeds."""
    op, argv = a.program[a.pc]
    a.pc += 1
    if (op == "&&" and a.last != 0) or (op == "||" and a.last == 0):
        return
    if argv[0] == _UNTIL:
        cond, body = argv[1 : argv.index(_DO)], argv[argv.index(_DO) + 1 :]
        if _run(a, cond) != 0:
            _run(a, body)
            a.pc -= 1
        a.last = 0
        return
    a.last = _run(a, argv)


def _run(a: FakeJob, argv: list[str]) -> int:
    """One simple command; its exit status.  ``exit`` and ``sleep`` act on the attempt."""
    env = a.job.container.env
    words, target, append = _redirect([_VARIABLE.sub(lambda m: env.get(m[1] or m[2], ""), w) for w in argv])
    if words is None:
        return fail(a, f"cannot interpret {shlex.join(argv)!r}")
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
        return _write(a, target, text, append) if target else log(a, "stdout", text)
    if cmd == "touch" and args and not target:
        return max(_write(a, path, "", True) for path in args)
    if cmd in ("test", "[") and len(args) in (2, 3) and args[0] in ("-f", "-d", "-e"):
        if cmd == "[" and args[-1] != "]":
            return fail(a, "[: missing ]", 2)
        host = _host_path(a.job, args[1])
        checks = {"-f": Path.is_file, "-d": Path.is_dir, "-e": Path.exists}
        return 0 if host is not None and checks[args[0]](host[0]) else 1
    return fail(a, f"{cmd}: not found (the fake backend interprets only a few commands)")


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


def _write(a: FakeJob, path: str, text: str, append: bool) -> int:
    host = _host_path(a.job, path)
    if host is None or not host[1]:
        return fail(a, f"can't create {path}: {'Read-only file system' if host else 'not a mounted directory'}", 1)
    try:
        with host[0].open("a" if append else "w") as f:
            f.write(text)
    except OSError as exc:
        return fail(a, f"can't create {path}: {exc.strerror}", 1)
    return 0


def log(a: FakeJob, stream: str, text: str) -> int:
    """A CRI record in the job's log, as podman's k8s-file driver writes it."""
    if a.job.container.log_path:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000+00:00", time.gmtime())
        with open(a.job.container.log_path, "a") as f:
            f.writelines(f"{stamp} {stream} F {line}\n" for line in text.rstrip("\n").split("\n"))
    return 0


def fail(a: FakeJob, message: str, code: int = NOT_FOUND_CODE) -> int:
    log(a, "stderr", f"sh: {message}")
    a.reason = message
    return code

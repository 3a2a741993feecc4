"""A fork server for the harness's ``hetflow`` commands (issue 43): ``python -m hetflow.cli.main``
pays Python's start-up and hetflow's imports (0.15-0.3 s of CPU) on each of the thousands of
commands the integration tests run.  One server per pytest process imports what a command
imports once (``PRELOAD``), then forks a child per command: the child takes the command's
argv, environment (``os.environ`` replaced wholesale), working folder, umask and standard
streams (the caller's own pipes, passed over a Unix socket), and runs the module as ``python
-m`` does, then ends as Python ends (threads joined, atexit, streams flushed, the exit code of
``SystemExit``).  Each command is still its own process: its own pid, signals, exit status;
``--detach`` still forks from it.

What the imports read of the environment is read once, by the server: commands that differ in
it (``IMPORT_KEYS``, ``PYTHON*``) go to servers of their own (``forkcall.Servers``), and
``python -m tests.integration.forkserver --audit`` lists what the preload reads (test_forkserver
checks that ``IMPORT_KEYS`` holds it all).  Nothing of hetflow's is cached by the preload, and
no thread is started.  ``HFTEST_FORKSERVER=0`` runs every command as a real subprocess.

Protocol, one connection per command: the caller sends a JSON request (argv, env, cwd, umask)
with three descriptors (stdin, and the write ends of its stdout and stderr pipes); the server
answers ``pid N`` once forked, then ``exit STATUS`` (``os.waitpid``'s status) once the child
has ended.  The server is one thread (a ``selectors`` loop over the socket and each child's
pidfd), so a child never inherits a lock another thread held."""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

MODULE = "hetflow.cli.main"
# What `python -m hetflow.cli.main CMD` imports before it runs CMD: main's imports, then the
# typer app and every command module, as `hetflow --help` does (``register_commands`` imports and
# registers; the child registers its own, on its own copy of the app).  Not the module itself:
# `python -m` runs it as ``__main__``, where no ``hetflow.cli.main`` has been imported.
PRELOAD = (
    "hetflow.cli.commands",
    "hetflow.config",
    "hetflow.errors",
    "hetflow.lazy",
    "hetflow.probecache",
    "hetflow.cli.common",
    "hetflow.cli.shell",
    "hetflow.cli.app",
)
# Then what `run` and `resume` import to load, plan and run a workflow on this machine (the tops of
# what `-X importtime` shows them import past the above: 0.3-0.6 s of each); the cluster backends
# stay each command's own.  test_forkserver checks that each still imports.
DEEP = (
    "yaml",
    "httpx",
    "statistics",
    "rich.table",
    "hetflow.spec.models",
    "hetflow.spec.validate.checks",
    "hetflow.spec.load.templates",
    "hetflow.spec.load.overrides",
    "hetflow.spec.expansion.fanout",
    "hetflow.plan.search.sharewhy",
    "hetflow.plan.instance",
    "hetflow.plan.gpuspec",
    "hetflow.execute.submit.prepare",
    "hetflow.execute.submit.pin",
    "hetflow.execute.submit.record",
    "hetflow.execute.submit.rehash",
    "hetflow.execute.submit.amend",
    "hetflow.execute.run.compose",
    "hetflow.execute.run.attempts",
    "hetflow.execute.backends.base",
    "hetflow.execute.backends.local.engines",
    "hetflow.execute.backends.local.criupodman",
    "hetflow.execute.data.cache",
    "hetflow.execute.data.fanout",
    "hetflow.execute.data.publishing.journal",
    "hetflow.execute.gang.elastic",
    "hetflow.execute.gang.replicas",
    "hetflow.report.tables",
    "hetflow.report.runs",
)
# Environment variables read while the preload is imported (``--audit`` lists them): a command
# whose value differs from the server's would see the server's, so it runs as a real subprocess.
IMPORT_KEYS = frozenset(
    {
        "ARCHSPEC_CPU_DIR",  # archspec's CPU table (hetflow.inventory)
        "ARCHSPEC_EXTENSION_CPU_DIR",
        "HOME",  # sysconfig's user base, as site reads it at start-up; the probe cache's folder
        "XDG_CACHE_HOME",  # the probe cache's folder: pydantic's plugins, asked as pydantic is imported
        "HETFLOW_PROBE_CACHE",
        "PYDANTIC_DISABLE_PLUGINS",  # read as the spec's models are built
        "TYPER_USE_RICH",
        "_PYTHON_PROJECT_BASE",
        "_PYTHON_SYSCONFIGDATA_NAME",
        # Not read by the preload now, but by what Python or rich decide once per process.
        "COLUMNS",
        "FORCE_COLOR",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "LINES",
        "NO_COLOR",
        "TERM",
    }
)
READY = b"ready\n"


def import_keys(env: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    """What of ``env`` the server's imports depend on: a server serves commands that agree on it."""
    names = sorted({*IMPORT_KEYS, *(k for k in env if k.startswith("PYTHON"))})
    return tuple((k, env.get(k)) for k in names)


def preload() -> None:
    """Import what a command imports before it runs, in ``hetflow.cli.main.main``'s order."""
    from hetflow.lazy import no_cyclic_gc

    with no_cyclic_gc():
        for name in PRELOAD[:-1]:
            importlib.import_module(name)
    from hetflow.cli.commands import COMMANDS
    from hetflow.probecache import PydanticPluginTable

    PydanticPluginTable.install()
    with no_cyclic_gc():
        importlib.import_module(PRELOAD[-1])
        for module in COMMANDS:
            importlib.import_module(f"hetflow.cli.{module}")
        for name in DEEP:
            with contextlib.suppress(ModuleNotFoundError):  # renamed since: test_forkserver says so
                importlib.import_module(name)
    if MODULE in sys.modules:
        raise RuntimeError(f"the preload imported {MODULE}, which `python -m` runs as __main__ only")


# ---------------------------------------------------------------------------- the server


class Server:
    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(0, selectors.EVENT_READ)  # the caller's lifeline: ends at its EOF
        self.listening = True
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, its caller's connection)

    def held(self) -> list[int]:
        """Every descriptor the server holds now (a child closes them all)."""
        return [
            self.listener.fileno(),
            self.selector.fileno(),
            *self.children,
            *(c.fileno() for _, c in self.children.values()),
        ]

    def serve(self) -> None:
        """Until the lifeline's EOF, then until the commands running then have ended."""
        while self.children or self.listening:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    self.start(conn)
                elif key.fd == 0:
                    if not os.read(0, 1 << 10):
                        self.stop_listening()
                else:
                    self.ended(int(key.fd))

    def stop_listening(self) -> None:
        """No new command: the socket closed and removed (a caller connecting now is refused)."""
        self.selector.unregister(0)
        self.selector.unregister(self.listener)
        path = self.listener.getsockname()
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        self.listening = False

    def start(self, conn: socket.socket) -> None:
        try:
            request, fds = receive(conn)
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"error {exc}\n".encode())
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (*self.held(), conn.fileno()):
                    os.close(fd)
                child(request, fds)
            finally:
                os._exit(70)  # child() never returns
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ)
        conn.sendall(f"pid {pid}\n".encode())

    def ended(self, pidfd: int) -> None:
        pid, conn = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # the caller may have gone (a test interrupted)
            conn.sendall(f"exit {status}\n".encode())
        conn.close()


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The request's JSON (up to its newline) and the three descriptors sent with its first part."""
    data, fds = b"", list[int]()
    while not data.endswith(b"\n"):
        chunk, got, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        if not chunk:
            raise ValueError("the caller hung up before its request")
        data, fds = data + chunk, fds + got
    if len(fds) != 3:
        raise ValueError(f"{len(fds)} descriptors, not 3")
    request: dict[str, Any] = json.loads(data)
    return request, fds


# ---------------------------------------------------------------------------- the child


def child(request: Mapping[str, Any], fds: list[int]) -> None:
    """Become the command ``python -m hetflow.cli.main ARGV`` would be, run it, and end."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working folder first
    tempfile.tempdir = None  # TMPDIR is read at first use, as in a new process
    # Signal handlers and mask are the server's: Python's own, as a new process has them (the
    # preload sets none: the audit says so).
    _new_stdio()
    sys.orig_argv = [sys.executable, "-m", MODULE, *request["argv"]]
    sys.argv = [MODULE, *request["argv"]]  # run_module puts the module's file first
    os._exit(_run())


def _new_stdio() -> None:
    """sys.stdin, stdout and stderr over the new 0, 1 and 2, made as Python makes them."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        buffered = old.write_through is False or fd == 0
        buffer: Any = (io.BufferedReader if fd == 0 else io.BufferedWriter)(raw) if buffered else raw
        new = io.TextIOWrapper(
            buffer,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=buffered and (fd == 2 or raw.isatty()),
            write_through=not buffered,
        )
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


def _run() -> int:
    """Run the module as ``__main__``; the exit status Python would end with."""
    code = 0
    try:
        runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python ends on an uncaught ^C
    except BaseException:
        traceback.print_exc()
        code = 1
    return _finish() or code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _finish() -> int:
    """What Python does at its end: wait for the threads, run atexit, close what finalization
    would close, flush (120 if that fails)."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    _close_sqlite()
    failed = 0
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            failed = 120
    return failed


def _close_sqlite() -> None:
    """Close the SQLite connections still open, as a real process's finalization does when it
    frees them: the last connection's close checkpoints the store's WAL into state.db and
    removes the WAL, which a test that damages state.db's pages relies on (without it the
    store's pages live in the WAL and the damage is shadowed: test_store_faults)."""
    import gc
    import sqlite3

    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, sqlite3.Connection):
            with contextlib.suppress(Exception):
                obj.close()


# ---------------------------------------------------------------------------- the audit


@contextlib.contextmanager
def reads_of_environ() -> Iterator[set[str]]:
    """The names read from ``os.environ`` in the block."""
    read: set[str] = set()
    real = os.environ

    class Watched(dict[str, str]):
        def __getitem__(self, key: str) -> str:
            read.add(key)
            return real[key]

        def get(self, key: str, default: Any = None) -> Any:
            read.add(key)
            return real.get(key, default)

        def __contains__(self, key: object) -> bool:
            read.add(str(key))
            return key in real

    os.environ = Watched(real)  # type: ignore[assignment]  # noqa: B003 -- watched, not cleared; put back below
    try:
        yield read
    finally:
        os.environ = real  # noqa: B003


def filled_caches(package: str) -> list[str]:
    """The ``functools`` caches of ``package``'s modules that hold an answer."""
    found = []
    for name, module in list(sys.modules.items()):
        if name == package or name.startswith(f"{package}."):
            for attr, value in vars(module).items():
                own = str(getattr(value, "__module__", "")).startswith(package)  # not the stdlib's urlsplit
                if isinstance(value, functools._lru_cache_wrapper) and own and value.cache_info().currsize:
                    found.append(f"{name}.{attr}")
    return found


def signals_changed(before: Mapping[int, Any]) -> list[int]:
    """The signals whose handler is not the one in ``before``."""
    return [n for n, handler in before.items() if signal.getsignal(n) != handler]


def main(argv: list[str]) -> None:
    sys.path[0] = os.getcwd()  # as `python -m hetflow.cli.main` has it: not this script's folder
    if argv[:1] == ["--audit"]:
        handlers: dict[int, Any] = {
            n: signal.getsignal(n) for n in signal.valid_signals() if n not in (signal.SIGKILL, signal.SIGSTOP)
        }
        with reads_of_environ() as read:
            preload()
        print("\n".join(sorted(read)))
        print("\n".join(f"thread:{t.name}" for t in threading.enumerate() if t is not threading.main_thread()))
        print("\n".join(f"cache:{name}" for name in filled_caches("hetflow")))
        print("\n".join(f"signal:{signal.Signals(n).name}" for n in signals_changed(handlers)))
        return
    server = Server(argv[0])
    preload()
    os.write(1, READY)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the caller has read READY and closed its end
    os.close(null)
    server.serve()


if __name__ == "__main__":
    main(sys.argv[1:])

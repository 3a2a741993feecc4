"""Pure work on big documents, off the event loop and off the proxy's GIL.

Parsing a 4 MB index holds the GIL in single C calls (``json.loads``, pydantic) for 40 to
200 ms on a busy 2-core machine, so from a thread it still stalls the event loop: every
client waits (issue 38: building the "why nothing fits" answer stalled a proxy 3.7 s,
6.1 s under load; a structural check of the same index, 40-200 ms each time).  Work on a
document over ``inline_bytes`` therefore runs in a worker process, which stalls nothing,
and whatever the parse takes in memory is the worker's, not the proxy's; a small one runs
in a thread, where a process round trip would cost more than the work.

A worker is a plain ``python -c`` child speaking pickles over its stdin and stdout, not
``multiprocessing``: that would import the proxy's ``__main__`` again in every worker and
keep a resource-tracker process for the proxy's life.  Workers start at the first big
document, run niced (on a busy machine the proxy serving cached blobs goes first), are
replaced after ``TASKS_PER_WORKER`` documents so their heaps cannot creep, and end with
``close()``, or by themselves when the proxy is gone (their stdin closes).  A worker that
dies mid-document (the OOM killer) is replaced and the document tried once more.  What is
run must be a module's top-level function taking and returning what pickles.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar, cast

__all__ = ["INLINE_BYTES", "Offload"]

INLINE_BYTES = 256 * 1024  # an index this size parses in ~10 ms: a thread is fine
TASKS_PER_WORKER = 32
WORKER_NICE = 10
_HEAD = struct.Struct(">Q")

# The worker: read (function, args), answer (True, result) or (False, exception), until EOF.
_WORKER = f"""
import os, pickle, struct, sys
os.nice({WORKER_NICE})
head, inp, out = struct.Struct(">Q"), sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr  # a stray print cannot garble the answers
while len(size := inp.read(8)) == 8:
    fn, args = pickle.loads(inp.read(head.unpack(size)[0]))
    try:
        answer = pickle.dumps((True, fn(*args)), pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:
        try:
            answer = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
        except Exception:
            answer = pickle.dumps((False, RuntimeError(repr(exc))), pickle.HIGHEST_PROTOCOL)
    out.write(head.pack(len(answer)))
    out.write(answer)
    out.flush()
"""

T = TypeVar("T")


class WorkerDied(RuntimeError):
    """A worker process ended before it answered."""


class _Worker:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.tasks = 0

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        stdin, stdout = cast(IO[bytes], self.proc.stdin), cast(IO[bytes], self.proc.stdout)
        request = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
        try:
            stdin.write(_HEAD.pack(len(request)))
            stdin.write(request)
            stdin.flush()
        except OSError as exc:
            raise WorkerDied(f"the worker process {self.proc.pid} is gone: {exc}") from None
        size = stdout.read(_HEAD.size)
        if len(size) < _HEAD.size:
            raise WorkerDied(f"the worker process {self.proc.pid} ended (exit {self.proc.wait()}) before it answered")
        self.tasks += 1
        ok, value = pickle.loads(stdout.read(_HEAD.unpack(size)[0]))
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        try:
            cast(IO[bytes], self.proc.stdin).close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        cast(IO[bytes], self.proc.stdout).close()


def _stop_all(idle: list[_Worker]) -> None:
    while idle:
        idle.pop().stop()


class Offload:
    """Runs ``fn(*args)`` in a thread or, for a big document, in a worker process."""

    def __init__(self, *, workers: int = 1, inline_bytes: int = INLINE_BYTES) -> None:
        self.workers = workers
        self.inline_bytes = inline_bytes
        # ``workers`` threads, each driving one worker process at a time
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="hetflow-offload")
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        weakref.finalize(self, _stop_all, self._idle)

    async def run(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, where ``size`` is the document's length in bytes."""
        if size <= self.inline_bytes:
            return await asyncio.to_thread(fn, *args)
        result = await asyncio.get_running_loop().run_in_executor(self._threads, self._call, fn, args)
        return cast(T, result)

    def _call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        for attempt in (1, 2):
            with self._lock:
                worker = self._idle.pop() if self._idle else _Worker()
            try:
                result = worker.call(fn, args)
            except WorkerDied:
                worker.stop()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._release(worker)
                raise
            self._release(worker)
            return result
        raise AssertionError("unreachable")

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed and worker.tasks < TASKS_PER_WORKER:
                self._idle.append(worker)
                return
        worker.stop()  # closed, or a fresh one next time: its heap cannot creep

    def close(self) -> None:
        """Stop the worker processes (a document under way is finished first)."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._closed = True
            _stop_all(self._idle)

"""A step's environment handed to its attached ``podman run`` through a named pipe.

The values never go on a command line (``ps`` shows those to every local user), nor into a
file that stays on disk: the ``--env-file`` podman is given is a FIFO (mode 0600, in a new
private directory), which a thread of ours writes once podman opens it.  podman reads its
env files as it parses its arguments, before it creates the container, so once the write
is done the FIFO and its directory are removed: no ``podman container exists`` needs to be
asked when that is (each such question was a podman process taking podman's lock while the
next step started, one to three a step on a busy machine).

A run that exits without reading it (podman refused an argument) is told with
``abandon``: it opens the FIFO's other end so the writer's ``open`` returns, drains what it
writes, and the FIFO goes.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from hetflow.execute.engine import check_env_values, drop_env_file


class EnvPipe:
    """One attached run's ``--env-file``: ``path``, written once by ``start``'s thread."""

    def __init__(self, env: Mapping[str, str], name: str = "") -> None:
        check_env_values(env)  # what podman's --env-file cannot carry is refused, naming it
        self._data = "".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode()
        directory = Path(tempfile.mkdtemp(prefix="hetflow-env-"))  # mode 0700: this user only
        self.path = directory / "env"
        try:
            os.mkfifo(self.path, 0o600)
        except BaseException:
            drop_env_file(self.path)
            raise
        self._thread = threading.Thread(target=self._feed, name=f"env-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _feed(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY)  # until a reader opens it: podman, or ``abandon``
            try:
                view = memoryview(self._data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError:
            pass  # the reader went away (podman failed as it read): nothing of it stays
        finally:
            drop_env_file(self.path)

    def abandon(self) -> None:
        """The run has exited (or never started): unblock the writer, if it still waits for
        a reader, and wait until the FIFO is gone."""
        if self._thread.ident is None:  # never started: nothing waits on it
            drop_env_file(self.path)
            return
        while self._thread.is_alive():
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                break  # gone: the writer has finished
            try:
                os.set_blocking(fd, True)
                while os.read(fd, 65536):  # EOF once the writer closes (or when none has it open)
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
            self._thread.join(0.01)  # a writer not yet in its open(): the next round meets it
        self._thread.join()

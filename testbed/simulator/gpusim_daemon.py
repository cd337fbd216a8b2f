"""Daemon plumbing shared by the ``nvidia-persistenced`` and ``nv-fabricmanager`` stand-ins (stdlib only).

Installed as ``/usr/lib/gpusim/gpusim_daemon.py`` by its own package, ``gpusim-common``: the two scripts ship in
different packages that a node installs together, and dpkg refuses two packages owning one path, so both
packages depend on the common one (the Debian way) and the scripts import this module from their directory.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn


def daemonize() -> int | None:
    """Fork into the background as a systemd ``Type=forking`` daemon does (double fork, new session).

    In the calling process: waits until the daemon called :func:`notify_ready`, then returns None (the
    caller exits 0, and systemd reads the PIDFile). In the daemon, with stdin/stdout/stderr on
    /dev/null: returns the descriptor to pass to :func:`notify_ready` once its pid file is written.
    """
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        os.read(r, 1)
        return None
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return w


def notify_ready(fd: int) -> None:
    """Let the process waiting in :func:`daemonize` return."""
    os.write(fd, b"1")
    os.close(fd)


def serve_until_stopped(pidfile: Path, on_stop: Callable[[], None] | None = None) -> NoReturn:
    """Sleep until SIGTERM or SIGINT, then call ``on_stop``, remove ``pidfile`` and exit 0."""

    def stop(_sig: int, _frame: FrameType | None) -> None:
        if on_stop is not None:
            on_stop()
        pidfile.unlink(missing_ok=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(3600)

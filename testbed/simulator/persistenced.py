#!/usr/bin/env python3
"""Stand-in for ``nvidia-persistenced`` (installed as /usr/lib/gpusim/persistenced.py, stdlib only).

Like the real daemon it forks into the background unless ``--foreground`` is given, writes its pid
to ``/run/nvidia-persistenced/nvidia-persistenced.pid`` and removes it on SIGTERM/SIGINT. While it
runs, gpusim reports persistence mode Enabled on every GPU, unless it was started with
``--no-persistence-mode`` (then GPUs keep their ``nvidia-smi -pm`` setting, as with the real one).
``--user``/``--group`` are accepted and ignored (the stand-in needs no privilege drop).
All paths are prefixed by ``$GPUSIM_ROOT`` (default ``/``).
Forking and the SIGTERM/SIGINT handling come from ``gpusim_daemon`` (package gpusim-common, same directory).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpusim_daemon import daemonize, notify_ready, serve_until_stopped

PIDFILE = "run/nvidia-persistenced/nvidia-persistenced.pid"
MODEFILE = "run/gpusim/persistenced-mode"
LOGFILE = "run/gpusim/persistenced.log"


def _root() -> Path:
    return Path(os.environ.get("GPUSIM_ROOT", "/"))


def _alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def _log(msg: str) -> None:
    log = _root() / LOGFILE
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"nvidia-persistenced[{os.getpid()}]: {msg}\n")


def _serve(pidfile: Path, verbose: bool) -> None:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{os.getpid()}\n")
    if verbose:
        _log("Verbose syslog connection opened")
    _log(f"Started ({os.getpid()})")
    serve_until_stopped(pidfile, lambda: _log(f"Shutdown ({os.getpid()})"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nvidia-persistenced")
    p.add_argument("-f", "--foreground", action="store_true")
    p.add_argument("-V", "--verbose", action="store_true")
    p.add_argument("-u", "--user")
    p.add_argument("-g", "--group")
    p.add_argument("--persistence-mode", dest="pm", action="store_true", default=True)
    p.add_argument("--no-persistence-mode", dest="pm", action="store_false")
    p.add_argument("--nvidia-cfg-path")
    ns = p.parse_args(argv)
    root = _root()
    pidfile = root / PIDFILE
    if _alive(pidfile):
        # The real daemon's only console message; details go to syslog.
        sys.stderr.write("nvidia-persistenced failed to initialize. Check syslog for more details.\n")
        return 1
    mode = root / MODEFILE
    mode.parent.mkdir(parents=True, exist_ok=True)
    mode.write_text("enabled\n" if ns.pm else "disabled\n")
    if ns.foreground:
        _serve(pidfile, ns.verbose)
        return 0
    # Daemonize like the real one (systemd Type=forking waits for the parent to exit and reads
    # PIDFile): the pid file is written by the child before the parent returns.
    ready = daemonize()
    if ready is None:
        return 0
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{os.getpid()}\n")
    notify_ready(ready)
    _serve(pidfile, ns.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Stand-in for ``nv-fabricmanager`` (installed as /usr/lib/gpusim/fabricmanager.py, stdlib only).

Forks into the background like the real daemon (the unit is Type=forking), writes
``/run/nvidia-fabricmanager/nv-fabricmanager.pid``, logs a startup line to the LOG_FILE_NAME of
its config (default /var/log/fabricmanager.log) and sleeps. While it runs, gpusim reports the
fabric state of NVSwitch boards as Completed/Success. Paths are prefixed by ``$GPUSIM_ROOT``.
Forking and the SIGTERM/SIGINT handling come from ``gpusim_daemon`` (package gpusim-common, same directory).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from gpusim_daemon import daemonize, notify_ready, serve_until_stopped

PIDFILE = "run/nvidia-fabricmanager/nv-fabricmanager.pid"


def _root() -> Path:
    return Path(os.environ.get("GPUSIM_ROOT", "/"))


def _log_file(config: Path) -> Path:
    name = "/var/log/fabricmanager.log"
    try:
        for line in config.read_text().splitlines():
            if line.startswith("LOG_FILE_NAME="):
                name = line.split("=", 1)[1].strip() or name
    except OSError:
        pass
    return _root() / name.lstrip("/")


def _driver() -> str:
    try:
        return (_root() / "usr/lib/gpusim/driver-version").read_text().strip()
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nv-fabricmanager")
    p.add_argument("-c", "--config", default="/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    p.add_argument("--foreground", action="store_true", help="gpusim only: do not fork")
    ns = p.parse_args(argv)
    root = _root()
    pidfile = root / PIDFILE
    log = _log_file(root / ns.config.lstrip("/"))
    ready: int | None = None
    if not ns.foreground:
        ready = daemonize()
        if ready is None:
            return 0
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{os.getpid()}\n")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(
            f"[{time.strftime('%b %d %Y %H:%M:%S')}] [INFO] [tid {os.getpid()}] "
            f"Fabric Manager version {_driver()} is running with the following configuration options\n"
        )
        f.write(
            f"[{time.strftime('%b %d %Y %H:%M:%S')}] [INFO] [tid {os.getpid()}] "
            "Successfully configured all the available NVSwitches to route GPU NVLink traffic.\n"
        )
    if ready is not None:
        notify_ready(ready)
    serve_until_stopped(pidfile)


if __name__ == "__main__":
    sys.exit(main())

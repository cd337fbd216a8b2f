#!/usr/bin/env python3
"""Stand-in for ``nv-fabricmanager`` (installed as /usr/lib/gpusim/fabricmanager.py, stdlib only).

Forks into the background like the real daemon (the unit is Type=forking), writes
``/run/nvidia-fabricmanager/nv-fabricmanager.pid``, logs a startup line to the LOG_FILE_NAME of
its config (default /var/log/fabricmanager.log) and sleeps. While it runs, gpusim reports the
fabric state of NVSwitch boards as Completed/Success. Paths are prefixed by ``$GPUSIM_ROOT``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

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
    if not ns.foreground:
        r, w = os.pipe()
        if os.fork() > 0:
            os.close(w)
            os.read(r, 1)
            return 0
        os.close(r)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
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
    if not ns.foreground:
        os.write(w, b"1")
        os.close(w)

    def stop(_sig: int, _frame: FrameType | None) -> None:
        pidfile.unlink(missing_ok=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())

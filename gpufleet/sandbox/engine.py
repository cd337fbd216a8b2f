"""The Docker engine the sandbox and Molecule run on.

Debian's ``docker.io`` is installed when no engine exists. When no daemon answers, ``dockerd`` is started in the
background and its PID recorded, so that ``stop_engine`` stops only what we started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from gpufleet import REPO_ROOT

CACHE_DIR = REPO_ROOT / ".cache"
PID_FILE = CACHE_DIR / "dockerd.pid"
LOG_FILE = CACHE_DIR / "dockerd.log"
DOCKERD = "/usr/sbin/dockerd"
APT_PACKAGES = ["docker.io", "debootstrap", "apt-utils", "gnupg", "dpkg-dev"]


class EngineError(RuntimeError):
    pass


def docker_bin() -> str:
    # Debian's client matches Debian's daemon; a newer client on PATH also works but prefer the pair.
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")


def daemon_answers() -> bool:
    try:
        subprocess.run([docker_bin(), "info"], check=True, capture_output=True, timeout=20)
    except (subprocess.SubprocessError, FileNotFoundError):
        return False
    return True


def missing_apt_packages() -> list[str]:
    missing = []
    for pkg in APT_PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(pkg)
    return missing


def install_packages(log: bool = True) -> None:
    """Install the host packages the platform needs (Debian/Ubuntu, as root)."""
    missing = missing_apt_packages()
    if not missing:
        return
    if os.geteuid() != 0:
        raise EngineError(
            f"missing packages {', '.join(missing)}: run as root or `apt-get install {' '.join(missing)}`"
        )
    if log:
        print(f"installing host packages: {' '.join(missing)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def ensure_engine(timeout: float = 60.0) -> bool:
    """Make sure a Docker daemon answers. Returns True when this call started it."""
    if daemon_answers():
        return False
    install_packages()
    if daemon_answers():
        return False
    if not Path(DOCKERD).exists():
        raise EngineError(f"{DOCKERD} not found after installing docker.io")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with LOG_FILE.open("ab") as log:
        proc = subprocess.Popen([DOCKERD], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    PID_FILE.write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_answers():
            return True
        if proc.poll() is not None:
            raise EngineError(f"dockerd exited with {proc.returncode}; see {LOG_FILE}")
        time.sleep(1)
    raise EngineError(f"dockerd did not answer within {timeout:.0f}s; see {LOG_FILE}")


def stop_engine() -> bool:
    """Stop dockerd if we started it (PID file present). Returns True when something was stopped."""
    if not PID_FILE.exists():
        return False
    pid = int(PID_FILE.read_text().strip() or 0)
    PID_FILE.unlink()
    if pid <= 0:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    for _ in range(60):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    return True

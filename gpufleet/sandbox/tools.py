"""Tools the test suite needs but must not install as services.

Debian's ``prometheus`` package ships ``promtool``; installing it would also start a Prometheus server (its
postinst starts the service), so the package is only unpacked under ``.cache/tools`` and promtool used from there.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from gpufleet import REPO_ROOT

TOOLS_DIR = REPO_ROOT / ".cache" / "tools"
PROMTOOL = TOOLS_DIR / "prometheus" / "usr" / "bin" / "promtool"


def find_promtool() -> Path | None:
    if PROMTOOL.exists():
        return PROMTOOL
    found = shutil.which("promtool")
    return Path(found) if found else None


def ensure_promtool() -> Path:
    found = find_promtool()
    if found:
        return found
    with tempfile.TemporaryDirectory(prefix="gpufleet-deb-") as tmp:
        download = ["apt-get", "download", "-q", "prometheus"]
        if subprocess.run(download, cwd=tmp, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(download, cwd=tmp, check=True, capture_output=True)
        deb = next(Path(tmp).glob("prometheus_*.deb"))
        TOOLS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(TOOLS_DIR / "prometheus")], check=True)
    return PROMTOOL

"""Issue 31 point 2, plain hosts: ``node_check.py watch`` (run by the node_validation role's systemd timer) writes
the marker and node exporter's textfile metric through ``actions.run_actions``, clears after the healthy streak,
and runs on a bare python3 (no pydantic, no yaml), as on a host."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

from gpufleet import REPO_ROOT

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
HOST = socket.gethostname().split(".")[0]
BARE = ("import sys\nfor m in ('pydantic', 'pydantic_core', 'yaml', 'rich', 'typer'): sys.modules[m] = None\n"
        "from gpufleet.validation.node_check import main\nsys.exit(main(sys.argv[1:]))")


def _node(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "root"
    (root / "etc/gpusim").mkdir(parents=True)
    (root / "usr/lib/gpusim").mkdir(parents=True)
    (root / "etc/gpusim/board").write_text("h100-hgx\n")
    (root / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")
    smi = tmp / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nGPUSIM_ROOT={root} exec {sys.executable} {GPUSIM} "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return root, smi


def _check(tmp: Path, smi: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BARE, "watch", "--gpus", "8", "--nvidia-smi", str(smi),
         "--kernel-log-file", str(root / "run/gpusim/kmsg"), "--fabricmanager-unit", "gpufleet-test-no-such-unit",
         "--state-dir", str(tmp / "state"), "--textfile-dir", str(tmp / "textfile"), "--healthy-streak", "2"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def test_plain_host_marker_metrics_and_streak_on_bare_python(tmp_path: Path) -> None:
    root, smi = _node(tmp_path)
    (tmp_path / "textfile").mkdir()
    marker = tmp_path / "state" / "markers" / f"{HOST}.json"
    prom = tmp_path / "textfile" / "gpufleet_health_actions.prom"
    done = _check(tmp_path, smi, root)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "1"],
                   check=True, timeout=60, env={**os.environ, "GPUSIM_ROOT": str(root)}, capture_output=True)
    done = _check(tmp_path, smi, root)
    assert done.returncode == 0, done.stderr
    data = json.loads(marker.read_text())
    assert data["action"] == "reset-gpu" and data["drain_reason"].startswith("gpufleet:reset-gpu check=ecc-dbe")
    assert (f'gpufleet_health_actions{{host="{HOST}",pool="-",decision="apply",action="reset-gpu",'
            f'failed="false"}} 1') in prom.read_text()
    subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "0"],
                   check=True, timeout=60, env={**os.environ, "GPUSIM_ROOT": str(root)}, capture_output=True)
    _check(tmp_path, smi, root)
    assert marker.exists(), "cleared on one good read"
    assert 'decision="keep"' in prom.read_text()
    _check(tmp_path, smi, root)
    assert not marker.exists()
    assert 'decision="clear"' in prom.read_text()

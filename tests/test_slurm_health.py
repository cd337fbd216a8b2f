"""Issue 29 point 5: the Slurm health program runs gpufleet's node health check on the node and drains on a
critical finding (gpufleet/validation/node_check.py, installed by roles/slurm)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.validation import node_check
from tests.node_programs import assert_role_ships_what_it_imports

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
ROLE = REPO_ROOT / "roles" / "slurm"


def _script(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A simulated 8x H100 node: nvidia-smi is the GPU simulator; scontrol records its argv, one per line."""
    root = tmp_path / "root"
    (root / "etc/gpusim").mkdir(parents=True)
    (root / "usr/lib/gpusim").mkdir(parents=True)
    (root / "etc/gpusim/board").write_text("h100-hgx\n")
    (root / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")
    monkeypatch.setenv("GPUSIM_ROOT", str(root))
    smi = _script(tmp_path / "nvidia-smi", f'#!/bin/sh\nexec {sys.executable} {GPUSIM} "$@"\n')
    calls = tmp_path / "scontrol.calls"
    scontrol = _script(tmp_path / "scontrol",
                       f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {calls}\n')

    def ctl(*args: str) -> None:
        subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", *args], check=True, timeout=60,
                       env={**os.environ, "GPUSIM_ROOT": str(root)}, capture_output=True)

    def check(mode: str = "health", gpus: int = 8) -> int:
        return node_check.main([mode, "--gpus", str(gpus), "--nvidia-smi", str(smi), "--scontrol", str(scontrol),
                                "--kernel-log-file", str(root / "run/gpusim/kmsg"),
                                "--fabricmanager-unit", "gpufleet-test-no-such-unit"])

    check.ctl = ctl  # type: ignore[attr-defined]
    check.calls = calls  # type: ignore[attr-defined]
    return check


def test_healthy_node_is_not_drained(node: Any) -> None:
    assert node() == 0
    assert not node.calls.exists()


def test_ecc_error_drains_with_the_finding_as_reason(node: Any, capsys: pytest.CaptureFixture[str]) -> None:
    node.ctl("--gpu", "3", "--ecc-dbe-volatile", "1")
    assert node() == 0
    argv = node.calls.read_text().splitlines()
    assert argv[:3] == ["update", f"nodename={socket.gethostname().split('.')[0]}", "state=drain"]
    # One argv element: the reason's spaces reach scontrol as they are, no shell splits them.
    assert len(argv) == 4 and argv[3].startswith("reason=gpufleet:reset-gpu check=ecc-dbe gpu="), argv
    assert "drained" in capsys.readouterr().out


def test_a_lost_gpu_drains(node: Any) -> None:
    # The board shows eight, slurm.conf declares nine: health.check_gpu_count's finding (a GPU off the bus).
    assert node("health", gpus=9) == 0
    assert "reason=gpufleet:reboot check=gpu-count" in node.calls.read_text()


def test_no_nvml_drains(node: Any, tmp_path: Path) -> None:
    assert node_check.main(["health", "--gpus", "8", "--nvidia-smi", str(tmp_path / "missing"), "--no-drain"]) == 1


def test_xid_in_the_kernel_log_drains(node: Any) -> None:
    node.ctl("--gpu", "5", "--xid", "79")
    assert node() == 0
    assert "reason=gpufleet:reboot check=xid" in node.calls.read_text()


def test_prolog_fails_on_a_critical_finding_and_does_not_drain_itself(node: Any) -> None:
    assert node("prolog") == 0
    node.ctl("--gpu", "2", "--remapped-unc", "1", "--remap-pending", "yes")
    assert node("prolog") == 1  # Slurm drains the node and requeues the job
    assert not node.calls.exists()


def test_epilog_fails_while_a_process_holds_a_gpu(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "4242/fd").mkdir(parents=True)
    (proc / "4242/fd/3").symlink_to("/dev/nvidia1")
    (proc / "4243/fd").mkdir(parents=True)
    (proc / "4243/fd/3").symlink_to("/dev/nvidiactl")  # the driver's control node: not a GPU
    assert node_check.gpu_holders(proc) == [(4242, "/dev/nvidia1")]


def test_drain_argv_keeps_the_reason_one_argument() -> None:
    reason = 'gpufleet:isolate check=x "quoted" $(rm -rf /);'
    assert node_check.drain_argv("n1", reason)[-1] == f"reason={reason}"


def test_the_role_installs_exactly_the_modules_the_program_imports() -> None:
    # Run where pydantic is missing, as on a node with bare python3: every gpufleet module it loads must be in the
    # role's list (roles/slurm/vars/main.yml) and linked, not copied, under files/health (one copy of the checks).
    assert_role_ships_what_it_imports(ROLE, "__slurm_health_modules", "gpufleet.validation.node_check")

"""A source of the managed repository planted after convergence (issue 28 point 4): the check run's adopt task
(ansible/library/apt_source_adopt.py, check mode) is a drift finding of nvidia_repo naming each file, security where
a copy is trusted=yes, never an error; `gpufleet remediate` plans a converge of nvidia_repo without a drain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufleet.ansible_run import HostStats, RunResult, TaskResult
from gpufleet.drift import build_report, plan_hosts
from tests.ansible_local import RUN_MODULE

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "ansible" / "library" / "apt_source_adopt.py"
URI = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
MARKER = "# Managed by gpufleet (role nvidia_repo)"
TASK = "Replace the other sources of the repository (kept as .gpufleet-replaced copies)"


def check_run(tmp: Path) -> dict[str, Any]:
    """The module in check mode on a converged tree with two sources planted after convergence."""
    d = tmp / "d"
    d.mkdir()
    (d / "cuda-ubuntu2204-x86_64.list").write_text(
        f"{MARKER}\ndeb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {URI} /\n")
    (d / "cuda-keyring.sources").write_text(
        f"Types: deb\nURIs: {URI}/\nSuites: /\nSigned-By: /usr/share/keyrings/cuda-archive-keyring.gpg\n")
    (d / "cuda-unsigned.list").write_text(f"deb [trusted=yes] {URI} /\n")
    args = {"uri": URI, "keep": str(d / "cuda-ubuntu2204-x86_64.list"), "keep_marker": MARKER,
            "sources_dir": str(d), "sources_list": str(tmp / "sources.list"), "_ansible_check_mode": True}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          check=False)
    res: dict[str, Any] = json.loads(proc.stdout)
    assert res["changed"] is True and sorted(p.name for p in d.iterdir()) == [
        "cuda-keyring.sources", "cuda-ubuntu2204-x86_64.list", "cuda-unsigned.list"]  # check mode moved nothing
    return res


def test_a_planted_source_is_a_drift_finding_security_when_unsigned_and_remediate_converges_it(tmp_path: Path) -> None:
    res = check_run(tmp_path)
    task = TaskResult("gpu-0", "p", "nvidia_repo", TASK, "apt_source_adopt", "changed", True, res=res)
    report = build_report(RunResult(rc=0, status="successful", check=True, hosts={"gpu-0": HostStats(ok=1)},
                                    tasks=[task]))
    assert report.errors == [] and report.failed_hosts == [] and report.exit_code == 2
    by_file = {Path(i.message.split(":", 1)[0]).name: i for i in report.items}
    assert sorted(by_file) == ["cuda-keyring.sources", "cuda-unsigned.list"]
    signed, unsigned = by_file["cuda-keyring.sources"], by_file["cuda-unsigned.list"]
    assert (signed.component, signed.kind, signed.severity) == ("nvidia_repo", "file", "normal")
    assert "another source of the repository gpufleet manages; converge replaces it (kept as " in signed.message
    assert str(tmp_path / "d" / "cuda-keyring.sources.gpufleet-replaced") in signed.message
    assert unsigned.severity == "security" and "trusted=yes" in unsigned.message
    # remediate converges nvidia_repo there; replacing a source is no reason to drain the host
    (plan,) = plan_hosts(report)
    assert (plan.host, plan.components, plan.drain) == ("gpu-0", ("nvidia_repo",), False)

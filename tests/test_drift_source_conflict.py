"""apt refusing two sources for one repository (issue 28 point 4): `gpufleet drift` reports it as a finding of the
host (security when one copy is trusted=yes), never as an error of the check."""

from __future__ import annotations

from typing import Any

from gpufleet.ansible_run import HostStats, RunResult, TaskResult
from gpufleet.drift import build_report, render_textfile

KEY = "/etc/apt/keyrings/cuda-archive-keyring.asc"
URI = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"

KEYRING_GPG = "/usr/share/keyrings/cuda-archive-keyring.gpg"
# Ansible's apt module joins apt's error lines with "," (gantsign/ansible-role-visual-studio-code issue 263).
SIGNED_BY_CONFLICT = (f"Failed to update apt cache: E:Conflicting values set for option Signed-By regarding source "
                      f"{URI}/ /: {KEYRING_GPG} != {KEY}, E:The list of sources could not be read.")
TRUSTED_CONFLICT = (f"E: Conflicting values set for option Trusted regarding source {URI}/ /: yes != \n"
                    "E: The list of sources could not be read.\n")


def _failed(host: str, msg: str, stderr: str = "") -> TaskResult:
    return TaskResult(host=host, play="p", role="nvidia_repo", task="Update the package index", action="apt",
                      status="failed", changed=False, msg=msg, res={"stderr": stderr})


def _failed_report(*tasks: TaskResult) -> Any:
    hosts = {t.host: HostStats(ok=1, failed=1) for t in tasks}
    return build_report(RunResult(rc=2, status="failed", check=True, hosts=hosts, tasks=list(tasks)))


def test_apt_conflicts_are_parsed_from_both_apt_formats() -> None:
    from gpufleet.drift.security import apt_conflicts

    (a,) = apt_conflicts(SIGNED_BY_CONFLICT)
    assert (a.option, a.uri, a.suite, a.values, a.severity) == ("Signed-By", f"{URI}/", "/", (KEYRING_GPG, KEY),
                                                                 "normal")
    (b,) = apt_conflicts(TRUSTED_CONFLICT.replace("E: ", "Error: "))
    assert (b.option, b.values, b.severity) == ("Trusted", ("yes", ""), "security")
    assert apt_conflicts("E: Unable to locate package nvidia-utils-570") == []


def test_a_source_conflict_is_a_drift_finding_not_an_error() -> None:
    report = _failed_report(_failed("gpu-0", SIGNED_BY_CONFLICT))
    assert report.errors == [] and report.failed_hosts == []
    (item,) = report.items
    assert item.host == "gpu-0" and item.component == "nvidia_repo" and item.severity == "normal"
    assert f"{URI}/ / is configured more than once with different Signed-By ({KEYRING_GPG} != {KEY})" in item.message
    assert report.exit_code == 2


def test_a_trusted_copy_of_the_source_is_a_security_finding() -> None:
    report = _failed_report(_failed("gpu-0", "non-zero return code", stderr=TRUSTED_CONFLICT))
    (item,) = report.items
    assert item.severity == "security" and "trusted=yes (unsigned)" in item.message
    assert report.errors == [] and report.exit_code == 2
    metrics = render_textfile(report, stack="s")
    assert 'gpufleet_drift{stack="s",host="gpu-0",component="nvidia_repo",severity="security"} 1' in metrics
    assert 'gpufleet_drift_check_error{stack="s",host="gpu-0"} 0' in metrics


def test_other_failures_stay_errors_next_to_a_conflict() -> None:
    report = _failed_report(_failed("gpu-0", SIGNED_BY_CONFLICT), _failed("gpu-1", "E: Unable to locate package x"))
    assert report.failed_hosts == ["gpu-1"] and len(report.errors) == 1 and report.exit_code == 1
    assert [i.host for i in report.items] == ["gpu-0"]

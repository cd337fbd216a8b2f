"""Security drift: changes that weaken what apt trusts are flagged (report, JSON, metric), not just "differs".

The task results have the shapes the project's managed_files module and ansible's get_url return in check mode
with --diff; the source line is the one roles/nvidia_repo writes."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.ansible_run import HostStats, RunResult, TaskResult
from gpufleet.drift import build_report, render_text, render_textfile
from gpufleet.drift.security import parse_sources, source_findings

KEY = "/etc/apt/keyrings/cuda-archive-keyring.asc"
URI = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
SRC = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"
DESIRED = f"# Managed by gpufleet (role nvidia_repo)\ndeb [signed-by={KEY}] {URI} /\n"


def _source_task(on_host: str, host: str = "gpu-0") -> TaskResult:
    res = {"changed": True, "files": [{"dest": SRC, "state": "updated", "changed": True}]}
    diff = [{"before_header": SRC, "after_header": SRC, "before": on_host, "after": DESIRED}]
    return TaskResult(host=host, play="p", role="nvidia_repo", task="Configure the repository source",
                      action="managed_files", status="changed", changed=True, res=res, diff=diff)


def _report(*tasks: TaskResult) -> Any:
    hosts = {t.host: HostStats(ok=1, changed=1) for t in tasks}
    return build_report(RunResult(rc=0, status="successful", check=True, hosts=hosts, tasks=list(tasks)))


@pytest.mark.parametrize(("on_host", "reason"), [
    (f"deb [signed-by={KEY} trusted=yes] {URI} /\n", f"trusted=yes on {URI}: apt accepts its packages unsigned"),
    (f"deb {URI} /\n", f"signed-by removed from {URI}: any key apt trusts may sign it (expected {KEY})"),
    (f"deb [signed-by=/etc/apt/keyrings/other.gpg] {URI} /\n",
     f"signed-by of {URI} is /etc/apt/keyrings/other.gpg, expected {KEY}"),
])
def test_weakened_sources_are_security_findings(on_host: str, reason: str) -> None:
    report = _report(_source_task(on_host))
    (item,) = report.items
    assert (item.severity, item.message) == ("security", f"{SRC} differs ({reason})")
    assert item.line().startswith("gpu-0 nvidia_repo: SECURITY ")
    assert item.diff  # the diff is still shown
    data = report.to_json()
    assert data["items"][0]["severity"] == "security" and data["hosts"]["gpu-0"]["security"] is True
    assert "security: 1 finding(s) weaken what apt trusts on gpu-0" in render_text(report)


def test_the_issues_edit_trusted_replacing_signed_by_names_both() -> None:
    (item,) = _report(_source_task(f"deb [trusted=yes] {URI} /\n")).items
    # trusted=yes in place of signed-by: both weaken it; the report names each.
    assert "trusted=yes" in item.message and "signed-by removed" in item.message


def test_an_edit_that_keeps_the_trust_is_an_ordinary_difference() -> None:
    (item,) = _report(_source_task(f"# edited by hand\ndeb [signed-by={KEY} arch=amd64] {URI} /\n")).items
    assert (item.severity, item.message) == ("normal", f"{SRC} differs")
    # A missing source file is drift (nothing installs from it), not a weaker trust.
    (missing,) = _report(TaskResult(
        host="gpu-0", play="p", role="nvidia_repo", task="Configure", action="managed_files", status="changed",
        changed=True, res={"files": [{"dest": SRC, "state": "created", "changed": True}]},
        diff=[{"before_header": SRC, "after_header": SRC, "before": "", "after": DESIRED}])).items
    assert (missing.severity, missing.message) == ("normal", f"{SRC} missing")


def test_deb822_sources_are_read_too() -> None:
    desired = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main non-free\n" \
              "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    on_host = desired.replace("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n", "Trusted: yes\n")
    assert [s.options.get("trusted") for s in parse_sources(on_host)] == ["yes"]
    assert source_findings(on_host, desired) == [
        "trusted=yes on http://deb.debian.org/debian: apt accepts its packages unsigned",
        "signed-by removed from http://deb.debian.org/debian: any key apt trusts may sign it "
        "(expected /usr/share/keyrings/debian-archive-keyring.gpg)",
    ]


def test_a_changed_repository_key_is_a_security_finding() -> None:
    key = TaskResult(host="gpu-0", play="p", role="nvidia_repo", task="Install the repository signing key",
                     action="ansible.builtin.get_url", status="changed", changed=True,
                     res={"changed": True, "dest": KEY, "checksum_dest": "a" * 40, "checksum_src": "b" * 40})
    (item,) = _report(key).items
    assert item.severity == "security"
    assert item.message.endswith(f"(signing key {KEY} differs from the pinned key, or is missing)")


def test_the_metric_carries_the_severity() -> None:
    report = _report(_source_task(f"deb [trusted=yes] {URI} /\n"))
    text = render_textfile(report, stack="s", now=0)
    assert 'gpufleet_drift{stack="s",host="gpu-0",component="nvidia_repo",severity="security"} 1' in text
    assert 'gpufleet_drift{stack="s",host="gpu-0",component="nvidia_repo",severity="normal"} 0' in text


def test_the_projects_signing_key_module_replacing_the_key_is_a_security_finding() -> None:
    # ansible/library/apt_signing_key.py in check mode with --diff: the host's keyring and the verified key.
    diff = [{"before_header": KEY, "after_header": KEY, "before": "-----BEGIN PGP PUBLIC KEY BLOCK-----\nAAA\n",
             "after": "-----BEGIN PGP PUBLIC KEY BLOCK-----\nBBB\n"}]
    key = TaskResult(host="gpu-0", play="p", role="nvidia_repo", task="Install the repository signing key",
                     action="apt_signing_key", status="changed", changed=True, diff=diff,
                     res={"changed": True, "dest": KEY, "fingerprints": ["EB693B3035CD5710E231E123A4B469963BF863CC"]})
    (item,) = _report(key).items
    assert item.severity == "security"
    assert item.message.endswith(f"(signing key {KEY} differs from the pinned key (another key or fingerprint))")
    missing = TaskResult(**{**key.__dict__, "diff": [{**diff[0], "before": ""}]})
    (gone,) = _report(missing).items
    assert gone.severity == "security" and gone.message.endswith(f"(signing key {KEY} missing)")

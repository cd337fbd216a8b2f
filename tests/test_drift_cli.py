"""``gpufleet drift`` / ``remediate`` arguments and ``gpufleet validate``'s security gate, through the CLI.

Ansible runs for real where the point is its own answer (a --limit that matches nothing); runs over hosts are
replaced by stand-ins that return reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.ansible_run import HostStats, RunResult, TaskResult
from gpufleet.cli import app
from gpufleet.drift import build_report
from gpufleet.drift.runner import Target

runner = CliRunner()
INVENTORY = """\
all:
  children:
    gpu:
      hosts:
        gpu-0: {ansible_connection: local}
        gpu-1: {ansible_connection: local}
    system:
      hosts:
        ctl-0: {ansible_connection: local}
"""
PLAY = "- name: Nothing\n  hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"


@pytest.mark.parametrize("batch", ["150%", "101%"])
def test_remediate_refuses_a_batch_above_100_percent_before_any_check(batch: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["remediate", "--inventory", str(tmp_path / "missing.yml"), "--batch", batch])
    assert r.exit_code == 1
    assert f"--batch '{batch}': a share of the hosts is at most 100%" in r.output


def test_a_limit_that_matches_no_host_says_so_and_lists_the_groups(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(INVENTORY)
    (tmp_path / "play.yml").write_text(PLAY)
    args = ["--inventory", str(inv), "--playbook", str(tmp_path / "play.yml"), "--limit", "nosuch*"]
    r = runner.invoke(app, ["drift", *args, "--json", "--textfile", str(tmp_path / "d.prom")])
    assert r.exit_code == 1
    # The CLI's error contract: file, key, value, message, fix (JSON on stdout with --json).
    assert json.loads(r.stdout)["error"] == {
        "file": str(inv), "key": "--limit", "value": "nosuch*", "kind": "invalid option",
        "message": "--limit 'nosuch*' matched no host (its groups are gpu, system)",
        "fix": "give a host or group name of the inventory, or a pattern such as 'gpu-*'"}
    r = runner.invoke(app, ["remediate", *args])
    assert r.exit_code == 1
    assert "matched no host (its groups are gpu, system)" in r.output and "fix those hosts" not in r.output


def test_an_unknown_stack_has_no_stray_key_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["drift", "--stack", "nosuchstack"])
    assert r.exit_code == 1
    assert "- = None" not in r.output and "stack file not found" in r.output


def _security_report() -> object:
    src = "/etc/apt/sources.list.d/cuda.list"
    task = TaskResult(host="gpu-0", play="p", role="nvidia_repo", task="Configure the repository source",
                      action="managed_files", status="changed", changed=True,
                      res={"files": [{"dest": src, "state": "updated", "changed": True}]},
                      diff=[{"before_header": src, "before": "deb [trusted=yes] https://r/x /\n",
                             "after": "deb [signed-by=/etc/apt/keyrings/k.asc] https://r/x /\n"}])
    return build_report(RunResult(rc=0, status="successful", check=True, hosts={"gpu-0": HostStats(ok=1)},
                                  tasks=[task]))


@pytest.mark.parametrize(("weak", "code"), [(True, 1), (False, 0)])
def test_validate_fails_on_security_drift(weak: bool, code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.validation.run import ValidationResult

    monkeypatch.setattr("gpufleet.validation.run.run_validation",
                        lambda stack, **_: ValidationResult(stack, [], None, None))
    monkeypatch.setattr("gpufleet.drift.runner.target_for_stack", lambda stack: Target(Path("inv"), None, stack))
    clean = build_report(RunResult(rc=0, status="successful", check=True, hosts={"gpu-0": HostStats(ok=1)}))
    calls: list[list[str] | None] = []

    def check(target: Target, **kw: object) -> tuple[object, RunResult]:
        calls.append(kw.get("tags"))  # type: ignore[arg-type]
        return (_security_report() if weak else clean), RunResult()

    monkeypatch.setattr("gpufleet.drift.runner.check_drift", check)
    r = runner.invoke(app, ["validate", "--stack", "local", "--json"])
    assert r.exit_code == code, r.output
    assert calls == [["repo"]]
    data = json.loads(r.stdout)
    assert [i["severity"] for i in data["security"]] == (["security"] if weak else [])
    assert data["ok"] is not weak

"""The lock rules run once per command, in Python: never again inside Ansible, never twice on the way there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import gpufleet.lock.rules as rules
from gpufleet.ansible_run import RunResult
from gpufleet.cli import app


@pytest.fixture
def rule_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every run of the rules entry point (gpufleet.lock.rules.run_rules), by the stack it checked."""
    calls: list[str] = []
    real = rules.run_rules

    def counting(ctx: rules.RuleContext) -> Any:
        calls.append(ctx.spec.stack)
        return real(ctx)

    monkeypatch.setattr(rules, "run_rules", counting)
    yield calls


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """ansible-playbook and the sandbox containers replaced; the inventory goes to tmp_path. Returns the playbooks
    run."""
    import gpufleet.cli.cluster as cli_cluster
    import gpufleet.workflow as workflow
    from gpufleet.sandbox import backend, cluster, platform

    played: list[Path] = []

    def run_playbook(playbook: Path, inventory: Path, **_: Any) -> RunResult:
        played.append(playbook)
        assert (inventory.parent / "group_vars" / "all" / "lock_digest.yml").is_file()
        return RunResult(rc=0, status="successful", finished=True)

    monkeypatch.setattr(workflow, "inventory_dir", lambda stack: tmp_path / stack)
    monkeypatch.setattr(backend, "running_pool_sizes", lambda stack: {})
    monkeypatch.setattr(workflow, "run_playbook", run_playbook)
    monkeypatch.setattr(platform, "prepare", lambda **_: type("P", (), {"image": "img"})())
    monkeypatch.setattr(cluster, "up", lambda *a, **k: [])
    monkeypatch.setattr(cli_cluster, "sandbox_report", lambda *a, **k: [])
    return played


@pytest.mark.parametrize("command", [["converge", "--stack", "local"], ["converge", "--stack", "local", "--check"],
                                     ["up", "--stack", "local"]])
def test_rules_run_once_per_command(command: list[str], rule_runs: list[str], no_hosts: list[Path]) -> None:
    r = CliRunner().invoke(app, command)
    assert r.exit_code == 0, r.output
    assert [p.name for p in no_hosts] == ["site.yml"]
    assert rule_runs == ["local"]


def test_lock_check_play_runs_no_rules() -> None:
    # The play Ansible runs first compares a digest with core filters; the rules have no Ansible copy left.
    from gpufleet import REPO_ROOT

    play = (REPO_ROOT / "ansible" / "playbooks" / "lock_check.yml").read_text()
    assert "ansible.builtin.assert" in play and "hash('sha256')" in play
    assert not list((REPO_ROOT / "ansible").rglob("*lock_check*.py"))

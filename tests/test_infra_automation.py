"""``gpufleet.infra.automation.up``: the parts that run without the Pulumi CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.infra import automation
from gpufleet.lock.render import render_ansible_vars
from gpufleet.workflow import resolve_stack


def test_missing_cli_names_the_install_step() -> None:
    with pytest.raises(automation.PulumiCliMissing) as e:
        automation.require_cli(which=lambda _name: None)
    assert str(e.value) == (
        "the `pulumi` command was not found on PATH: install the Pulumi CLI "
        "(curl -fsSL https://get.pulumi.com "
        "| sh, see https://www.pulumi.com/docs/iac/download-install/), then run `pulumi login --local`"
    )
    assert automation.require_cli(which=lambda _name: "/usr/local/bin/pulumi") == "/usr/local/bin/pulumi"


def test_local_stack_is_not_deployed_by_pulumi() -> None:
    with pytest.raises(ValueError, match=r"^stack local is the local sandbox"):
        automation.up(resolve_stack("local", up=True))


def test_up_without_cli_fails_before_touching_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(automation.shutil, "which", lambda _name: None)
    with pytest.raises(automation.PulumiCliMissing):
        automation.up(resolve_stack("onprem-h100"))


def test_non_local_inventory_vars_come_from_the_current_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hosts.yml is `gpufleet up`'s (the stack's outputs); the vars are re-rendered from the command's resolved stack,
    so a stale versions.yml (a lock edited since `up`) never reaches the hosts, nor its digest."""
    import gpufleet.workflow as workflow

    monkeypatch.setattr(workflow, "inventory_dir", lambda _stack: tmp_path)
    (tmp_path / "hosts.yml").write_text("all:\n  children: {}\n")
    versions = tmp_path / "group_vars" / "all" / "versions.yml"
    versions.parent.mkdir(parents=True)
    versions.write_text("---\nnvidia_driver_version: 1.0.0\n")
    resolved = resolve_stack("onprem-h100")
    assert resolved.inventory == tmp_path / "hosts.yml"
    assert (tmp_path / "hosts.yml").read_text() == "all:\n  children: {}\n"
    assert yaml.safe_load(versions.read_text()) == render_ansible_vars(resolved.lock)
    digest = yaml.safe_load((tmp_path / "group_vars" / "all" / "lock_digest.yml").read_text())
    assert digest, "the lock digest is written next to the vars"
    assert (tmp_path / "group_vars" / "all" / "cluster.yml").exists()

"""``gpufleet.infra.automation.up``: the parts that run without the Pulumi CLI."""

from __future__ import annotations

import pytest

from gpufleet.infra import automation


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
        automation.up("local")


def test_up_without_cli_fails_before_touching_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(automation.shutil, "which", lambda _name: None)
    with pytest.raises(automation.PulumiCliMissing):
        automation.up("onprem-h100")

"""Every CLI path that touches hosts or resources checks the lock first: an invalid stack exits non-zero with
the exact problem and nothing runs (no inventory written, no playbook, no Pulumi, no containers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.ansible_run import RunResult
from gpufleet.cli import app

runner = CliRunner()

STACK = """\
config:
  gpufleet:backend: {backend}
  gpufleet:lock:
    profile: h100-cuda12.8
    versions: {{{versions}}}
  gpufleet:pools:
    - name: system
      role: system
      count: 1
    - name: gpu
      role: gpu
      gpu: h100-sxm5-80gb
      count: 2
      power_limit: "700"
      hosts: [{{name: gpu-0, address: 192.0.2.20}}, {{name: gpu-1, address: 192.0.2.21}}]
"""


def problem(path: Path) -> str:
    return (f"{path}: gpufleet:lock.versions.fabric_manager = '570.133.20': fabric manager 570.133.20 must equal "
            "driver 570.172.08. Fix: set versions.fabric_manager to 570.172.08 or remove the override")


def write_stack(tmp_path: Path, backend: str = "local", versions: str = "fabric_manager: 570.133.20") -> Path:
    path = tmp_path / f"Pulumi.lab-{backend}.yaml"
    path.write_text(STACK.format(backend=backend, versions=versions))
    return path


class Touched:
    """Records every call that would touch a host, a container or a Pulumi stack."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def hook(self, name: str, result: Any = None) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return result
        return call


@pytest.fixture
def touched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Touched:
    import gpufleet.cli.cluster
    import gpufleet.infra.automation
    import gpufleet.infra.offline
    import gpufleet.inventory.writer
    import gpufleet.sandbox.cluster
    import gpufleet.sandbox.platform
    import gpufleet.workflow

    t = Touched()
    monkeypatch.setattr(gpufleet.inventory.writer, "INVENTORIES_DIR", tmp_path / "inventories")
    monkeypatch.setattr(gpufleet.workflow, "run_playbook", t.hook("run_playbook", RunResult(rc=0)))
    monkeypatch.setattr(gpufleet.infra.offline, "evaluate", t.hook("evaluate"))
    monkeypatch.setattr(gpufleet.infra.automation, "up", t.hook("pulumi up", {}))
    monkeypatch.setattr(gpufleet.sandbox.platform, "prepare", t.hook("platform.prepare"))
    monkeypatch.setattr(gpufleet.sandbox.cluster, "up", t.hook("cluster.up", []))
    monkeypatch.setattr(gpufleet.cli.cluster, "sandbox_report", t.hook("sandbox_report", []))
    return t


def inventories(tmp_path: Path) -> list[str]:
    root = tmp_path / "inventories"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize(("argv", "code", "prefix"), [
    # One error contract: exit 1 and the same "- <problem>" lines under an "error: <kind>" heading.
    (["converge"], 1, "- "),
    (["converge", "--check", "--diff"], 1, "- "),
    (["up"], 1, "- "),
    (["status"], 1, "- "),
    (["plan"], 1, "- "),
    (["lock", "check"], 1, "- "),
])
@pytest.mark.parametrize("backend", ["local", "existing"])
def test_invalid_lock_stops_every_command_before_anything_is_touched(
        argv: list[str], code: int, prefix: str, backend: str, tmp_path: Path, touched: Touched) -> None:
    path = write_stack(tmp_path, backend)
    result = runner.invoke(app, [*argv, "--stack", str(path)])
    assert result.exit_code == code, result.output
    assert f"{prefix}{problem(path)}" in result.output.splitlines()
    assert touched.calls == []
    assert inventories(tmp_path) == []


def test_valid_lock_reaches_the_playbook(tmp_path: Path, touched: Touched) -> None:
    """The hooks above are the real ones: with a valid lock, converge writes the inventory and runs."""
    path = write_stack(tmp_path, "local", versions="")
    result = runner.invoke(app, ["converge", "--stack", str(path)])
    assert result.exit_code == 0, result.output
    assert touched.calls == ["run_playbook"]
    assert "lab-local/group_vars/all/versions.yml" in inventories(tmp_path)


def test_valid_lock_reaches_pulumi_and_the_plan(tmp_path: Path, touched: Touched) -> None:
    path = write_stack(tmp_path, "existing", versions="")
    runner.invoke(app, ["up", "--stack", str(path)])
    assert touched.calls[0] == "pulumi up"
    touched.calls.clear()
    runner.invoke(app, ["plan", "--stack", str(path)])
    assert touched.calls == ["evaluate"]

"""``gpufleet lock show`` / ``check`` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.lock import app

runner = CliRunner()

STACK = """\
config:
  gpufleet:backend: existing
  gpufleet:lock:
    profile: h100-cuda12.8
    versions: {{{versions}}}
  gpufleet:pools:
    - name: gpu
      role: gpu
      gpu: h100-sxm5-80gb
      count: 2
      power_limit: "{power}"
"""


def write_stack(tmp_path: Path, versions: str = "", power: str = "700") -> Path:
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(STACK.format(versions=versions, power=power))
    return path


def test_check_valid_stack_exits_0() -> None:
    result = runner.invoke(app, ["check", "--stack", "local"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "lock of stack local is valid (profile h100-cuda12.8, driver 570.172.08, CUDA 12.8.1)\n")


def test_check_invalid_stack_exits_1_listing_every_problem(tmp_path: Path) -> None:
    path = write_stack(tmp_path, "driver: 570.133.20, fabric_manager: 570.124.06", power="900")
    result = runner.invoke(app, ["check", "--stack", str(path)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == "error: version lock problem (2 problems)"
    assert lines[1] == (
        f"- {path}: gpufleet:lock.versions.fabric_manager = '570.124.06': fabric manager 570.124.06 must "
        f"equal "
        "driver 570.133.20. Fix: set versions.fabric_manager to 570.133.20 or remove the override")
    assert lines[2].startswith(
        f"- {path}: gpufleet:pools[0].power_limit = '900': power limit '900' = 900 W is outside")


def test_show_table_marks_overrides(tmp_path: Path) -> None:
    result = runner.invoke(app, ["show", "--stack", str(write_stack(tmp_path, "driver: 570.133.20"))])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in result.output.splitlines() if line.count("│") == 4}
    assert rows["driver"] == ["570.133.20", "override"]
    assert rows["fabric_manager"] == ["570.133.20", "= driver"]
    assert rows["cuda"] == ["12.8.1", "profile"]


def test_show_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["show", "--stack", str(write_stack(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["stack"], data["profile"], data["driver"], data["nccl"], data["kernel"]) == (
        "lab", "h100-cuda12.8", "570.172.08", "2.26.2-1+cuda12.8", None)


def test_missing_stack_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", "--stack", "no-such-stack"])
    assert result.exit_code == 1
    assert "stack file not found" in result.output

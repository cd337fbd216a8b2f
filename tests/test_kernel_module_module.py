"""The kernel_module module on a stand-in modules list: loaded means nothing to do, missing is a change in check
mode and a warning without load, an unwritten stand-in list is not checked (containers without one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "kernel_module.py"
LIST = "mlx5_ib 479232 0 - Live 0x0000000000000000\nnvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\n"


def run(args: dict[str, Any], check: bool = False) -> dict[str, Any]:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True, text=True,
                          check=False)
    return dict(json.loads(proc.stdout))


def test_loaded_missing_and_unchecked(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.write_text(LIST)
    loaded = run({"name": "nvidia-peermem", "modules_file": str(modules)}, check=True)
    assert loaded["changed"] is False and loaded["loaded"] is True and loaded["name"] == "nvidia_peermem"
    modules.write_text(LIST.splitlines()[0] + "\n")
    missing = run({"name": "nvidia_peermem", "modules_file": str(modules)}, check=True)
    assert missing["changed"] is True and missing["loaded"] is False
    read_only = run({"name": "nvidia_peermem", "modules_file": str(modules), "load": False})
    assert read_only["changed"] is False and "loads at the next boot" in json.dumps(read_only["warnings"])
    unwritten = run({"name": "nvidia_peermem", "modules_file": str(tmp_path / "absent")}, check=True)
    assert unwritten["changed"] is False and unwritten["present"] is False

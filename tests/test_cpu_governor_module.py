"""The cpu_governor module on a stand-in cpufreq tree: reads every CPU, sets only those that differ, check mode and
apply false change nothing, a tree without cpufreq (VMs) is not an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "cpu_governor.py"


def tree(tmp: Path, governors: list[str]) -> Path:
    for i, g in enumerate(governors):
        d = tmp / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(g + "\n")
    (tmp / "cpufreq").mkdir()  # the policy directory next to the CPUs is not a CPU
    return tmp


def run(args: dict[str, Any], check: bool = False) -> dict[str, Any]:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True, text=True,
                          check=False)
    return dict(json.loads(proc.stdout))


def governors(root: Path, n: int) -> list[str]:
    return [(root / f"cpu{i}" / "cpufreq" / "scaling_governor").read_text().strip() for i in range(n)]


def test_sets_only_the_cpus_that_differ_then_is_idempotent(tmp_path: Path) -> None:
    root = tree(tmp_path, ["performance", "powersave", "performance", "schedutil"])
    checked = run({"governor": "performance", "sysfs": str(root)}, check=True)
    assert checked["changed"] is True and checked["differing"] == {"cpu1": "powersave", "cpu3": "schedutil"}
    assert governors(root, 4)[1] == "powersave"
    read_only = run({"governor": "performance", "sysfs": str(root), "apply": False})
    assert read_only["changed"] is False and read_only["differing"] == checked["differing"]
    assert governors(root, 4)[1] == "powersave"
    done = run({"governor": "performance", "sysfs": str(root)})
    assert done["changed"] is True and governors(root, 4) == ["performance"] * 4
    again = run({"governor": "performance", "sysfs": str(root)})
    assert again["changed"] is False and again["differing"] == {} and again["cpus"] == 4


def test_no_cpufreq_is_nothing_to_do(tmp_path: Path) -> None:
    res = run({"governor": "performance", "sysfs": str(tmp_path / "absent")})
    assert res["changed"] is False and res["present"] is False and res["cpus"] == 0

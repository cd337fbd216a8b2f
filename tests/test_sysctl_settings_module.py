"""The sysctl_settings module on a scratch tree: the file holds exactly the settings, running values are compared
field by field and set with ``sysctl -w`` (a stand-in on PATH records the calls), check mode touches nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_managed_files_module import RUN_MODULE

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "sysctl_settings.py"
SETTINGS = {"vm.max_map_count": 1048576, "net.ipv4.tcp_rmem": "4096 87380 67108864", "kernel.numa_balancing": 0}
FILE = "vm.max_map_count=1048576\nnet.ipv4.tcp_rmem=4096 87380 67108864\nkernel.numa_balancing=0\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes the file as root:root")


def _proc(root: Path, values: dict[str, str]) -> None:
    for name, value in values.items():
        p = root.joinpath(*name.split("."))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(value + "\n")


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    proc, bin_dir = tmp_path / "proc", tmp_path / "bin"
    _proc(proc, {"vm.max_map_count": "65530", "net.ipv4.tcp_rmem": "4096\t87380\t67108864",
                 "kernel.numa_balancing": "1"})
    bin_dir.mkdir()
    log = tmp_path / "sysctl.log"
    # sysctl -w name=value: record the call and write the value where the kernel would show it.
    (bin_dir / "sysctl").write_text(
        "#!/bin/sh\n[ \"$1\" = -w ] || exit 2\necho \"$2\" >> " + str(log) + "\n"
        "name=${2%%=*}; value=${2#*=}\n"
        "printf '%s\\n' \"$value\" > " + str(proc) + "/$(echo \"$name\" | tr . /)\n")
    (bin_dir / "sysctl").chmod(0o755)
    return {"proc": proc, "bin": bin_dir, "log": log, "file": tmp_path / "etc" / "sysctl.d" / "90-gpufleet.conf"}


def run(tree: dict[str, Path], *, check: bool = False, apply: bool = True,
        settings: dict[str, Any] | None = None) -> dict[str, Any]:
    args = {"settings": SETTINGS if settings is None else settings, "path": str(tree["file"]), "apply": apply,
            "proc_root": str(tree["proc"]), "_ansible_check_mode": check, "_ansible_diff": True}
    env = {**os.environ, "PATH": f"{tree['bin']}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          check=False, env=env)
    return dict(json.loads(proc.stdout))


def calls(tree: dict[str, Path]) -> list[str]:
    return tree["log"].read_text().splitlines() if tree["log"].exists() else []


def test_writes_the_file_sets_what_differs_then_is_idempotent(tree: dict[str, Path]) -> None:
    first = run(tree)
    assert first["changed"] and first["file_changed"]
    assert tree["file"].read_text() == FILE
    assert oct(tree["file"].stat().st_mode & 0o7777) == "0o644"
    # tcp_rmem runs with tabs between its fields: the same value, not set again.
    assert calls(tree) == ["vm.max_map_count=1048576", "kernel.numa_balancing=0"]
    by_name = {s["name"]: s for s in first["settings"]}
    assert by_name["vm.max_map_count"] == {"name": "vm.max_map_count", "value": "1048576", "changed": True,
                                           "file": True, "running": True, "was": "65530"}
    assert by_name["net.ipv4.tcp_rmem"]["running"] is False
    again = run(tree)
    assert not again["changed"] and not again["file_changed"] and again["diff"] == []
    assert len(calls(tree)) == 2


def test_check_mode_reports_and_touches_nothing(tree: dict[str, Path]) -> None:
    result = run(tree, check=True)
    assert result["changed"] and not tree["file"].exists() and calls(tree) == []
    assert [d["before_header"] for d in result["diff"]] == [str(tree["file"]), f"{tree['proc']} (running)"]
    assert "vm.max_map_count=65530" in result["diff"][1]["before"]


def test_a_changed_and_a_deleted_line_name_their_settings(tree: dict[str, Path]) -> None:
    run(tree)
    # As molecule/host_tuning's break does it.
    tree["file"].write_text(FILE.replace("1048576", "65530").replace("kernel.numa_balancing=0\n", ""))
    result = run(tree, apply=False)
    assert result["changed"] and tree["file"].read_text() == FILE
    assert [s["name"] for s in result["settings"] if s["changed"]] == ["vm.max_map_count", "kernel.numa_balancing"]


def test_without_apply_the_running_kernel_is_not_read(tree: dict[str, Path]) -> None:
    result = run(tree, apply=False)
    assert result["changed"] and calls(tree) == []
    assert all(s["running"] is False and s["was"] is None for s in result["settings"])


def test_a_foreign_line_in_the_file_is_drift(tree: dict[str, Path]) -> None:
    run(tree)
    tree["file"].write_text(FILE + "net.core.somaxconn=4096\n")
    result = run(tree)
    assert result["changed"] and result["file_changed"] and not any(s["changed"] for s in result["settings"])
    assert tree["file"].read_text() == FILE


@pytest.mark.parametrize(("settings", "message"), [
    ({"vm max_map_count": 1}, "is not a sysctl name"),
    ({"vm.max_map_count": "1\n2"}, "must be one non-empty line"),
    ({"vm.max_map_count": " "}, "must be one non-empty line"),
])
def test_bad_input_fails_before_anything_is_touched(tree: dict[str, Path], settings: dict[str, Any],
                                                    message: str) -> None:
    result = run(tree, settings={"kernel.numa_balancing": 0, **settings})
    assert result["failed"] and message in result["msg"]
    assert not tree["file"].exists() and calls(tree) == []


def test_names_map_to_proc_sys_as_sysctl_reads_them() -> None:
    import importlib.util

    import ansible.module_utils

    utils = str(MODULE.parents[1] / "module_utils")
    if utils not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(utils)
    spec = importlib.util.spec_from_file_location("sysctl_settings", MODULE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.proc_path("vm.max_map_count", "/p") == "/p/vm/max_map_count"
    # A dot inside one level (a VLAN interface) is written as a slash in the dotted form.
    assert mod.proc_path("net.ipv4.conf.eth0/100.rp_filter", "/p") == "/p/net/ipv4/conf/eth0.100/rp_filter"
    assert mod.proc_path("net/ipv4/ip_forward", "/p") == "/p/net/ipv4/ip_forward"
    assert mod.file_values("# c\n; c\n\n a.b = 1 2 \na.b=3\n") == {"a.b": "3"}

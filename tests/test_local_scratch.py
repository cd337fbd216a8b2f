"""local_scratch planning against lsblk captures: which drives, refusals naming drive and content, commands, UUIDs.

The captures under tests/fixtures/lsblk/ are written by hand in the exact shape util-linux 2.38 prints for
``lsblk --json --bytes -o NAME,PATH,TYPE,FSTYPE,LABEL,UUID,PTTYPE,MOUNTPOINTS,SIZE,MODEL`` (checked against a
real 2.38.1 lsblk: lower-case keys, nulls, ``mountpoints`` as an array with ``[null]``, integer sizes); no real
capture of these boards' drives is in ../shared/fixtures/real/. The device layouts follow the vendors' documented
configurations (DGX H100: two M.2 boot drives in RAID 1, eight U.2 data drives; AWS p5.48xlarge: EBS root, eight
instance-store drives).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ansible.module_utils
from gpufleet import REPO_ROOT
from gpufleet.module_utils.local_scratch import LsblkError, holds, mdadm_uuid, parse_lsblk, plan

FIXTURES = Path(__file__).parent / "fixtures" / "lsblk"
DATA = [f"/dev/nvme{i}n1" for i in range(2, 10)]


def load(name: str) -> list[dict[str, Any]]:
    return parse_lsblk((FIXTURES / name).read_text())


def test_empty_dgx_drives_auto_selects_the_eight_data_drives_and_skips_the_boot_mirror() -> None:
    p = plan(load("dgx-h100_8-empty-u2.json"), [])
    assert p["error"] is None and p["devices"] == DATA and not p["present"]
    assert p["skipped"] == {
        "/dev/nvme0n1": "a gpt partition table (2 partitions); mounted at /boot/efi, /",
        "/dev/nvme1n1": "a gpt partition table (2 partitions); mounted at /",
    }
    assert p["commands"] == [
        ["mdadm", "--create", "/dev/md/scratch", "--run", "--level=0", "--metadata=1.2", "--name=scratch",
         "--raid-devices=8", *DATA],
        ["mkfs.xfs", "-L", "scratch", "/dev/md/scratch"],
    ]
    assert p["array_line"] is None and p["fstab_src"] is None


def test_existing_scratch_array_is_recognised_with_its_uuids() -> None:
    for devices in ([], DATA, list(reversed(DATA))):
        p = plan(load("dgx-h100_8-u2-scratch-raid0-mounted.json"), devices)
        assert p["error"] is None and p["present"] and p["commands"] == []
        assert p["target"] == "/dev/md127"
        assert p["array_line"] == "ARRAY /dev/md/scratch metadata=1.2 UUID=9f0c4a2e:51b37d68:a4c23e1f:0b7d9a85"
        assert p["fstab_src"] == "UUID=1d4e7f2a-6b3c-4e59-8a17-c0d2e3f4a5b6"


def test_existing_array_over_other_drives_is_refused() -> None:
    p = plan(load("dgx-h100_8-u2-scratch-raid0-mounted.json"), DATA[:4])
    assert p["error"] is not None and "already spans ['/dev/nvme2n1'" in p["error"]
    assert "cannot be grown or shrunk" in p["error"] and p["commands"] == []


def test_listed_drives_that_hold_something_are_refused_naming_each() -> None:
    devs = load("p5-48xlarge_instance-store_mixed.json")
    listed = [f"/dev/nvme{i}n1" for i in range(1, 9)]
    p = plan(devs, listed)
    err = p["error"]
    assert err is not None and p["commands"] == []
    assert err.startswith(f"local_scratch: local_scratch_devices={listed}: ")
    assert "/dev/nvme1n1 holds a file system (xfs), mounted at /data" in err
    assert "/dev/nvme2n1 holds a gpt partition table (0 partitions)" in err
    assert "/dev/nvme3n1 holds a RAID member signature (array name ip-10-0-1-17:1, not assembled)" in err
    # the mounted drive makes force useless: the fix says so
    assert "unmount or stop what uses /dev/nvme1n1 first" in err and "Nothing was changed." in err
    assert sorted(p["refused"]) == listed[:3]


def test_force_wipes_unused_drives_but_never_a_mounted_one() -> None:
    devs = load("p5-48xlarge_instance-store_mixed.json")
    listed = [f"/dev/nvme{i}n1" for i in range(2, 9)]
    p = plan(devs, listed)
    assert p["error"] is not None and "set local_scratch_force: true to wipe them" in p["error"]
    forced = plan(devs, listed, force=True)
    assert forced["error"] is None
    assert forced["commands"][:2] == [["wipefs", "--all", "/dev/nvme2n1"], ["wipefs", "--all", "/dev/nvme3n1"]]
    assert forced["commands"][2][:2] == ["mdadm", "--create"] and forced["commands"][2][-7:] == listed
    mounted = plan(devs, ["/dev/nvme1n1", "/dev/nvme4n1"], force=True)
    assert mounted["error"] is not None and "refused even with local_scratch_force" in mounted["error"]


def test_auto_mode_on_p5_takes_only_the_empty_instance_store_drives() -> None:
    p = plan(load("p5-48xlarge_instance-store_mixed.json"), [])
    assert p["devices"] == [f"/dev/nvme{i}n1" for i in range(4, 9)]
    assert set(p["skipped"]) == {"/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1", "/dev/nvme3n1"}


def test_single_drive_without_raid_and_its_refusals() -> None:
    devs = load("pcie-server_1-nvme-ext4.json")
    p = plan(devs, ["/dev/nvme1n1"], raid0=False)
    assert p["error"] is not None and "/dev/nvme1n1 holds a file system (ext4)" in p["error"]
    forced = plan(devs, ["/dev/nvme1n1"], raid0=False, force=True)
    assert forced["commands"] == [["wipefs", "--all", "/dev/nvme1n1"], ["mkfs.xfs", "-L", "scratch", "/dev/nvme1n1"]]
    two = plan(load("dgx-h100_8-empty-u2.json"), DATA[:2], raid0=False)
    assert two["error"] is not None and "without RAID 0 the scratch is one drive" in two["error"]
    none_free = plan(devs, [])
    assert none_free["error"] is not None and "none is empty" in none_free["error"]
    assert "/dev/nvme1n1: a file system (ext4)" in none_free["error"]


def test_unknown_device_and_partition_are_refused() -> None:
    devs = load("dgx-h100_8-empty-u2.json")
    p = plan(devs, ["/dev/nvme12n1", "/dev/nvme0n1p2"])
    assert p["error"] is not None
    assert "/dev/nvme12n1 not found" in p["error"] and "/dev/nvme0n1p2 is a part, not a whole disk" in p["error"]


def test_mdadm_uuid_and_unreadable_lsblk() -> None:
    assert mdadm_uuid("9f0c4a2e-51b3-7d68-a4c2-3e1f0b7d9a85") == "9f0c4a2e:51b37d68:a4c23e1f:0b7d9a85"
    for bad in ("", "[]", '{"blockdevices": [{"path": "/dev/x"}]}'):
        with pytest.raises(LsblkError):
            parse_lsblk(bad)
    assert holds({"name": "nvme9n1", "type": "disk", "fstype": None, "pttype": None, "mountpoints": [None]}) == []


# --- the Ansible module, on the same captures --------------------------------------------------------------

def _module() -> ModuleType:
    utils = str(REPO_ROOT / "ansible" / "module_utils")
    if utils not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(utils)
    path = REPO_ROOT / "ansible" / "library" / "local_scratch.py"
    spec = importlib.util.spec_from_file_location("local_scratch", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_module(args: dict[str, Any], check: bool = False) -> dict[str, Any]:
    """The module as Ansible runs it (a subprocess reading its arguments), module_utils on its path."""
    # AnsibleModule reads its arguments from stdin only when the command line has none: paths go by environment.
    code = ("import os, runpy, ansible.module_utils as m; m.__path__.append(os.environ['UTILS']); "
            "runpy.run_path(os.environ['MODULE'], run_name='__main__')")
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    env = {**os.environ, "UTILS": str(REPO_ROOT / "ansible" / "module_utils"),
           "MODULE": str(REPO_ROOT / "ansible" / "library" / "local_scratch.py")}
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload), capture_output=True, text=True,
                          check=False, env=env)
    return dict(json.loads(proc.stdout))


def test_module_plans_only_without_apply_and_changes_nothing() -> None:
    _module()  # imports cleanly with the shared module_utils
    res = run_module({"lsblk_json_file": str(FIXTURES / "dgx-h100_8-empty-u2.json"), "apply": False})
    assert res["changed"] is False and res["commands"][0][:2] == ["mdadm", "--create"]
    checked = run_module({"lsblk_json_file": str(FIXTURES / "dgx-h100_8-empty-u2.json")}, check=True)
    assert checked["changed"] is True and "ran" not in checked


def test_module_refusal_is_the_plan_s_message() -> None:
    res = run_module({"lsblk_json_file": str(FIXTURES / "p5-48xlarge_instance-store_mixed.json"),
                      "devices": ["/dev/nvme1n1"], "apply": False})
    assert res["failed"] is True
    assert res["msg"].startswith(
        "local_scratch: local_scratch_devices=['/dev/nvme1n1']: /dev/nvme1n1 holds a file system (xfs)")


def test_module_existing_array_returns_its_lines() -> None:
    res = run_module({"lsblk_json_file": str(FIXTURES / "dgx-h100_8-u2-scratch-raid0-mounted.json")}, check=True)
    assert res["changed"] is False and res["present"] is True
    assert res["array_line"].endswith("UUID=9f0c4a2e:51b37d68:a4c23e1f:0b7d9a85")


def test_module_apply_runs_the_plan_in_order_then_reads_the_uuids(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """apply: the commands run in the plan's order (stand-ins on PATH record them; the real ones need drives), then
    lsblk is read again: here the mkfs stand-in swaps in the capture of the created array, as the drives would."""
    log, lsblk = tmp_path / "ran.log", tmp_path / "lsblk.json"
    lsblk.write_text((FIXTURES / "dgx-h100_8-empty-u2.json").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    after = FIXTURES / "dgx-h100_8-u2-scratch-raid0-mounted.json"
    for tool, extra in (("wipefs", ""), ("mdadm", ""), ("udevadm", ""), ("mkfs.xfs", f"cp {after} {lsblk}\n")):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n{extra}')
        stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    res = run_module({"lsblk_json_file": str(lsblk), "apply": True})
    assert res["changed"] is True and res["present"] is True
    assert log.read_text().splitlines() == [
        "mdadm --create /dev/md/scratch --run --level=0 --metadata=1.2 --name=scratch --raid-devices=8 "
        + " ".join(DATA),
        "mkfs.xfs -L scratch /dev/md/scratch",
        "udevadm settle",
    ]
    assert res["array_line"] == "ARRAY /dev/md/scratch metadata=1.2 UUID=9f0c4a2e:51b37d68:a4c23e1f:0b7d9a85"
    assert res["fstab_src"] == "UUID=1d4e7f2a-6b3c-4e59-8a17-c0d2e3f4a5b6"

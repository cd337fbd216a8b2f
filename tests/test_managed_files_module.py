"""The managed_files module on a scratch tree: only what differs is written, check mode writes nothing."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.ansible_local import RUN_MODULE

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "managed_files.py"
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def run(files: list[dict[str, Any]], check: bool = False) -> dict[str, Any]:
    for f in files:
        f.setdefault("owner", USER)
        f.setdefault("group", GROUP)
    payload = {"ANSIBLE_MODULE_ARGS": {"files": files, "_ansible_check_mode": check, "_ansible_diff": True}}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)], input=json.dumps(payload),
                          capture_output=True, text=True, check=False)
    return dict(json.loads(proc.stdout))


def test_creates_parents_then_is_idempotent(tmp_path: Path) -> None:
    dest = tmp_path / "etc" / "gpufleet" / "gpu-settings.conf"
    res = run([{"dest": str(dest), "content": "POWER_LIMIT=700\n"}])
    assert res["changed"] is True and res["changed_files"] == [str(dest)]
    assert dest.read_text() == "POWER_LIMIT=700\n"
    assert oct(dest.stat().st_mode & 0o7777) == "0o644"
    assert oct(dest.parent.stat().st_mode & 0o7777) == "0o755"
    again = run([{"dest": str(dest), "content": "POWER_LIMIT=700\n"}])
    assert again["changed"] is False and [f["state"] for f in again["files"]] == ["unchanged"]


def test_only_the_differing_file_is_rewritten_with_a_diff(tmp_path: Path) -> None:
    a, b = tmp_path / "a.conf", tmp_path / "b.sh"
    a.write_text("same\n")
    a.chmod(0o644)
    b.write_text("old\n")
    b.chmod(0o755)
    inode_a = a.stat().st_ino
    res = run([{"dest": str(a), "content": "same\n"}, {"dest": str(b), "content": "new\n", "mode": "0755"}])
    assert [f["state"] for f in res["files"]] == ["unchanged", "updated"]
    assert res["diff"] == [{"before_header": str(b), "after_header": str(b), "before": "old\n", "after": "new\n"}]
    assert b.read_text() == "new\n" and oct(b.stat().st_mode & 0o7777) == "0o755"
    assert a.stat().st_ino == inode_a


def test_mode_drift_is_fixed_in_place(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_text("x\n")
    f.chmod(0o600)
    res = run([{"dest": str(f), "content": "x\n"}])
    assert res["files"][0]["state"] == "attributes"
    assert res["files"][0]["before"]["mode"] == "0600" and res["files"][0]["after"]["mode"] == "0644"
    assert oct(f.stat().st_mode & 0o7777) == "0o644"


def test_check_mode_reports_and_writes_nothing(tmp_path: Path) -> None:
    f = tmp_path / "nccl.conf"
    f.write_text("NCCL_DEBUG=INFO\n")
    missing = tmp_path / "new" / "gres.conf"
    res = run([{"dest": str(f), "content": "NCCL_DEBUG=WARN\n"}, {"dest": str(missing), "content": "x\n"}], check=True)
    assert res["changed_files"] == [str(f), str(missing)]
    assert [d["before"] for d in res["diff"]] == ["NCCL_DEBUG=INFO\n", ""]
    assert f.read_text() == "NCCL_DEBUG=INFO\n"
    assert not missing.parent.exists()


def test_bad_input_fails_before_any_write(tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    res = run([{"dest": str(good), "content": "x\n"}, {"dest": str(tmp_path / "bad"), "content": "y", "mode": "rw"}])
    assert res.get("failed") is True
    assert "mode 'rw' is not octal" in res["msg"]
    assert not good.exists()
    res = run([{"dest": "relative/path", "content": "y"}])
    assert res.get("failed") is True and "is not absolute" in res["msg"]

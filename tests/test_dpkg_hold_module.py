"""The dpkg_hold module against a fake dpkg: one read, one write, only what differs, check mode honoured."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "dpkg_hold.py"

FAKE_DPKG_QUERY = """#!/bin/sh
# Prints the selections file for the names asked, rc 1 when one is unknown (as dpkg-query -W does).
shift 2
rc=0
for n in "$@"; do
  line=$(grep "^$n	" "$STATE")
  if [ -n "$line" ]; then printf '%s\\n' "$line"; else echo "dpkg-query: no packages found matching $n" >&2; rc=1; fi
done
exit $rc
"""

FAKE_DPKG = """#!/bin/sh
# --set-selections: record what was asked in the log and in the state file.
[ "$1" = --set-selections ] || exit 2
while read -r name sel; do
  [ -n "$name" ] || continue
  echo "$name $sel" >> "$LOG"
  sed -i "s/^$name\\t[a-z]*\\t/$name\\t$sel\\t/" "$STATE"
done
"""


@pytest.fixture()
def fake_dpkg(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("dpkg", FAKE_DPKG)):
        path = bindir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "state").write_text(
        "nvidia-utils-570\thold\tinstalled\t570.172.08-0ubuntu1\n"
        "libnvidia-compute-570\tinstall\tinstalled\t570.133.20-0ubuntu1\n"
        "old-pkg\tinstall\tconfig-files\t1.0\n")
    return tmp_path


def run(tmp: Path, args: dict[str, object], check: bool = False) -> dict[str, object]:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    env = {**os.environ, "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}",
           "STATE": str(tmp / "state"), "LOG": str(tmp / "log")}
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True,
                          text=True, env=env, check=False)
    return dict(json.loads(proc.stdout))


def test_holds_only_what_is_not_held(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["nvidia-utils-570", "libnvidia-compute-570"]})
    assert res["changed"] is True
    assert res["changed_packages"] == ["libnvidia-compute-570"]
    assert (fake_dpkg / "log").read_text() == "libnvidia-compute-570 hold\n"
    again = run(fake_dpkg, {"names": ["nvidia-utils-570", "libnvidia-compute-570"]})
    assert again["changed"] is False and again["changed_packages"] == []
    assert (fake_dpkg / "log").read_text() == "libnvidia-compute-570 hold\n"


def test_check_mode_reports_and_writes_nothing(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["libnvidia-compute-570", "missing-pkg"]}, check=True)
    assert res["changed"] is True
    assert res["changed_packages"] == ["libnvidia-compute-570", "missing-pkg"]
    assert res["diff"] == {"before": "libnvidia-compute-570 install\nmissing-pkg not installed\n",
                           "after": "libnvidia-compute-570 hold\nmissing-pkg hold\n",
                           "before_header": "dpkg selections", "after_header": "dpkg selections"}
    assert not (fake_dpkg / "log").exists()


def test_holding_a_package_that_is_not_installed_fails_and_changes_nothing(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["libnvidia-compute-570", "old-pkg"]})
    assert res.get("failed") is True
    assert "cannot hold old-pkg: not installed" in str(res["msg"])
    assert not (fake_dpkg / "log").exists()


def test_release(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["nvidia-utils-570", "missing-pkg"], "selection": "install"})
    assert res["changed_packages"] == ["nvidia-utils-570"]
    assert (fake_dpkg / "log").read_text() == "nvidia-utils-570 install\n"


def test_with_versions_only_settled_packages_are_held_and_the_rest_is_listed_as_moving(fake_dpkg: Path) -> None:
    pinned = {"nvidia-utils-570": "570.172.08-0ubuntu1", "libnvidia-compute-570": "570.172.08-0ubuntu1",
              "missing-pkg": "570.172.08-0ubuntu1"}
    (fake_dpkg / "state").write_text(
        "nvidia-utils-570\tinstall\tinstalled\t570.172.08-0ubuntu1\n"
        "libnvidia-compute-570\thold\tinstalled\t570.133.20-0ubuntu1\n")
    res = run(fake_dpkg, {"names": list(pinned), "versions": pinned})
    assert res["moving"] == ["libnvidia-compute-570", "missing-pkg"]
    assert res["changed_packages"] == ["nvidia-utils-570"]
    assert res["installed"] == {"nvidia-utils-570": "570.172.08-0ubuntu1",
                                "libnvidia-compute-570": "570.133.20-0ubuntu1", "missing-pkg": None}
    assert res["before"]["libnvidia-compute-570"] == "hold"
    assert (fake_dpkg / "log").read_text() == "nvidia-utils-570 hold\n"


def test_versions_must_cover_every_name(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["nvidia-utils-570", "x"], "versions": {"nvidia-utils-570": "1"}})
    assert res.get("failed") is True and "versions has no entry for x" in str(res["msg"])
    assert not (fake_dpkg / "log").exists()

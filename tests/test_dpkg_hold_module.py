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
# Every package of the state file, in the module's format (-W without names): name, want, status, eflag, version,
# abbrev. The state file has name, want, status, version, and optionally the eflag and the abbrev (ok, ii).
[ "$1" = -W ] || exit 2
awk -F'\\t' 'BEGIN { OFS = "\\t" } { print $1, $2, $3, ($5 == "" ? "ok" : $5), $4, ($6 == "" ? "ii" : $6) }' "$STATE"
"""

FAKE_DPKG = """#!/bin/sh
# --set-selections: record what was asked in the log and in the state file.
# --configure -a (after --force-* options): what dpkg does with an interrupted run: configure what is unpacked or
# half-configured; half-installed packages need their files again and stay (rc 1, as for dpkg's "dependency
# problems"); the journal is folded into the database.
case "$*" in
  --set-selections)
    while read -r name sel; do
      [ -n "$name" ] || continue
      echo "$name $sel" >> "$LOG"
      sed -i "s/^$name\\t[a-z]*\\t/$name\\t$sel\\t/" "$STATE"
    done ;;
  *"--configure -a")
    echo "$DEBIAN_FRONTEND dpkg $*" >> "$LOG"
    awk -F'\\t' 'BEGIN { OFS = "\\t" } $3 == "unpacked" || $3 == "half-configured" { $3 = "installed"; $6 = "ii" }
                 { print }' "$STATE" > "$STATE.new" && mv "$STATE.new" "$STATE"
    rm -f "$DPKG_ADMINDIR"/updates/0*
    ! grep -q "half-installed" "$STATE" ;;
  *) exit 2 ;;
esac
"""


FAKE_APT_GET = """#!/bin/sh
# install --reinstall NAME=VERSION...: log the call; each package installed at its version, then what is unpacked
# configured, as apt does.
echo "$DEBIAN_FRONTEND apt-get $*" >> "$LOG"
for a in "$@"; do
  case "$a" in *=*) n=${a%%=*}; v=${a#*=}
    awk -F'\\t' -v n="$n" -v v="$v" 'BEGIN { OFS = "\\t" } $1 == n { $3 = "installed"; $4 = v; $5 = "ok"; $6 = "ii" }
      { print }' "$STATE" > "$STATE.new" && mv "$STATE.new" "$STATE" ;;
  esac
done
awk -F'\\t' 'BEGIN { OFS = "\\t" } $3 == "unpacked" { $3 = "installed"; $6 = "ii" } { print }' "$STATE" > "$STATE.new"
mv "$STATE.new" "$STATE"
"""


@pytest.fixture()
def fake_dpkg(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("dpkg", FAKE_DPKG), ("apt-get", FAKE_APT_GET)):
        path = bindir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "state").write_text(
        "nvidia-utils-570\thold\tinstalled\t570.172.08-0ubuntu1\n"
        "libnvidia-compute-570\tinstall\tinstalled\t570.133.20-0ubuntu1\n"
        "old-pkg\tinstall\tconfig-files\t1.0\n")
    (tmp_path / "admin" / "updates").mkdir(parents=True)
    return tmp_path


def run(tmp: Path, args: dict[str, object], check: bool = False) -> dict[str, object]:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    env = {**os.environ, "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}",
           "STATE": str(tmp / "state"), "LOG": str(tmp / "log"), "DPKG_ADMINDIR": str(tmp / "admin")}
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


# What the dpkg_interrupt scenario leaves (apt killed while dpkg unpacked the driver): the metapackage unpacked at the
# new version (iU), nvidia-utils half-installed over the old one (iHR), and an unpacked package the task does not
# name (a dependency: configured by `dpkg --configure -a`); dpkg's journal not folded in yet.
INTERRUPTED = ("nvidia-driver-570-open\tinstall\tunpacked\t570.172.08-0ubuntu1\tok\tiU\n"
               "nvidia-utils-570\tinstall\thalf-installed\t570.133.20-0ubuntu1\treinstreq\tiHR\n"
               "libnvidia-common-570\tinstall\tunpacked\t570.172.08-0ubuntu1\tok\tiU\n"
               "libnvidia-compute-570\thold\tinstalled\t570.172.08-0ubuntu1\n")
DRIVER = {"nvidia-driver-570-open": "570.172.08-0ubuntu1", "nvidia-utils-570": "570.172.08-0ubuntu1",
          "libnvidia-compute-570": "570.172.08-0ubuntu1"}


def _interrupt(tmp: Path, state: str = INTERRUPTED) -> None:
    (tmp / "state").write_text(state)
    (tmp / "admin" / "updates" / "0003").write_text("Package: nvidia-utils-570\n")


def test_a_clean_host_runs_no_recovery(fake_dpkg: Path) -> None:
    res = run(fake_dpkg, {"names": ["nvidia-utils-570"], "recover": True})
    assert (res["changed"], res["recovered"], res["interrupted"]) == (False, False, {})
    assert "gpufleet_notice" not in res and not (fake_dpkg / "log").exists()


def test_an_interrupted_run_is_finished_the_way_apt_runs_dpkg_then_what_is_still_half_done_moves(
        fake_dpkg: Path) -> None:
    _interrupt(fake_dpkg)
    res = run(fake_dpkg, {"names": list(DRIVER), "versions": DRIVER, "recover": True})
    assert res["changed"] is True and res["recovered"] is True
    assert (fake_dpkg / "log").read_text().splitlines()[0] == (
        "noninteractive dpkg --force-confdef --force-confold --configure -a")
    assert not list((fake_dpkg / "admin" / "updates").iterdir())
    # The states as found, for drift and the summary; the rest as read after the recovery.
    assert res["interrupted"]["nvidia-utils-570"] == {"version": "570.133.20-0ubuntu1", "selection": "install",
                                                      "status": "half-installed", "reinst_required": True,
                                                      "abbrev": "iHR"}
    assert res["gpufleet_notice"] == {
        "event": "recovered interrupted dpkg",
        "detail": "libnvidia-common-570 570.172.08-0ubuntu1 (iU), nvidia-driver-570-open 570.172.08-0ubuntu1 (iU), "
                  "nvidia-utils-570 570.133.20-0ubuntu1 (iHR)"}
    assert res["status"] == {"nvidia-driver-570-open": "installed", "nvidia-utils-570": "half-installed",
                             "libnvidia-compute-570": "installed"}
    # Configured at its pinned version now: held; half-installed: apt reinstalls it (moving), held after that.
    assert res["moving"] == ["nvidia-utils-570"]
    assert res["changed_packages"] == ["nvidia-driver-570-open"]
    # Once apt has reinstalled it, the next package role's read finds dpkg clean: once per host per run.
    state = (fake_dpkg / "state").read_text()
    (fake_dpkg / "state").write_text(state.replace("half-installed\t570.133.20-0ubuntu1\treinstreq\tiHR",
                                                   "installed\t570.172.08-0ubuntu1\tok\tii"))
    again = run(fake_dpkg, {"names": list(DRIVER), "versions": DRIVER, "recover": True})
    assert (again["recovered"], again["interrupted"], again["moving"]) == (False, {}, [])
    assert (fake_dpkg / "log").read_text().count("--configure -a") == 1


def test_a_package_half_installed_at_its_pinned_version_is_reinstalled_at_it(fake_dpkg: Path) -> None:
    # A reinstall killed in nvidia-utils' unpack (the scenario's side_effect): apt sees it at the pinned version and
    # would configure the metapackage that depends on it first, which fails; the module reinstalls it.
    _interrupt(fake_dpkg, INTERRUPTED.replace("nvidia-utils-570\tinstall\thalf-installed\t570.133.20-0ubuntu1",
                                              "nvidia-utils-570\tinstall\thalf-installed\t570.172.08-0ubuntu1"))
    res = run(fake_dpkg, {"names": list(DRIVER), "versions": DRIVER, "recover": True})
    assert res["recovered"] is True and res["moving"] == []
    log = (fake_dpkg / "log").read_text().splitlines()
    assert log[:2] == ["noninteractive dpkg --force-confdef --force-confold --configure -a",
                       "noninteractive apt-get install -y -q --reinstall --allow-change-held-packages "
                       "--no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "
                       "-o DPkg::Lock::Timeout=60 nvidia-utils-570=570.172.08-0ubuntu1"]
    assert res["status"]["nvidia-utils-570"] == "installed"  # type: ignore[index]
    assert sorted(res["changed_packages"]) == ["nvidia-driver-570-open", "nvidia-utils-570"]  # type: ignore[call-overload]


def test_check_mode_reports_the_recovery_and_runs_nothing(fake_dpkg: Path) -> None:
    _interrupt(fake_dpkg)
    res = run(fake_dpkg, {"names": list(DRIVER), "versions": DRIVER, "recover": True}, check=True)
    assert res["changed"] is True and res["recovered"] is True
    assert res["gpufleet_notice"]["event"] == "would recover interrupted dpkg"  # type: ignore[index]
    assert res["moving"] == ["nvidia-driver-570-open", "nvidia-utils-570"]
    assert not (fake_dpkg / "log").exists() and (fake_dpkg / "state").read_text() == INTERRUPTED
    assert list((fake_dpkg / "admin" / "updates").iterdir())


def test_dpkg_s_journal_alone_is_an_interrupted_run(fake_dpkg: Path) -> None:
    (fake_dpkg / "admin" / "updates" / "0000").write_text("")
    res = run(fake_dpkg, {"names": ["nvidia-utils-570"], "recover": True})
    assert res["recovered"] is True and res["interrupted"] == {}
    assert res["gpufleet_notice"] == {"event": "recovered interrupted dpkg", "detail": "dpkg's journal only"}
    assert not list((fake_dpkg / "admin" / "updates").iterdir())


def test_what_the_recovery_leaves_half_done_outside_the_task_s_packages_fails_it(fake_dpkg: Path) -> None:
    _interrupt(fake_dpkg, INTERRUPTED.replace("libnvidia-common-570\tinstall\tunpacked\t570.172.08-0ubuntu1\tok\tiU",
                                              "libnvidia-common-570\tinstall\thalf-installed\t570.133.20-0ubuntu1"
                                              "\treinstreq\tiHR"))
    res = run(fake_dpkg, {"names": list(DRIVER), "versions": DRIVER, "recover": True})
    assert res.get("failed") is True
    assert "left libnvidia-common-570 570.133.20-0ubuntu1 (iHR) unfinished" in str(res["msg"])
    assert "Fix: run `dpkg --configure -a` on the host, fix what `dpkg --audit` reports" in str(res["msg"])


def test_documentation_parses_and_documents_every_option() -> None:
    import ast

    import yaml
    tree = ast.parse(MODULE.read_text())
    docs = {t.id: yaml.safe_load(n.value.value) for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "RETURN")
            and isinstance(n.value, ast.Constant)}
    assert set(docs["DOCUMENTATION"]["options"]) == {"names", "selection", "read_only", "versions", "recover"}
    assert {"interrupted", "recovered", "gpufleet_notice", "moving", "status"} <= set(docs["RETURN"])


def test_adoption_packages_at_the_pinned_version_from_another_source_are_held_without_apt(fake_dpkg: Path) -> None:
    # Issue 28 point 4: a host set up by NVIDIA's install guide has the driver from the cuda-keyring source, nothing
    # held. pinned_packages' dpkg read takes over what is at the pinned version by holding it: dpkg only (the pin in
    # apt's preferences names no origin), no reinstall, and no apt at all, which on such a host may still refuse its
    # sources ("Conflicting values set for option Signed-By").
    apt_get = fake_dpkg / "bin" / "apt-get"
    apt_get.write_text("#!/bin/sh\necho \"apt-get $*\" >> \"$LOG\"\n"
                       "echo 'E: Conflicting values set for option Signed-By' >&2\nexit 100\n")
    pinned = {"nvidia-utils-570": "570.172.08-0ubuntu1", "libnvidia-compute-570": "570.172.08-0ubuntu1"}
    (fake_dpkg / "state").write_text("nvidia-utils-570\tinstall\tinstalled\t570.172.08-0ubuntu1\n"
                                     "libnvidia-compute-570\tinstall\tinstalled\t570.172.08-0ubuntu1\n")
    res = run(fake_dpkg, {"names": list(pinned), "versions": pinned, "recover": True})
    assert res["moving"] == [] and res["changed_packages"] == list(pinned)
    assert (fake_dpkg / "log").read_text() == "".join(f"{n} hold\n" for n in pinned)
    assert (fake_dpkg / "state").read_text() == ("nvidia-utils-570\thold\tinstalled\t570.172.08-0ubuntu1\n"
                                                 "libnvidia-compute-570\thold\tinstalled\t570.172.08-0ubuntu1\n")

"""Adoption of a driver another source installed (issue 28, docs/audit.md "Adoption"): roles/nvidia_driver refuses
Debian's own driver where it would install NVIDIA's, with one message (what, why, the fix), before anything changes;
NVIDIA's own packages (at any version) are not refused: the pinned install takes them over or moves them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpufleet.lock.packages import DISTRO_DRIVER, DISTRO_DRIVER_SOURCE, DRIVER_USERSPACE, driver_names
from tests.ansible_local import local_host, run_playbook

#: What `dpkg-query -W -f='${db:Status-Status} ${source:Package} ${Package} ${Version}\n'` prints on the audit
#: scenario's debian_nonfree node (molecule/shared/foreign_kinds.yml: bookworm's 535.261.03-1), plus NVIDIA's
#: Ubuntu-style package, a package removed with its configuration left, and one unrelated package.
DEBIAN = "535.261.03-1"
SMI, ML, CUDA = DISTRO_DRIVER[2], DISTRO_DRIVER[3], DISTRO_DRIVER[4]
(SOURCE,) = DISTRO_DRIVER_SOURCE
NVIDIA_UTILS = next(n for n in driver_names(570, "open") if n.startswith(DRIVER_USERSPACE))
DPKG_DEBIAN = (f"installed {SOURCE} {SMI} {DEBIAN}\n"
               f"installed {SOURCE} {CUDA} {DEBIAN}\n"
               f"config-files {SOURCE} {ML} {DEBIAN}\n"
               "installed coreutils coreutils 9.1-1\n")
DPKG_NVIDIA = (f"installed {SOURCE}-570 {NVIDIA_UTILS} 570.133.20-0ubuntu1\n"
               "installed coreutils coreutils 9.1-1\n")


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dpkg: str) -> tuple[int, str]:
    fake = tmp_path / "bin"
    fake.mkdir()
    (tmp_path / "dpkg.txt").write_text(dpkg)
    query = fake / "dpkg-query"
    query.write_text(f"#!/bin/sh\ncat {tmp_path / 'dpkg.txt'}\n")
    query.chmod(query.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    hosts = {"node-0": local_host(ansible_become=False, nvidia_driver_version="570.172.08")}
    res = run_playbook(tmp_path, "nvidia_driver_preflight_foreign.yml", {"all": {"hosts": hosts}})
    return res.returncode, res.stdout + res.stderr


def test_debians_own_driver_is_refused_with_what_why_and_the_fix(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out = _run(tmp_path, monkeypatch, DPKG_DEBIAN)
    log = " ".join(out.split())
    assert rc == 2, out
    assert "Traceback" not in out
    # what: the installed packages of Debian's source package (not the one removed with its configuration left)
    assert f"node-0 runs the distribution's own NVIDIA driver ({SMI} {DEBIAN}, {CUDA} {DEBIAN}; source package " \
           f"{SOURCE})" in log, log
    assert f"{ML} {DEBIAN}" not in log
    # why, and that nothing changed
    assert "install driver 570.172.08 from NVIDIA's CUDA repository" in log and "Nothing was changed." in log
    # the fix, both ways, with the host's own versions and names
    assert f"drain the node, remove them (apt-get purge {SMI} {CUDA}) and converge again" in log
    assert (f"nvidia_driver_source: distro, nvidia_driver_version: 535.261.03, nvidia_driver_branch: 535, "
            f"nvidia_driver_distro_version: {DEBIAN}, nvidia_driver_distro_packages: [{SMI}, {CUDA}].") in log
    assert log.count("runs the distribution's own NVIDIA driver") == 1


def test_nvidias_own_packages_at_another_version_are_not_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The install guide's and NVIDIA's role's nodes: the pinned install takes these over or moves them.
    rc, out = _run(tmp_path, monkeypatch, DPKG_NVIDIA)
    assert rc == 0, out
    assert "failed=0" in out


def test_the_refusal_runs_in_the_preflight_before_the_repository() -> None:
    # Before nvidia_repo (which replaces sources): a refused host is left exactly as it was.
    root = Path(__file__).resolve().parents[1] / "roles" / "nvidia_driver" / "tasks"
    main = (root / "main.yml").read_text()
    assert main.index("preflight.yml") < main.index("name: nvidia_repo")
    pre = (root / "preflight.yml").read_text()
    assert "import_tasks: preflight_foreign.yml" in pre and "when: nvidia_driver_source == 'cuda_repo'" in pre

"""The one install path (roles/pinned_packages/tasks/install.yml), run for real with ansible-playbook on localhost in
check mode against a fake dpkg: package state comes from dpkg whatever the apt source's state (issue 13 point 1).

An edited or untrusted apt source makes nvidia_repo report the source not ready in check mode; packages installed
at the pinned version and held must then stay quiet (no "would install", so the host is not marked for a drain), and
only what dpkg shows at another version is reported, with its installed version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from tests.test_dpkg_hold_module import FAKE_DPKG, FAKE_DPKG_QUERY

PINNED = [{"name": "libnccl2", "version": "2.26.2-1+cuda12.8"}, {"name": "libnccl-dev", "version": "2.26.2-1+cuda12.8"}]


def converge_check(tmp_path: Path, state: str, *, source_ready: bool) -> dict[str, dict[str, Any]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("dpkg", FAKE_DPKG)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    (tmp_path / "state").write_text(state)
    # A caller role, as the package roles use it: meta dependency for the defaults, import of the task file.
    caller = tmp_path / "roles" / "caller"
    (caller / "meta").mkdir(parents=True, exist_ok=True)
    (caller / "tasks").mkdir(exist_ok=True)
    (caller / "meta" / "main.yml").write_text(yaml.safe_dump({"dependencies": [{"role": "pinned_packages"}]}))
    (caller / "tasks" / "main.yml").write_text(yaml.safe_dump([{
        "name": "Install", "ansible.builtin.import_tasks": "../../pinned_packages/tasks/install.yml",
        "vars": {"pinned_packages_component": "nccl-test", "pinned_packages_list": PINNED,
                 "pinned_packages_comment": "test", "pinned_packages_source_ready": source_ready}}]))
    (tmp_path / "roles" / "pinned_packages").symlink_to(REPO_ROOT / "roles" / "pinned_packages")
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Shared install path", "hosts": "localhost", "gather_facts": False, "connection": "local",
        "roles": [{"role": "caller"}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible" / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"), ANSIBLE_FACT_CACHING="memory",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_BECOME="false",
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"), PATH=f"{bindir}:{os.environ['PATH']}",
               STATE=str(tmp_path / "state"), LOG=str(tmp_path / "log"))
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--check", str(playbook),
           "-e", json.dumps({"ansible_become": False, "ansible_python_interpreter": sys.executable})]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(r.stdout)
    # Task names carry the importing role ("caller : ..."): the tasks report under the package role that imports them.
    tasks = {t["task"]["name"]: t["hosts"].get("localhost", {"skipped": True})
             for play in out["plays"] for t in play["tasks"]}
    assert all(name.startswith("caller : ") for name in tasks), list(tasks)
    return {name.removeprefix("caller : "): res for name, res in tasks.items()}


HELD = ("libnccl2\thold\tinstalled\t2.26.2-1+cuda12.8\n"
        "libnccl-dev\thold\tinstalled\t2.26.2-1+cuda12.8\n")


@pytest.mark.slow
def test_installed_and_held_packages_stay_quiet_when_the_source_is_not_ready(tmp_path: Path) -> None:
    tasks = converge_check(tmp_path, HELD, source_ready=False)
    state = tasks["Hold the packages already at the pinned version, and find those that must move"]
    assert state["moving"] == [] and not state["changed"]
    # nothing moves: the install/report/hold branch is one skipped include, its tasks are not even loaded
    assert tasks["Install, report and hold what moves"].get("skipped") is True
    assert "Install the pinned packages" not in tasks, list(tasks)
    assert "Report the packages check mode cannot install before their source is usable" not in tasks, list(tasks)
    assert not (tmp_path / "log").exists()  # no selection was written


@pytest.mark.slow
def test_only_what_moves_is_reported_with_its_installed_version(tmp_path: Path) -> None:
    # NCCL downgraded and its hold lost in the same step (the compound case of issue 13)
    downgraded = HELD.replace("libnccl2\thold\tinstalled\t2.26.2-1+cuda12.8",
                              "libnccl2\tinstall\tinstalled\t2.25.1-1+cuda12.8")
    tasks = converge_check(tmp_path, downgraded, source_ready=False)
    report = tasks["Report the packages check mode cannot install before their source is usable"]
    assert report["changed"] is True
    assert report["msg"] == ("would install libnccl2=2.26.2-1+cuda12.8 (installed: libnccl2 2.25.1-1+cuda12.8) "
                             "(then hold them)")
    assert tasks["Install the pinned packages"].get("skipped") is True

"""gpufleet_preload: the connection plugins the hosts name, and the filter and test plugins, are loaded in
ansible's main process at play start (inherited by every forked worker instead of loaded again per task)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpufleet import REPO_ROOT
from gpufleet.ansible_run.callback_plugins import gpufleet_preload as preload


def test_connection_names_are_the_plain_ones_the_inventory_gives() -> None:
    names = preload.connection_names(None, [
        {"ansible_connection": "community.docker.docker"}, {"ansible_connection": "community.docker.docker"},
        {"ansible_connection": "{{ lookup('env', 'X') }}"}, {"ansible_connection": ""}, {"ansible_host": "h"},
        {"ansible_connection": 3},
    ])
    assert names == sorted({"community.docker.docker", "ssh"})
    assert preload.connection_names("local", []) == ["local"]


def test_a_play_preloads_its_hosts_connection_in_the_main_process(tmp_path: Path) -> None:
    (tmp_path / "inventory.yml").write_text(
        "all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n")
    (tmp_path / "pb.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug: {msg: \"{{ 'x' | to_json }}\"}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_GPUFLEET_ANSIBALLZ_CACHE_DIR": ""}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i",
                           str(tmp_path / "inventory.yml"), str(tmp_path / "pb.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpufleet_preload: connection plugins local, ssh, filters and tests" in proc.stdout

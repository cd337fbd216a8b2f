"""Run one of tests/playbooks/ with ansible-playbook on the controller (connection local): the harness the tests that
render a role's files through Ansible itself (nccl.conf, gres.conf, Lustre client) share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT

#: ``python -c RUN_MODULE <module file>`` runs a module file as Ansible would, with ansible.cfg's module_utils path
#: (``ansible.module_utils.gpufleet_*``); its arguments go on stdin as ``{"ANSIBLE_MODULE_ARGS": ...}``.
RUN_MODULE = (
    "import runpy, sys, ansible.module_utils as m\n"
    f"m.__path__.append({str(REPO_ROOT / 'ansible' / 'module_utils')!r})\n"
    "path = sys.argv[1]; sys.argv = [path]; runpy.run_path(path, run_name='__main__')\n"
)


def local_host(**hostvars: Any) -> dict[str, Any]:
    """An inventory host run on the controller with the test's own Python (the modules import gpufleet's)."""
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hostvars}


def run_playbook(tmp_path: Path, playbook: str, inventory: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i <inventory as JSON> tests/playbooks/<playbook>`` with the project's ansible.cfg, plain
    output and no fact cache shared with other runs; the caller asserts on the return code and its files."""
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_STDOUT_CALLBACK": "default"}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(REPO_ROOT / "tests" / "playbooks" / playbook)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)

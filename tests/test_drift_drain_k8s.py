"""The drain role's Kubernetes path, at task level: no API server can run in CI, so a stand-in
``kubernetes.core.k8s_drain`` (first on the collections path) echoes the arguments the role passes, and
those are checked against the real module's documented options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import run_playbook

REAL_MODULE = REPO_ROOT / ".collections/ansible_collections/kubernetes/core/plugins/modules/k8s_drain.py"
FAKE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "default": "drain"},
        "kubeconfig": {"type": "raw"},
        "context": {"type": "str"},
        "delete_options": {"type": "dict"},
    }, supports_check_mode=True)
    module.exit_json(changed=True, passed={k: v for k, v in module.params.items() if v is not None})


main()
'''
PLAYBOOK = """---
- name: Drain through the Kubernetes path
  hosts: node-a
  gather_facts: false
  tasks:
    - name: Run the drain role
      ansible.builtin.include_role:
        name: drain
      vars:
        drain_scheduler: kubernetes
        drain_action: "{{ drain_test_action }}"
        drain_reason: "gpufleet: remediate nvidia_driver"
        drain_k8s_kubeconfig: /etc/gpufleet/kubeconfig
"""


def _doc(path: Path) -> dict[str, Any]:
    doc = path.read_text().split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0]
    return dict(yaml.safe_load(doc)["options"])


def _documented_options() -> dict[str, Any]:
    """The module's own options plus its auth doc fragment's (kubeconfig, context, ...)."""
    return _doc(REAL_MODULE) | _doc(REAL_MODULE.parents[1] / "doc_fragments" / "k8s_auth_options.py")


def _run(tmp_path: Path, action: str) -> dict[str, Any]:
    modules = tmp_path / "fake" / "ansible_collections" / "kubernetes" / "core" / "plugins" / "modules"
    modules.mkdir(parents=True)
    (modules / "k8s_drain.py").write_text(FAKE)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    result = run_playbook(
        tmp_path / "play.yml", tmp_path / "hosts.yml", live=False, extravars={"drain_test_action": action},
        envvars={"ANSIBLE_COLLECTIONS_PATH": f"{tmp_path / 'fake'}:{REPO_ROOT / '.collections'}",
                 "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles")},
    )
    assert result.ok, result.verdict() + "\n" + "\n".join(result.log_tail)
    calls = [t for t in result.tasks if t.action == "kubernetes.core.k8s_drain" and t.status == "changed"]
    assert len(calls) == 1, [t.label for t in result.tasks]
    passed: dict[str, Any] = calls[0].res["passed"]
    return passed


@pytest.mark.slow
def test_drain_cordons_and_drains_with_the_delete_options(tmp_path: Path) -> None:
    passed = _run(tmp_path, "drain")
    assert passed == {
        "name": "node-a", "state": "drain", "kubeconfig": "/etc/gpufleet/kubeconfig",
        "delete_options": {"ignore_daemonsets": True, "delete_emptydir_data": True,
                           "terminate_grace_period": 300, "wait_timeout": 600},
    }
    options = _documented_options()
    assert set(passed) <= set(options)
    assert set(passed["delete_options"]) <= set(options["delete_options"]["suboptions"])


@pytest.mark.slow
def test_resume_uncordons(tmp_path: Path) -> None:
    assert _run(tmp_path, "resume") == {"name": "node-a", "state": "uncordon",
                                        "kubeconfig": "/etc/gpufleet/kubeconfig"}

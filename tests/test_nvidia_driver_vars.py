"""Every package role pins exactly what gpufleet.lock pins, for every bundled profile.

The roles look their names up in the generated layer (roles/gpufleet_defaults, from gpufleet/lock/packages.py)
by the versions they are given; this renders each role's pinned list with Ansible's templar and compares it with
the lock's ``*_packages(lock)``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpufleet import REPO_ROOT
from gpufleet.lock import (
    PROFILES,
    container_toolkit_packages,
    cuda_packages,
    cudnn_packages,
    dcgm_packages,
    driver_packages,
    fabric_manager_packages,
    nccl_packages,
    render_ansible_vars,
)
from gpufleet.lock.model import Lock

# Run in a child process: ansible reads its collections path once, at import.
_RENDER = r"""
import json, sys, yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trust(o):
    if isinstance(o, str):
        return trust_as_template(o)
    if isinstance(o, list):
        return [trust(x) for x in o]
    if isinstance(o, dict):
        return {k: trust(x) for k, x in o.items()}
    return o

role, var = sys.argv[1], sys.argv[2]
base = trust(yaml.safe_load(open(f"{role}/../gpufleet_defaults/defaults/main.yml")))
for part in ("defaults", "vars"):
    base.update(trust(yaml.safe_load(open(f"{role}/{part}/main.yml"))))
out = []
for case in json.loads(sys.stdin.read()):
    t = Templar(loader=DataLoader(), variables={**base, **case})
    out.append(t.template(trust_as_template("{{ %s }}" % var)))
print(json.dumps(out))
"""


def _locks() -> list[Lock]:
    return [Lock.model_validate({**p.versions(), "profile": name, "fabric_manager_required": True,
                                 "driver_branch": int(p.driver.split(".")[0])})
            for name, p in sorted(PROFILES.items())]


def _render(cases: list[dict[str, object]], role: str = "nvidia_driver",
            var: str = "__nvidia_driver_pinned") -> list[list[dict[str, str]]]:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections")}
    r = subprocess.run([sys.executable, "-c", _RENDER, str(REPO_ROOT / "roles" / role), var],
                       input=json.dumps(cases), capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    result: list[list[dict[str, str]]] = json.loads(r.stdout)
    return result


def test_role_pins_exactly_what_the_lock_pins() -> None:
    locks = _locks()
    cases = []
    for lock in locks:
        v = render_ansible_vars(lock)
        cases.append({
            "nvidia_driver_version": v["nvidia_driver_version"],
            "nvidia_driver_kernel_module": v["nvidia_driver_kernel_module"],
            "nvidia_fabricmanager_version": v["nvidia_fabricmanager_version"],
            "nvidia_nscq_version": v["nvidia_nscq_version"],
            "__nvidia_driver_fm_enabled": True,
            "ansible_facts": {"distribution": "Ubuntu", "distribution_release": "jammy"},
        })
    for lock, pinned in zip(locks, _render(cases), strict=True):
        role = sorted((p["name"], p["version"]) for p in pinned)
        expected = sorted(driver_packages(lock) + fabric_manager_packages(lock))
        assert role == expected, f"profile {lock.profile}"


@pytest.mark.parametrize("fm", [True, False])
def test_fabric_manager_only_when_enabled(fm: bool) -> None:
    [pinned] = _render([{"nvidia_driver_version": "580.95.05", "__nvidia_driver_fm_enabled": fm,
                         "ansible_facts": {"distribution": "Debian", "distribution_release": "bookworm"}}])
    names = {p["name"] for p in pinned}
    assert ("nvidia-fabricmanager" in names) is fm
    assert ("libnvidia-nscq" in names) is fm
    assert "nvidia-utils-580" in names


PACKAGE_ROLES = {
    "cuda_toolkit": ("__cuda_toolkit_pinned", cuda_packages),
    "cudnn": ("__cudnn_pinned", cudnn_packages),
    "nccl": ("__nccl_pinned", nccl_packages),
    "dcgm": ("__dcgm_pinned", dcgm_packages),
    "nvidia_container_toolkit": ("__nvidia_container_toolkit_pinned", container_toolkit_packages),
}


@pytest.mark.parametrize("role", sorted(PACKAGE_ROLES))
def test_package_roles_pin_exactly_what_the_lock_pins(role: str) -> None:
    var, lock_packages = PACKAGE_ROLES[role]
    locks = _locks()
    rendered = _render([dict(render_ansible_vars(lock)) for lock in locks], role, var)
    for lock, pinned in zip(locks, rendered, strict=True):
        assert [(p["name"], p["version"]) for p in pinned] == lock_packages(lock), f"{role}, profile {lock.profile}"

"""The rendered lock variables and the role defaults agree with the default profile (one number, one place).

The rules over an inventory (plain ansible-playbook runs) are the lock digest's job: tests/test_lock_digest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpufleet import REPO_ROOT
from gpufleet.lock import render_ansible_vars, resolve_lock
from gpufleet.lock.render import ENTRY_VARS
from gpufleet.spec import ClusterSpec

#: The profile the role defaults hold.
DEFAULT_PROFILE = "h100-cuda12.8"


def spec(profile: str = DEFAULT_PROFILE, gpu: str = "h100-sxm5-80gb", power: str | None = "700") -> ClusterSpec:
    return ClusterSpec.model_validate({
        "stack": "lab", "backend": "existing", "cluster_name": "lab",
        "lock": {"profile": profile},
        "pools": [{"name": "system", "role": "system", "count": 1},
                  {"name": "gpu", "role": "gpu", "gpu": gpu, "count": 2, "power_limit": power}],
    })


def test_entry_vars_are_the_rendered_variables() -> None:
    lock = resolve_lock(spec(), Path("stacks/Pulumi.lab.yaml"))
    rendered = render_ansible_vars(lock)
    assert {var: rendered[var] for var in ENTRY_VARS.values()} == {
        var: getattr(lock, entry) for entry, var in ENTRY_VARS.items()}


# --- one source: role defaults, sample inventory and the default profile ---------------------------

def _defaults() -> dict[Path, dict[str, Any]]:
    out = {}
    layer = yaml.safe_load((REPO_ROOT / "roles" / "gpufleet_defaults" / "defaults" / "main.yml").read_text())
    for path in sorted((REPO_ROOT / "roles").glob("*/defaults/main.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
        out[path] = {k: (env.from_string(v).render(**{**layer, **data}) if isinstance(v, str) and "{{" in v else v)
                     for k, v in data.items()}
    for path in sorted((REPO_ROOT / "inventories" / "sample").rglob("*.yml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "all" not in data:
            out[path] = data
    return out


def test_role_defaults_and_sample_inventory_match_the_default_profile() -> None:
    rendered = render_ansible_vars(resolve_lock(spec(), Path("stacks/Pulumi.lab.yaml")))
    compared: set[str] = set()
    for path, data in _defaults().items():
        for key in sorted(set(data) & set(rendered)):
            if isinstance(rendered[key], (list, dict)):
                continue  # package lists: the roles derive names from the version, checked in Molecule
            assert str(data[key]) == str(rendered[key]), (
                f"{path.relative_to(REPO_ROOT)}: {key} is {data[key]!r}, profile {DEFAULT_PROFILE} renders "
                f"{rendered[key]!r}; change one so the number is not written twice differently")
            compared.add(key)
    assert {"nvidia_driver_version", "nvidia_driver_branch", "nvidia_driver_kernel_module"} <= compared

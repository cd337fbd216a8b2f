"""The lock rules for plain ansible-playbook users (gpufleet.lock.ansible_check + the gpufleet_lock_check
action plugin), and the agreement of role defaults with the default profile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.inventory import write_inventory
from gpufleet.lock import PROFILES, render_ansible_vars, resolve_lock
from gpufleet.lock.ansible_check import DEFAULT_PROFILE, HostSettings, check_hosts, report
from gpufleet.lock.render import ENTRY_VARS
from gpufleet.spec import ClusterSpec, Host

GV = "inventories/lab/group_vars"


def spec(profile: str = DEFAULT_PROFILE, gpu: str = "h100-sxm5-80gb", power: str | None = "700") -> ClusterSpec:
    return ClusterSpec.model_validate({
        "stack": "lab", "backend": "existing", "cluster_name": "lab",
        "lock": {"profile": profile},
        "pools": [{"name": "system", "role": "system", "count": 1},
                  {"name": "gpu", "role": "gpu", "gpu": gpu, "count": 2, "power_limit": power}],
    })


def hosts_for(s: ClusterSpec, **overrides: Any) -> list[HostSettings]:
    """What an inventory written by gpufleet gives each GPU host, with ``overrides`` set in one file."""
    lock = resolve_lock(s, Path("stacks/Pulumi.lab.yaml"))
    values = {**render_ansible_vars(lock),
              "gpufleet_pool": "gpu",
              "gpufleet_pools": {p.name: {"role": p.role, "gpu": p.gpu} for p in s.pools},
              "gpu_settings_power_limit": s.pools[1].power_limit}
    origins = {k: f"{GV}/all/versions.yml" for k in render_ansible_vars(lock)}
    origins["gpu_settings_power_limit"] = f"{GV}/pool_gpu/gpu_settings.yml:2"
    origins["gpufleet_pools"] = f"{GV}/all/cluster.yml:4"
    values.update(overrides)
    origins.update({k: f"{GV}/gpu/override.yml:2" for k in overrides})
    return [HostSettings(f"gpu-{i}", values, origins) for i in range(2)]


def messages(hosts: list[HostSettings]) -> list[str]:
    return [str(p) for p in check_hosts(hosts)]


# --- rules over Ansible variables ------------------------------------------------------------------

@pytest.mark.parametrize(("profile", "gpu"), [(n, g) for n, p in PROFILES.items() for g in p.gpus])
def test_every_bundled_profile_rendered_to_an_inventory_passes(profile: str, gpu: str) -> None:
    hosts = hosts_for(spec(profile, gpu, "max"))
    assert messages(hosts) == []
    assert report([], hosts).startswith(f"version lock valid on 2 host(s) (gpu-0, gpu-1): profile {profile}")


def test_fabric_manager_names_the_file_and_variable() -> None:
    assert messages(hosts_for(spec(), nvidia_fabricmanager_version="570.133.20")) == [
        f"{GV}/gpu/override.yml:2: nvidia_fabricmanager_version = '570.133.20': fabric manager 570.133.20 must "
        "equal driver 570.172.08. Fix: set nvidia_fabricmanager_version to 570.172.08 or remove the override"]


def test_cuda_driver_blames_the_overridden_variable_and_names_the_compat_variable() -> None:
    assert messages(hosts_for(spec(), cuda_toolkit_version="12.9.1", nccl_version="2.27.3-1+cuda12.9")) == [
        f"{GV}/gpu/override.yml:2: cuda_toolkit_version = '12.9.1': CUDA 12.9.1 needs driver >= 575.57.08 "
        "(NVIDIA's minimum for CUDA 12.9 Update 1), driver is 570.172.08. Fix: set nvidia_driver_version to "
        "575.57.08 or newer, or pick a toolkit this driver supports, or set gpufleet_cuda_compat: minor-version "
        "to accept CUDA minor version compatibility (driver >= 525.60.13)"]


def test_minor_version_compat_from_the_inventory() -> None:
    hosts = hosts_for(spec(), cuda_toolkit_version="12.9.1", nccl_version="2.27.3-1+cuda12.9",
                      gpufleet_cuda_compat="minor-version")
    assert messages(hosts) == []


def test_power_limit_names_gpu_settings_variable() -> None:
    assert messages(hosts_for(spec(), gpu_settings_power_limit="900")) == [
        f"{GV}/gpu/override.yml:2: gpu_settings_power_limit = '900': power limit 900 W is outside NVIDIA H100 "
        "80GB HBM3's range 200-700 W. Fix: set gpu_settings_power_limit between 200 and 700 (watts), 'default' "
        "(700 W), 'max' or a percentage of default"]


def test_gpu_rules_use_the_pools_gpu_from_cluster_vars() -> None:
    found = messages(hosts_for(spec("h100-cuda12.8"), gpufleet_pools={"gpu": {"gpu": "b200-sxm-180gb"}},
                               nvidia_driver_kernel_module="proprietary", gpu_settings_power_limit="default"))
    assert found == [
        f"{GV}/gpu/override.yml:2: nvidia_driver_kernel_module = 'proprietary': NVIDIA B200 (pool gpu) requires "
        "the open kernel modules, kernel_module is proprietary. Fix: set nvidia_driver_kernel_module to open"]


def test_unknown_gpu_model_names_the_pools_variable() -> None:
    assert messages(hosts_for(spec(), gpufleet_pools={"gpu": {"gpu": "h100-typo"}})) == [
        f"{GV}/gpu/override.yml:2: gpufleet_pools.gpu.gpu = 'h100-typo': GPU model is not in the catalog. Fix: "
        "use one of: a100-sxm4-40gb, a100-sxm4-80gb, b200-sxm-180gb, h100-pcie-80gb, h100-sxm5-80gb, "
        "h200-sxm-141gb, l4, l40s"]


def test_skew_between_hosts_is_reported_once() -> None:
    a, b = hosts_for(spec())
    c = HostSettings("gpu-2", {**b.values, "nvidia_driver_version": "570.133.20",
                               "nvidia_fabricmanager_version": "570.133.20", "nvidia_nscq_version": "570.133.20"},
                     {**b.origins, "nvidia_driver_version": "inventories/lab/host_vars/gpu-2.yml:2"})
    found = messages([a, b, c])
    assert found[0] == (
        "inventories/lab/host_vars/gpu-2.yml:2: nvidia_driver_version = '570.133.20': hosts resolve "
        "nvidia_driver_version differently: 570.172.08 on gpu-0, gpu-1 (inventories/lab/group_vars/all/"
        "versions.yml); 570.133.20 on gpu-2 (inventories/lab/host_vars/gpu-2.yml:2). A stack has one version lock "
        "shared by every pool. Fix: remove nvidia_driver_version from inventories/lab/host_vars/gpu-2.yml:2 so "
        "these hosts use 570.172.08, or set nvidia_driver_version once for every host (group_vars/all)")
    assert sum("hosts resolve nvidia_driver_version" in m for m in found) == 1


def test_unset_variables_come_from_the_profile_the_role_defaults_hold() -> None:
    assert messages([HostSettings("gpu-0", {})]) == []
    hosts = [HostSettings("gpu-0", {"gpufleet_lock_profile": "a100-cuda12.4", "gpufleet_pool": "gpu",
                                    "gpufleet_pools": {"gpu": {"gpu": "b200-sxm-180gb"}}},
                          {"gpufleet_lock_profile": "lab.yml:1", "gpufleet_pools": "cluster.yml:3"})]
    assert messages(hosts)[0] == (
        "profile a100-cuda12.4 (nvidia_driver_version not set in the inventory): nvidia_driver_version = "
        "'550.163.01': NVIDIA B200 (pool gpu) needs driver branch >= 570, driver is 550.163.01. Fix: set "
        "nvidia_driver_version to a 570 or newer driver, or use a profile made for b200-sxm-180gb "
        "(h100-cuda13.0, h100-cuda13.0-r590, b200-cuda12.8)")
    # An overridden toolkit is blamed, not the profile's driver it outgrew.
    hosts = [HostSettings("gpu-0", {"cuda_toolkit_version": "13.0.2"}, {"cuda_toolkit_version": "hv.yml:1"})]
    assert messages(hosts)[0].startswith(
        "hv.yml:1: cuda_toolkit_version = '13.0.2': CUDA 13.0.2 needs driver >= 580.95.05")


def test_malformed_and_unknown_values() -> None:
    assert messages([HostSettings("h", {"cuda_toolkit_version": 12.8}, {"cuda_toolkit_version": "a.yml:3"})]) == [
        "a.yml:3: cuda_toolkit_version = 12.8: not a valid cuda version (expected e.g. 12.8.1). Fix: correct "
        "cuda_toolkit_version, quoting it as a string in YAML"]
    assert messages([HostSettings("h", {"gpufleet_lock_profile": "h100"}, {})]) == [
        f"gpufleet_lock_profile: gpufleet_lock_profile = 'h100': unknown profile. Fix: use one of: "
        f"{', '.join(sorted(PROFILES))}"]


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


# --- the action plugin, end to end ----------------------------------------------------------------

SITE = REPO_ROOT / "ansible" / "site.yml"
LOCK_CHECK = REPO_ROOT / "ansible" / "playbooks" / "lock_check.yml"


def write_inv(tmp_path: Path) -> Path:
    s = spec()
    lock = resolve_lock(s, Path("stacks/Pulumi.lab.yaml"))
    hosts = {"system": [Host(name="control-0", address="192.0.2.10")],
             "gpu": [Host(name="gpu-0", address="192.0.2.20"), Host(name="gpu-1", address="192.0.2.21")]}
    return write_inventory(s, lock, hosts, tmp_path / "lab")


def ansible(inventory: Path, *args: str, playbook: Path = SITE,
            python: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(inventory.parent / "tmp"), "ANSIBLE_CACHE_PLUGIN": "memory"}
    cmd = [*(python or [str(Path(sys.executable).parent / "ansible-playbook")]), "-i", str(inventory),
           str(playbook), "--check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=inventory.parent, timeout=120)


def test_plugin_passes_a_generated_inventory(tmp_path: Path) -> None:
    # The lock play alone: site.yml would go on to the (unreachable) sample hosts.
    r = ansible(write_inv(tmp_path), "-v", playbook=LOCK_CHECK)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "version lock valid on 2 host(s) (gpu-0, gpu-1): profile h100-cuda12.8" in r.stdout


def test_plugin_fails_with_the_exact_message_and_nothing_else_runs(tmp_path: Path) -> None:
    inv = write_inv(tmp_path)
    bad = inv.parent / "group_vars" / "pool_gpu" / "driver.yml"
    bad.write_text("---\n# hand-edited\nnvidia_fabricmanager_version: '570.133.20'\n")
    r = ansible(inv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("- group_vars/pool_gpu/driver.yml:3: nvidia_fabricmanager_version = '570.133.20': fabric manager "
            "570.133.20 must equal driver 570.172.08. Fix: set nvidia_fabricmanager_version to 570.172.08 or "
            "remove the override") in r.stdout
    assert "1 problem(s) in the version lock of the inventory (hosts gpu-0, gpu-1):" in r.stdout
    assert "GPU nodes" not in r.stdout  # the next play never started


def test_plugin_reports_skew_under_limit(tmp_path: Path) -> None:
    inv = write_inv(tmp_path)
    (inv.parent / "host_vars").mkdir()
    (inv.parent / "host_vars" / "gpu-1.yml").write_text("---\ncudnn_version: '9.10.2.21'\n")
    r = ansible(inv, "--limit", "gpu-0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("- host_vars/gpu-1.yml:2: cudnn_version = '9.10.2.21': hosts resolve cudnn_version differently: "
            "9.8.0.87 on gpu-0 (group_vars/all/versions.yml:") in r.stdout


def test_plugin_without_gpufleet_fails_and_says_how_to_fix(tmp_path: Path) -> None:
    # ansible-playbook in a Python where gpufleet cannot be imported (forked workers inherit sys.modules).
    shim = ("import sys; sys.modules['gpufleet'] = None; from ansible.cli.playbook import main; "
            "sys.argv[0] = 'ansible-playbook'; main()")
    r = ansible(write_inv(tmp_path), playbook=LOCK_CHECK, python=[sys.executable, "-c", shim])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "gpufleet_lock_check: cannot import the gpufleet package in" in r.stdout
    assert "Fix: run ansible-playbook from gpufleet's virtualenv (`. .venv/bin/activate`" in r.stdout

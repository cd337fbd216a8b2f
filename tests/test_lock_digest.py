"""The lock digest: plain ansible-playbook runs stop when an inventory's lock variables are not what gpufleet rendered.

The compatibility rules run in Python only (gpufleet.lock.resolve); ansible/playbooks/lock_check.yml recomputes the
digest gpufleet wrote next to versions.yml with core filters, no gpufleet code and no ansible-core internals.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.inventory import write_inventory
from gpufleet.lock import render_ansible_vars, resolve_lock
from gpufleet.lock.digest import DIGEST_FILE, lock_digest
from gpufleet.spec import ClusterSpec, Host

LOCK_CHECK = REPO_ROOT / "ansible" / "playbooks" / "lock_check.yml"
SITE = REPO_ROOT / "ansible" / "site.yml"


def spec() -> ClusterSpec:
    return ClusterSpec.model_validate({
        "stack": "lab", "backend": "existing", "cluster_name": "lab", "lock": {"profile": "h100-cuda12.8"},
        "pools": [{"name": "system", "role": "system", "count": 1},
                  {"name": "gpu", "role": "gpu", "gpu": "h100-sxm5-80gb", "count": 2, "power_limit": "700"}],
    })


def write_inv(tmp_path: Path) -> Path:
    s = spec()
    hosts = {"system": [Host(name="control-0", address="192.0.2.10")],
             "gpu": [Host(name="gpu-0", address="192.0.2.20"), Host(name="gpu-1", address="192.0.2.21")]}
    return write_inventory(s, resolve_lock(s), hosts, tmp_path / "lab")


def ansible(inventory: Path, *args: str, playbook: Path = LOCK_CHECK) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(inventory.parent / "tmp"), "ANSIBLE_CACHE_PLUGIN": "memory"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook), "--check",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=inventory.parent, timeout=180)


def test_digest_is_written_next_to_the_rendered_variables(tmp_path: Path) -> None:
    inv = write_inv(tmp_path)
    rendered = yaml.safe_load((inv.parent / "group_vars" / "all" / "versions.yml").read_text())
    digest = yaml.safe_load((inv.parent / DIGEST_FILE).read_text())["gpufleet_lock_digest"]
    assert digest == {"stack": "lab", "sha256": lock_digest(rendered), "vars": sorted(rendered)}
    assert rendered == render_ansible_vars(resolve_lock(spec()))


def test_digest_covers_whatever_is_rendered() -> None:
    # Nothing in the digest knows a variable name: any rendered key and value changes it.
    base = {"a_version": "1.0", "b_packages": [{"name": "x", "version": "1"}], "c": None, "d": 570}
    assert lock_digest(base) == lock_digest(dict(reversed(base.items())))
    for changed in ({**base, "a_version": "1.1"}, {**base, "e": 1}, {k: v for k, v in base.items() if k != "c"},
                    {**base, "b_packages": [{"name": "x", "version": "2"}]}):
        assert lock_digest(changed) != lock_digest(base)


def test_generated_inventory_passes(tmp_path: Path) -> None:
    # Unreachable hosts (192.0.2.0/24) and check mode: the play never connects to a host.
    r = ansible(write_inv(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok=1" in r.stdout and "failed=0" in r.stdout


def _fix(stack: str = "lab") -> str:
    return (f"Fix: change versions in the stack file's gpufleet:lock, never in the inventory; remove the overriding "
            f"files, then run `gpufleet lock render --stack {stack}` (checks the lock's rules and writes "
            f"versions.yml and lock_digest.yml again).")


def test_hand_edited_versions_stop_the_run_before_any_host_is_touched(tmp_path: Path) -> None:
    inv = write_inv(tmp_path)
    versions = inv.parent / "group_vars" / "all" / "versions.yml"
    versions.write_text(versions.read_text().replace("nvidia_fabricmanager_version: 570.172.08",
                                                     "nvidia_fabricmanager_version: 570.133.20"))
    r = ansible(inv, playbook=SITE)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the lock variables gpu-0 resolves (sha256 " in r.stdout
    assert ("are not the ones gpufleet rendered from the checked lock: versions.yml was edited by hand, or a "
            "group_vars/host_vars file overrides one of ") in r.stdout
    assert _fix() in r.stdout
    assert "GPU nodes" not in r.stdout  # the next play never started


def test_a_host_var_overriding_a_lock_variable_stops_the_run(tmp_path: Path) -> None:
    inv = write_inv(tmp_path)
    (inv.parent / "host_vars").mkdir()
    (inv.parent / "host_vars" / "gpu-1.yml").write_text("---\ncudnn_version: '9.10.2.21'\n")
    r = ansible(inv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the lock variables gpu-1 resolves" in r.stdout and "the lock variables gpu-0" not in r.stdout
    # A run limited to the hosts that hold the rendered lock applies the checked lock: it goes on.
    assert ansible(inv, "--limit", "gpu-0").returncode == 0


@pytest.mark.parametrize("how", ["edited", "removed"])
def test_hosts_with_different_or_no_digests_stop_the_run(tmp_path: Path, how: str) -> None:
    inv = write_inv(tmp_path)
    digest = inv.parent / DIGEST_FILE
    if how == "removed":
        digest.unlink()
        expected = "no lock digest: this inventory was not written by gpufleet"
    else:
        (inv.parent / "host_vars").mkdir()
        (inv.parent / "host_vars" / "gpu-1.yml").write_text(
            "---\ncudnn_version: '9.10.2.21'\n" + digest.read_text().split("---\n", 1)[1].replace(
                "sha256: ", "sha256: 0"))
        expected = "hosts carry different lock digests ("
    r = ansible(inv, "--limit", "gpu-0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert expected in r.stdout
    assert "Fix: change versions in the stack file's gpufleet:lock" in r.stdout


def test_no_gpufleet_code_and_no_ansible_internals_in_ansible() -> None:
    private = "ansible." + "_internal"  # spelled apart so that `git grep` for it stays empty
    for path in (REPO_ROOT / "ansible").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yml", ".cfg"):
            text = path.read_text()
            assert private not in text, path
            assert "import gpufleet" not in text and "from gpufleet" not in text, path
    assert not (REPO_ROOT / "ansible" / "action_plugins").exists()

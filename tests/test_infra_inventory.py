"""Inventory hand-off: stack outputs -> hosts.yml + group_vars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.inputs import loads_yaml
from gpufleet.inventory import hosts_from_outputs, write_inventory
from gpufleet.lock import resolve_lock
from gpufleet.spec import Host, load_spec


def load_yaml_text(text: str) -> Any:
    # Inventories tag stack values !unsafe: read them as Ansible does (plain strings), with gpufleet's loader.
    return loads_yaml(text, "<test>")


def test_onprem_inventory(tmp_path: Path) -> None:
    spec = load_spec("onprem-h100")
    hosts = hosts_from_outputs({p.name: [h.model_dump() for h in p.hosts] for p in spec.pools})
    path = write_inventory(spec, resolve_lock(spec), hosts, tmp_path)
    assert path == tmp_path / "hosts.yml"
    inv = load_yaml_text(path.read_text())
    children = inv["all"]["children"]
    assert sorted(children) == ["gpu", "pool_h100-a", "pool_h100-b", "pool_system", "system"]
    assert list(children["gpu"]["hosts"]) == ["gpu-a-0", "gpu-a-1", "gpu-b-0", "gpu-b-1"]
    assert list(children["system"]["hosts"]) == ["sys-0", "sys-1", "sys-2"]
    # The pool's place reaches each host (roles/slurm builds topology.conf from it); system hosts have none.
    assert children["pool_h100-b"]["hosts"]["gpu-b-1"] == {
        "ansible_host": "192.0.2.31",
        "gpufleet_pool": "h100-b",
        "gpufleet_place": {"block": "b1", "rack": "r02", "switch": "leaf-02"},
    }
    assert "gpufleet_place" not in children["pool_system"]["hosts"]["sys-0"]
    cluster = load_yaml_text((tmp_path / "group_vars/all/cluster.yml").read_text())
    assert cluster["gpufleet_stack"] == "onprem-h100"
    assert cluster["gpufleet_pools"]["h100-a"] == {
        "role": "gpu",
        "gpu": "h100-sxm5-80gb",
        "power_limit": "700",
        "fabric": "infiniband",
        "host_management": "ansible",
        # From the catalog (HGX H100 SXM5: NVSwitch board): roles/slurm's health check requires fabric manager.
        "nvswitch": True,
    }
    assert cluster["gpufleet_lustre"]["checkpoints"] == {
        "mount_path": "/lustre/checkpoints",
        "subdir": "/checkpoints",
    }
    versions = load_yaml_text((tmp_path / "group_vars/all/versions.yml").read_text())
    assert versions["nvidia_driver_version"] == "570.172.08"


def test_sandbox_containers_use_docker_connection(tmp_path: Path) -> None:
    spec = load_spec("local")
    hosts = {
        "system": [
            Host(name="gpufleet-local-control-0", address="gpufleet-local-control-0", connection="docker")
        ],
        "gpu": [
            Host(name=f"gpufleet-local-gpu-{i}", address=f"gpufleet-local-gpu-{i}", connection="docker")
            for i in range(2)
        ],
    }
    inv = load_yaml_text(write_inventory(spec, resolve_lock(spec), hosts, tmp_path).read_text())
    assert inv["all"]["children"]["pool_gpu"]["hosts"]["gpufleet-local-gpu-1"] == {
        "ansible_host": "gpufleet-local-gpu-1",
        "gpufleet_pool": "gpu",
        "ansible_connection": "community.docker.docker",
    }


def test_unknown_pool_and_duplicate_host_are_errors(tmp_path: Path) -> None:
    spec = load_spec("local")
    lock = resolve_lock(spec)
    with pytest.raises(ValueError, match=r"^hosts given for pools the stack local does not define: gpu-x$"):
        write_inventory(spec, lock, {"gpu-x": []}, tmp_path)
    h = Host(name="n0", address="10.0.0.1")
    with pytest.raises(ValueError, match=r"^host n0 is listed in more than one pool$"):
        write_inventory(spec, lock, {"system": [h], "gpu": [h]}, tmp_path)

"""inventories/sample has the layout gpufleet writes: the same files, groups, pool nesting and variables.

The sample's own cluster (its pools from group_vars/all/cluster.yml, its hosts from hosts.yml) is written by
``gpufleet.inventory.write_inventory`` into a temporary folder; every file there, except those the version lock
writes, must be in the sample with the same content, and the sample may hold no other file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT
from gpufleet.inputs import load_yaml
from gpufleet.inventory import write_inventory
from gpufleet.lock import resolve_lock, write_group_vars
from gpufleet.spec import ClusterSpec, Host

SAMPLE = REPO_ROOT / "inventories" / "sample"


def _files(root: Path) -> dict[str, Any]:
    # gpufleet.inputs.load_yaml reads the !unsafe tags gpufleet writes on stack values as plain strings.
    return {str(p.relative_to(root)): load_yaml(p) for p in sorted(root.rglob("*.yml"))}


def _spec_of(files: dict[str, Any]) -> tuple[ClusterSpec, dict[str, list[Host]]]:
    cluster = files["group_vars/all/cluster.yml"]
    groups = files["hosts.yml"]["all"]["children"]
    hosts = {name: [Host(name=h, address=hv["ansible_host"]) for h, hv in groups[f"pool_{name}"]["hosts"].items()]
             for name in cluster["gpufleet_pools"]}
    # nvswitch is derived (the catalog's, for the pool's GPU), not a stack field.
    pools = [{"name": name, **{k: v for k, v in pool.items() if v is not None and k != "nvswitch"},
              "count": len(hosts[name])}
             for name, pool in cluster["gpufleet_pools"].items()]
    spec = ClusterSpec.model_validate({
        "stack": cluster["gpufleet_stack"], "backend": cluster["gpufleet_backend"],
        "cluster_name": cluster["gpufleet_cluster_name"], "lock": {"profile": "h100-cuda12.8"},
        "pools": pools, "networks": cluster["gpufleet_networks"],
    })
    return spec, hosts


def _generated(files: dict[str, Any], out: Path) -> dict[str, Any]:
    spec, hosts = _spec_of(files)
    lock = resolve_lock(spec, SAMPLE / "hosts.yml")
    write_inventory(spec, lock, hosts, out / "inventory")
    # What the version lock writes is left out of the sample: its versions come from the roles' defaults.
    write_group_vars(lock, out / "lock")
    lock_files = set(_files(out / "lock"))
    assert lock_files, "write_group_vars wrote nothing: the exclusion below would hide nothing"
    return {k: v for k, v in _files(out / "inventory").items() if k not in lock_files}


def test_sample_inventory_has_the_generated_layout(tmp_path: Path) -> None:
    sample = _files(SAMPLE)
    generated = _generated(sample, tmp_path)
    assert sorted(sample) == sorted(generated)
    for name, content in generated.items():
        assert sample[name] == content, f"inventories/sample/{name} differs from what gpufleet writes"


def test_the_comparison_sees_a_nested_pool(tmp_path: Path) -> None:
    # The old sample's nesting (pool groups under gpu, hosts only there) fails the comparison.
    sample = _files(SAMPLE)
    children = sample["hosts.yml"]["all"]["children"]
    nested = {"all": {"children": {"system": children["system"], "pool_system": children["pool_system"],
                                   "gpu": {"children": {"pool_h100": children["pool_h100"]}}}}}
    assert nested != _generated(sample, tmp_path)["hosts.yml"]

"""Write an Ansible inventory for a stack.

Layout under ``out_dir`` (normally ``inventories/<stack>/``)::

    hosts.yml                       all -> children: gpu, system, pool_<name> (hosts with ansible_host)
    group_vars/all/versions.yml     the version lock (written by gpufleet.lock.write_group_vars)
    group_vars/all/cluster.yml      stack, cluster name, pools (gpu model, power limit, fabric), storage

Every string value that comes from a stack is written with Ansible's ``!unsafe`` tag: Ansible reads it as
data and never templates it, so a value such as ``{{ lookup('pipe', 'id') }}`` cannot run a command on the
control host (the values are also validated to their grammar in gpufleet.spec). Read these files back with
gpufleet.inputs.load_yaml, which knows the tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT
from gpufleet.infra.scheduling import node_taints
from gpufleet.inputs import dump_unsafe_yaml
from gpufleet.spec import ClusterSpec, Host, NodePool

INVENTORIES_DIR = REPO_ROOT / "inventories"
HEADER = "# Written by gpufleet from the stack's outputs; edit the stack file instead.\n"


def inventory_dir(stack: str) -> Path:
    return INVENTORIES_DIR / stack


def hosts_from_outputs(inventory: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[Host]]:
    """The ``inventory`` stack output (pool -> [{name, address, connection, user}]) as Hosts."""
    return {pool: [Host.model_validate(dict(h)) for h in hosts] for pool, hosts in inventory.items()}


def _host_vars(host: Host, pool: str) -> dict[str, Any]:
    hv: dict[str, Any] = {"ansible_host": host.address, "gpufleet_pool": pool}
    if host.connection == "docker":
        hv["ansible_connection"] = "community.docker.docker"
    if host.user:
        hv["ansible_user"] = host.user
    return hv


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + dump_unsafe_yaml(data))


def cluster_vars(spec: ClusterSpec) -> dict[str, Any]:
    lustre = spec.storage.lustre
    return {
        "gpufleet_stack": spec.stack,
        "gpufleet_cluster_name": spec.cluster_name,
        "gpufleet_backend": spec.backend,
        "gpufleet_pools": {
            p.name: {"role": p.role, "gpu": p.gpu, "power_limit": p.power_limit, "fabric": p.fabric,
                     "host_management": p.host_management}
            for p in spec.pools
        },
        "gpufleet_networks": spec.networks.model_dump(),
        "gpufleet_lustre": None if lustre is None else {
            "mgs_nids": list(lustre.mgs_nids), "fsname": lustre.fsname,
            "datasets": {"mount_path": lustre.datasets.mount_path, "subdir": lustre.datasets.subdir},
            "checkpoints": {"mount_path": lustre.checkpoints.mount_path, "subdir": lustre.checkpoints.subdir},
        },
        "gpufleet_local_nvme": (None if spec.storage.local_nvme is None
                                else spec.storage.local_nvme.model_dump()),
    }


def pool_role_vars(pool: NodePool) -> dict[str, Any]:
    """Role variables a pool's own settings decide (its power limit goes to the gpu_settings role)."""
    return {"gpu_settings_power_limit": pool.power_limit} if pool.power_limit else {}


def pool_kubelet_vars(pool: NodePool) -> dict[str, Any]:
    """The taints the pool's kubelets register with (role host_tuning): the same list the platform layer
    gives registered nodes, from one function (gpufleet.infra.scheduling.node_taints)."""
    taints = node_taints(pool)
    return {"host_tuning_kubelet_register_taints": taints} if taints else {}


def write_inventory(spec: ClusterSpec, lock: Any, hosts_by_pool: Mapping[str, Sequence[Host]],
                    out_dir: Path) -> Path:
    """Write ``hosts.yml`` and group_vars for ``spec`` into ``out_dir``; return the hosts.yml path.

    ``hosts_by_pool`` maps a pool name of the spec to its hosts (for the sandbox: container names with
    ``connection: docker``). A host listed twice, or a pool the spec lacks, is an error.
    """
    pools = {p.name: p for p in spec.pools}
    unknown = sorted(set(hosts_by_pool) - set(pools))
    if unknown:
        raise ValueError(f"hosts given for pools the stack {spec.stack} does not define: "
                         f"{', '.join(unknown)}")
    children: dict[str, Any] = {"gpu": {"hosts": {}}, "system": {"hosts": {}}}
    seen: set[str] = set()
    for pool in spec.pools:
        group: dict[str, Any] = {"hosts": {}}
        for host in hosts_by_pool.get(pool.name, ()):
            if host.name in seen:
                raise ValueError(f"host {host.name} is listed in more than one pool")
            seen.add(host.name)
            group["hosts"][host.name] = _host_vars(host, pool.name)
            children[pool.role]["hosts"][host.name] = None
        children[f"pool_{pool.name}"] = group
    out_dir.mkdir(parents=True, exist_ok=True)
    hosts_file = out_dir / "hosts.yml"
    _dump(hosts_file, {"all": {"children": children}})
    _dump(out_dir / "group_vars" / "all" / "cluster.yml", cluster_vars(spec))
    for pool in spec.pools:
        pool_vars = pool_role_vars(pool)
        if pool_vars:
            _dump(out_dir / "group_vars" / f"pool_{pool.name}" / "gpu_settings.yml", pool_vars)
        kubelet = pool_kubelet_vars(pool)
        if kubelet:
            _dump(out_dir / "group_vars" / f"pool_{pool.name}" / "kubelet.yml", kubelet)
    from gpufleet.lock import write_group_vars

    write_group_vars(lock, out_dir)
    return hosts_file

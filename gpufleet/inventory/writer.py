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

import yaml

from gpufleet import REPO_ROOT
from gpufleet.catalog import GPUS
from gpufleet.infra.scheduling import host_place, node_taints
from gpufleet.inputs import dump_unsafe_yaml
from gpufleet.spec import ClusterSpec, Host, NodePool

INVENTORIES_DIR = REPO_ROOT / "inventories"
HEADER = "# Written by gpufleet from the stack's outputs; edit the stack file instead.\n"


def inventory_dir(stack: str) -> Path:
    return INVENTORIES_DIR / stack


def hosts_from_outputs(inventory: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[Host]]:
    """The ``inventory`` stack output (pool -> [{name, address, connection, user}]) as Hosts."""
    return {pool: [Host.model_validate(dict(h)) for h in hosts] for pool, hosts in inventory.items()}


def _host_vars(host: Host, pool: NodePool) -> dict[str, Any]:
    hv: dict[str, Any] = {"ansible_host": host.address, "gpufleet_pool": pool.name}
    # The host's network place (block, rack, leaf switch) as the stack declares it, the host's own entry over the
    # pool's: roles/slurm's topology.conf is built from it (one fact, also the node labels Kueue reads).
    declared = {h.name: h for h in pool.hosts}
    place = host_place(pool, declared.get(host.name, host))
    if place:
        hv["gpufleet_place"] = place
    if host.connection == "docker":
        hv["ansible_connection"] = "community.docker.docker"
    if host.user:
        hv["ansible_user"] = host.user
    return hv


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + dump_unsafe_yaml(data))


def pool_nvswitch(pool: NodePool) -> bool:
    """Whether the pool's GPUs sit on an NVSwitch board (HGX SXM: fabric manager must run), from the catalog's model:
    the one place the roles learn it (roles/slurm's health check requires fabric manager there)."""
    return pool.gpu is not None and pool.gpu in GPUS and GPUS[pool.gpu].nvswitch


def cluster_vars(spec: ClusterSpec) -> dict[str, Any]:
    lustre = spec.storage.lustre
    return {
        "gpufleet_stack": spec.stack,
        "gpufleet_cluster_name": spec.cluster_name,
        "gpufleet_backend": spec.backend,
        "gpufleet_pools": {
            p.name: {"role": p.role, "gpu": p.gpu, "power_limit": p.power_limit, "fabric": p.fabric,
                     "host_management": p.host_management, "nvswitch": pool_nvswitch(p)}
            for p in spec.pools
        },
        "gpufleet_networks": spec.networks.model_dump(),
        "gpufleet_lustre": None if lustre is None else {
            "mgs_nids": list(lustre.mgs_nids), "fsname": lustre.fsname,
            "datasets": {"mount_path": lustre.datasets.mount_path, "subdir": lustre.datasets.subdir},
            "checkpoints": {"mount_path": lustre.checkpoints.mount_path, "subdir": lustre.checkpoints.subdir},
        },
        # What the local_scratch role reads; drive_class and bench_gates are for gpufleet bench storage only.
        "gpufleet_local_nvme": (None if spec.storage.local_nvme is None
                                else spec.storage.local_nvme.model_dump(include={"mount_path", "raid0", "devices"})),
    }


def pool_role_vars(pool: NodePool) -> dict[str, Any]:
    """Role variables a pool's own settings decide (its power limit goes to the gpu_settings role)."""
    return {"gpu_settings_power_limit": pool.power_limit} if pool.power_limit else {}


def pool_kubelet_vars(pool: NodePool) -> dict[str, Any]:
    """The taints the pool's kubelets register with (role host_tuning): the same list the platform layer
    gives registered nodes, from one function (gpufleet.infra.scheduling.node_taints)."""
    taints = node_taints(pool)
    return {"host_tuning_kubelet_register_taints": taints} if taints else {}


#: Cloud tags on every instance of a pool (the launch template's tag specification; gpufleet.infra.aws).
CLUSTER_TAG = "gpufleet.io/cluster"
POOL_TAG = "gpufleet.io/pool"
ROLE_TAG = "gpufleet.io/role"


#: Azure tags on every VM scale set of a pool (gpufleet.infra.azure) and GCE labels on every node VM of a pool
#: (gpufleet.infra.gcp sets them as the node pool's resource_labels): Azure tag names cannot hold "/", GCE label
#: keys are lower-case letters, digits, "-" and "_" only.
AZURE_CLUSTER_TAG = GCP_CLUSTER_LABEL = "gpufleet-cluster"
AZURE_POOL_TAG = GCP_POOL_LABEL = "gpufleet-pool"
AZURE_ROLE_TAG = GCP_ROLE_LABEL = "gpufleet-role"
#: GCE label naming who manages a node VM's host (the pool's host_management): the gcp_compute inventory keeps the
#: VMs labelled ansible. One equality filter: the Compute API's filter has no "in" for a list of pools.
GCP_HOSTS_LABEL = "gpufleet-host-management"
#: The resource group AKS puts a cluster's scale sets in (gpufleet.infra.azure sets it by name).
AZURE_NODE_GROUP = "{cluster}-nodes"
#: The file name each dynamic-inventory plugin reads (it ignores files not ending so).
PLUGIN_FILES = {"aws": "aws_ec2.yml", "azure": "azure_rm.yml", "gcp": "gcp_compute.yml"}


def _groups(pool_key: str, role_key: str) -> list[dict[str, str]]:
    """The groups a static inventory has: pool_<name> and gpu/system."""
    return [{"key": pool_key, "prefix": "pool", "separator": "_"}, {"key": role_key, "prefix": "", "separator": ""}]


def _aws_ec2(spec: ClusterSpec, pools: list[str]) -> dict[str, Any]:
    assert spec.aws is not None
    ssm = spec.aws.ansible_connection == "ssm"
    return {
        "plugin": "amazon.aws.aws_ec2",
        "regions": [spec.aws.region],
        "filters": {f"tag:{CLUSTER_TAG}": spec.cluster_name, f"tag:{POOL_TAG}": pools,
                    "instance-state-name": "running"},
        # SSM addresses an instance by its id; SSH by its private address (no node has a public one).
        "hostnames": ["instance-id"],
        "compose": {"ansible_host": "instance_id" if ssm else "private_ip_address",
                    "gpufleet_pool": f"tags['{POOL_TAG}']"},
        "keyed_groups": _groups(f"tags['{POOL_TAG}']", f"tags['{ROLE_TAG}']"),
    }


def _azure_rm(spec: ClusterSpec, pools: list[str]) -> dict[str, Any]:
    """AKS nodes are scale set instances in the cluster's node resource group; kept when their tags name
    this cluster and an Ansible-managed pool. Reached on their private address (no node has a public one)."""
    pool_tag = f"tags['{AZURE_POOL_TAG}'] | default('')"
    return {
        "plugin": "azure.azcollection.azure_rm",
        "auth_source": "auto",
        "include_vm_resource_groups": [],
        "include_vmss_resource_groups": [AZURE_NODE_GROUP.format(cluster=spec.cluster_name)],
        "plain_host_names": True,
        "exclude_host_filters": [
            f"tags['{AZURE_CLUSTER_TAG}'] | default('') != '{spec.cluster_name}'",
            f"{pool_tag} not in {pools!r}",
        ],
        "hostvar_expressions": {"ansible_host": "private_ipv4_addresses | first", "gpufleet_pool": pool_tag},
        "keyed_groups": _groups(f"tags['{AZURE_POOL_TAG}']", f"tags['{AZURE_ROLE_TAG}']"),
    }


def _gcp_compute(spec: ClusterSpec, pools: list[str]) -> dict[str, Any]:
    """GKE node VMs of this cluster whose pool is Ansible-managed, by the labels gpufleet.infra.gcp puts on every
    node VM (each filter is an AND condition; the pools' label says ansible, so ``pools`` need not be listed).
    Named by their VM name, which is the Kubernetes node name on GKE (the drain role's default); reached on their
    private address (no node has a public one)."""
    assert spec.gcp is not None
    pool_label = f"labels['{GCP_POOL_LABEL}']"
    return {
        "plugin": "google.cloud.gcp_compute",
        # The credentials `pulumi up` uses too: gcloud auth application-default login.
        "auth_kind": "application",
        "projects": [spec.gcp.project],
        "zones": [spec.gcp.zone],
        "filters": [f"labels.{GCP_CLUSTER_LABEL} = {spec.cluster_name}", f"labels.{GCP_HOSTS_LABEL} = ansible",
                    "status = RUNNING"],
        "hostnames": ["name"],
        "compose": {"ansible_host": "networkInterfaces[0].networkIP", "gpufleet_pool": pool_label},
        "keyed_groups": _groups(pool_label, f"labels['{GCP_ROLE_LABEL}']"),
    }


_PLUGINS = {"aws": _aws_ec2, "azure": _azure_rm, "gcp": _gcp_compute}


def dynamic_inventory(spec: ClusterSpec) -> dict[str, Any] | None:
    """The cloud's dynamic-inventory plugin file (``amazon.aws.aws_ec2``, ``azure.azcollection.azure_rm``,
    ``google.cloud.gcp_compute``) for a cloud stack's Ansible-managed pools: autoscaled nodes have no fixed
    addresses, so Ansible finds them by the pool tags (GCE labels), into the same groups a static inventory has
    (``pool_<name>``, ``gpu``/``system``). None when no pool is Ansible-managed."""
    pools = [p.name for p in spec.pools if p.host_management == "ansible"]
    if spec.backend not in _PLUGINS or getattr(spec, spec.backend) is None or not pools:
        return None
    return _PLUGINS[spec.backend](spec, pools)


def cloud_connection_vars(spec: ClusterSpec) -> dict[str, Any]:
    """How Ansible reaches cloud nodes: Session Manager (amazon.aws.aws_ssm, no open port) or SSH (as the
    stack's user, with sudo; on Google Cloud the OS Login user, docs/clouds.md)."""
    if spec.azure is not None:
        return {"ansible_user": spec.azure.ssh_user, "ansible_become": True}
    if spec.gcp is not None:
        return {"ansible_user": spec.gcp.ssh_user, "ansible_become": True}
    if spec.aws is None:
        return {}
    if spec.aws.ansible_connection == "ssm":
        return {"ansible_connection": "amazon.aws.aws_ssm", "ansible_aws_ssm_region": spec.aws.region,
                "ansible_aws_ssm_bucket_name": spec.aws.ssm_bucket, "ansible_become": True}
    return {"ansible_user": spec.aws.ssh_user, "ansible_become": True}


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
            group["hosts"][host.name] = _host_vars(host, pool)
            children[pool.role]["hosts"][host.name] = None
        children[f"pool_{pool.name}"] = group
    out_dir.mkdir(parents=True, exist_ok=True)
    hosts_file = out_dir / "hosts.yml"
    _dump(hosts_file, {"all": {"children": children}})
    write_inventory_vars(spec, lock, out_dir)
    return hosts_file


def write_inventory_vars(spec: ClusterSpec, lock: Any, out_dir: Path) -> None:
    """Write everything of the inventory but its hosts: group_vars from ``spec`` and ``lock``, the dynamic-inventory
    plugin file. Every command that runs Ansible calls it with the stack it resolved, so the vars that reach the hosts
    are the current stack file's and lock's, whoever wrote hosts.yml (``gpufleet up``, from the stack's outputs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _dump(out_dir / "group_vars" / "all" / "cluster.yml", cluster_vars(spec))
    for pool in spec.pools:
        pool_vars = pool_role_vars(pool)
        if pool_vars:
            _dump(out_dir / "group_vars" / f"pool_{pool.name}" / "gpu_settings.yml", pool_vars)
        kubelet = pool_kubelet_vars(pool)
        if kubelet:
            _dump(out_dir / "group_vars" / f"pool_{pool.name}" / "kubelet.yml", kubelet)
    plugin = dynamic_inventory(spec)
    if plugin is not None:
        # The plugin only reads files named so; hosts.yml keeps declaring the (empty) groups. Plain YAML, not
        # !unsafe: compose, filters and keyed_groups are expressions the plugin must evaluate, and they are
        # gpufleet's constants; the stack's values in it (region, cluster and pool names) passed their grammar.
        (out_dir / PLUGIN_FILES[spec.backend]).write_text(HEADER + yaml.safe_dump(plugin, sort_keys=False))
        for pool in spec.pools:
            if pool.host_management == "ansible":
                _dump(out_dir / "group_vars" / f"pool_{pool.name}" / "connection.yml", cloud_connection_vars(spec))
    from gpufleet.lock import write_group_vars

    write_group_vars(lock, out_dir)

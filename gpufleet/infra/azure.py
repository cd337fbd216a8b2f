"""The azure backend: virtual network, AKS with a system pool and ND-series GPU pools on InfiniBand, Azure
Managed Lustre (pulumi-azure-native).

Only the program imports this module, and only for ``backend: azure``: pulumi-azure-native is the optional extra
``pip install '.[azure]'`` (``gpufleet.infra.backends`` names the install step when it is missing). The SDK is
large: only the submodules used here are imported (its package ``__init__`` loads none of them eagerly).

What gets built (docs/clouds.md has the why of each piece):

- A resource group and a virtual network: the nodes' subnet (first quarter of the address range) behind a NAT
  gateway, the only public address of the stack; one subnet per Azure Managed Lustre file system (each needs its
  own), sized from Microsoft's table, with a network security group allowing Lustre (TCP 988, 1019-1023) from
  the nodes' subnet only.
- AKS with Microsoft Entra ID authentication (local accounts off), Azure CNI overlay powered by Cilium (the
  platform layer's NetworkPolicies), outbound through the NAT gateway, a private API server unless the stack
  asks otherwise; the first system pool is the cluster's System pool, further pools are agent pools.
- One agent pool (one virtual machine scale set) per GPU pool: InfiniBand is on every ND VM and connects the
  VMs of one scale set, so a pool is one partition; in one zone, next to the file systems; AKS's own GPU driver
  off (the GPU Operator or Ansible installs the lock's); no public address; taints and labels at registration.
- Azure Managed Lustre: one file system for datasets, one for checkpoints (SKU from the throughput per TiB),
  whose MGS address the platform layer's PVs carry in the format of Microsoft's Azure Managed Lustre CSI driver;
  that driver (Helm, chart pinned by the lock and the chart catalog) mounts them and installs the Lustre client
  matching each node's kernel itself.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

import pulumi
import pulumi_azure_native as azure_native
import pulumi_kubernetes as k8s
import yaml
from pulumi_azure_native import (
    authorization,
    containerservice,
    features,
    managedidentity,
    network,
    resources,
    storagecache,
)

from gpufleet.catalog.clouds import AZURE
from gpufleet.catalog.kubernetes import node_os
from gpufleet.infra import charts
from gpufleet.infra.contract import BackendHandles, PoolHandle
from gpufleet.infra.scheduling import FABRIC_LABEL, gpu_node_tolerations, node_labels, node_taints, taint_spec
from gpufleet.inventory.writer import AZURE_CLUSTER_TAG, AZURE_NODE_GROUP, AZURE_POOL_TAG, AZURE_ROLE_TAG
from gpufleet.lock import Lock
from gpufleet.spec import Azure, ClusterSpec, NodePool

# Tags name the cluster, pool and role on every VM scale set; the dynamic inventory filters on them.
CLUSTER_TAG, POOL_TAG, ROLE_TAG = AZURE_CLUSTER_TAG, AZURE_POOL_TAG, AZURE_ROLE_TAG
#: Built-in role "Network Contributor": the cluster identity joins nodes to our subnet and uses our NAT gateway
#: (https://learn.microsoft.com/en-us/azure/role-based-access-control/built-in-roles/networking#network-contributor).
NETWORK_CONTRIBUTOR = "4d97b98b-1d4f-4787-a291-c67834d212e7"
#: Addresses of the Azure CNI overlay (pods) and of Services: outside any VNet range a stack may choose.
POD_CIDR = "192.168.0.0/16"
SERVICE_CIDR = "172.16.0.0/16"
DNS_SERVICE_IP = "172.16.0.10"
#: The subscription feature that lands an AKS node pool's VMs on one physical InfiniBand network: without it the
#: VMs of a pool of an InfiniBand size may be on different InfiniBand networks and RDMA between them fails
#: (AKS's RDMA over InfiniBand prerequisites, https://azure.github.io/aks-rdma-infiniband/getting-started/prerequisites
#: and https://github.com/Azure/aks-rdma-infiniband: `az feature register --namespace
#: Microsoft.ContainerService --name AKSInfinibandSupport`).
INFINIBAND_FEATURE = ("Microsoft.ContainerService", "AKSInfinibandSupport")


def subnet_plan(cfg: Azure, lustre_tib: dict[str, int]) -> dict[str, str]:
    """Subnets by role: ``nodes`` the first quarter of the VNet, then one subnet per file system, carved in
    order from the second quarter with the prefix Microsoft's sizing table asks for its capacity."""
    vnet = ipaddress.IPv4Network(cfg.vnet_cidr)
    quarters = list(vnet.subnets(prefixlen_diff=2))
    plan = {"nodes": str(quarters[0])}
    cursor = int(quarters[1].network_address)
    for kind, tib in lustre_tib.items():
        prefix = AZURE.managed_lustre.prefix_for(tib)
        if prefix is None:  # the stack validation refuses this already
            raise ValueError(f"no subnet size for a {tib} TiB file system")
        size = 2 ** (32 - prefix)
        cursor = -(-cursor // size) * size  # align to the subnet size
        plan[f"lustre-{kind}"] = f"{ipaddress.IPv4Address(cursor)}/{prefix}"
        cursor += size
    return plan


def lustre_security_rules(nodes: str, subnet: str, location: str) -> list[dict[str, Any]]:
    """Rules of a file system's subnet: Lustre from the nodes, everything within the subnet (its own servers),
    nothing else from the VNet; out, the rules Microsoft lists for an AMLFS subnet (Azure Monitor, the region's
    storage, Key Vault, Azure's cloud services on 443, Lustre within the VNet) and nothing else to the
    Internet (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/configure-network-security-group,
    https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites#network-prerequisites)."""
    ports = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in AZURE.managed_lustre.ports]

    def out(name: str, priority: int, destination: str, **extra: Any) -> dict[str, Any]:
        rule: dict[str, Any] = {"name": name, "priority": priority, "direction": "Outbound", "access": "Allow",
                                "protocol": "Tcp", "source_address_prefix": "VirtualNetwork",
                                "source_port_range": "*", "destination_address_prefix": destination,
                                "destination_port_range": "443"}
        rule.update(extra)
        return {k: v for k, v in rule.items() if v is not None}

    return [
        {"name": "lustre-from-nodes", "priority": 100, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
         "source_address_prefix": nodes, "source_port_range": "*", "destination_address_prefix": subnet,
         "destination_port_ranges": ports},
        {"name": "within-subnet", "priority": 110, "direction": "Inbound", "access": "Allow", "protocol": "*",
         "source_address_prefix": subnet, "source_port_range": "*", "destination_address_prefix": subnet,
         "destination_port_range": "*"},
        {"name": "deny-vnet", "priority": 4000, "direction": "Inbound", "access": "Deny", "protocol": "*",
         "source_address_prefix": "VirtualNetwork", "source_port_range": "*", "destination_address_prefix": "*",
         "destination_port_range": "*"},
        out("to-azure-monitor", 100, "AzureMonitor"),
        out("to-azure-cloud", 110, "AzureCloud"),
        out("to-storage", 120, f"Storage.{location}"),
        out("to-key-vault", 130, "AzureKeyVault"),
        out("lustre-within-vnet", 140, "VirtualNetwork", destination_port_range=None,
            destination_port_ranges=ports),
        {"name": "within-subnet-out", "priority": 150, "direction": "Outbound", "access": "Allow", "protocol": "*",
         "source_address_prefix": subnet, "source_port_range": "*", "destination_address_prefix": subnet,
         "destination_port_range": "*"},
        {"name": "deny-internet", "priority": 4000, "direction": "Outbound", "access": "Deny", "protocol": "*",
         "source_address_prefix": "*", "source_port_range": "*", "destination_address_prefix": "Internet",
         "destination_port_range": "*"},
    ]


def node_os_sku(spec: ClusterSpec, pool: NodePool | None = None) -> str:
    """The AKS OS SKU of a pool: its image, else the Ubuntu release AKS ships for the cluster's version
    (gpufleet/catalog/kubernetes.yaml)."""
    if pool is not None and pool.image is not None:
        return pool.image
    version = spec.azure.kubernetes_version if spec.azure is not None else ""
    return node_os("azure", version) or "Ubuntu2204"


def _handle(subdir: str) -> Any:
    fsname = AZURE.managed_lustre.fsname

    def render(mgs: Any) -> str:
        return f"{mgs}@tcp:/{fsname}{'' if subdir == '/' else subdir}"

    return render


def volume_attributes(mgs: pulumi.Input[str], subdir: str) -> dict[str, pulumi.Input[str]]:
    """A static PV's volumeAttributes for Microsoft's Azure Managed Lustre CSI driver (its catalog entry's
    ``csi_pv_source``): the file system's MGS address and name; a directory of it as ``sub-dir``, kept when the
    pod goes (the driver requires ``retain-sub-dir`` for read-only volumes, and these directories are data)."""
    attrs: dict[str, pulumi.Input[str]] = {"mgs-ip-address": mgs, "fs-name": AZURE.managed_lustre.fsname}
    if subdir != "/":
        attrs.update({"sub-dir": subdir.strip("/"), "retain-sub-dir": "true"})
    return attrs


def lustre_csi_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values of Microsoft's chart: its node plugin on the GPU nodes, tolerating exactly their taints (the chart's
    own list, which the value replaces, tolerates only nvidia.com/gpu, spot and sku=gpu of the user-pool taints)."""
    return {"node": {"tolerations": gpu_node_tolerations(spec.gpu_pools)}}


def azurecli_kubeconfig(text: str) -> str:
    """The cluster's user kubeconfig (exec format: kubelogin) set to log in with the caller's Azure CLI session,
    as ``kubelogin convert-kubeconfig -l azurecli`` does: the format's default device-code login would wait for
    a person in the middle of ``pulumi up``."""
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        return text
    for user in doc.get("users") or []:
        exec_ = (user.get("user") or {}).get("exec")
        if not exec_:
            continue
        args = list(exec_.get("args") or [])
        server = args[args.index("--server-id") + 1] if "--server-id" in args[:-1] else None
        exec_["args"] = ["get-token", "--login", "azurecli", *(["--server-id", server] if server else [])]
    return yaml.safe_dump(doc, sort_keys=False)


def _kubeconfig(credentials: Any) -> str:
    return azurecli_kubeconfig(base64.b64decode(credentials.kubeconfigs[0].value).decode())


class AzureCluster(pulumi.ComponentResource):
    """Everything of a stack that lives in Azure, and the Kubernetes provider of its AKS cluster."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:backend:AzureCluster", name, None, opts)
        cfg = spec.azure
        if cfg is None:  # load_spec refuses this already; kept for direct callers
            raise ValueError("backend azure needs gpufleet:azure")
        self.cfg = cfg
        self.spec = spec
        # The GPU Operator's driver/toolkit switches are cluster-wide (the lock): Ansible-managed GPU pools are
        # labelled out of them at registration, as the platform layer labels existing nodes.
        self.operator_components = lock.operator_components
        self.tags = {CLUSTER_TAG: spec.cluster_name}
        self.azure_provider = azure_native.Provider(f"{name}-azure", location=cfg.location,
                                                    opts=pulumi.ResourceOptions(parent=self))
        self.group = resources.ResourceGroup(name, resource_group_name=spec.cluster_name, location=cfg.location,
                                             tags=self.tags, opts=self._opts())
        lustre = spec.storage.lustre
        tib = ({} if lustre is None else {"datasets": lustre.datasets.capacity_gib // 1024,
                                          "checkpoints": lustre.checkpoints.capacity_gib // 1024})
        self.plan = subnet_plan(cfg, tib)
        self._network(name)
        self._infiniband_feature(name)
        self._cluster(name)
        self.pools = [PoolHandle(p, (), taints_at_registration=True) for p in spec.pools]
        self.agent_pools = [self._agent_pool(name, p) for p in spec.pools if p is not self.system_pool]
        self.lustre_volume_handles, self.lustre_volume_attributes = self._lustre(name, tib)
        credentials = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=self.group.name, resource_name=self.cluster.name, format="exec",
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.azure_provider))
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=pulumi.Output.secret(credentials.apply(_kubeconfig)),
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster, *self.agent_pools]))
        self.lustre_csi_release = self._lustre_csi(spec, lock) if lustre is not None else None
        self.handles = BackendHandles(
            provider=self.provider, pools=self.pools, inventory_source={},
            lustre_volume_handles=self.lustre_volume_handles,
            lustre_csi_driver=AZURE.managed_lustre.csi_driver if lustre is not None else None,
            lustre_volume_attributes=self.lustre_volume_attributes)
        self.register_outputs({"cluster": self.cluster.name, "vnet": self.vnet.id})

    def _opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self.azure_provider, depends_on=depends_on or [])

    # --- network ------------------------------------------------------------------------------------------

    def _network(self, name: str) -> None:
        cfg, rg = self.cfg, self.group.name
        public_ip = network.PublicIPAddress(
            f"{name}-nat", resource_group_name=rg, public_ip_address_name=f"{self.spec.cluster_name}-nat",
            sku={"name": "Standard"}, public_ip_allocation_method="Static", zones=[cfg.zone], tags=self.tags,
            opts=self._opts())
        self.nat = network.NatGateway(
            f"{name}-nat", resource_group_name=rg, nat_gateway_name=f"{self.spec.cluster_name}-nat",
            sku={"name": "Standard"}, public_ip_addresses=[{"id": public_ip.id}], zones=[cfg.zone], tags=self.tags,
            opts=self._opts())
        self.vnet = network.VirtualNetwork(
            f"{name}-vnet", resource_group_name=rg, virtual_network_name=self.spec.cluster_name,
            address_space={"address_prefixes": [cfg.vnet_cidr]}, tags=self.tags, opts=self._opts())
        # Subnets as their own resources (not inline): AKS and AMLFS attach to them by id.
        self.nodes_subnet = network.Subnet(
            f"{name}-nodes", resource_group_name=rg, virtual_network_name=self.vnet.name, subnet_name="nodes",
            address_prefix=self.plan["nodes"], nat_gateway={"id": self.nat.id},
            default_outbound_access=False, opts=self._opts())
        self.lustre_subnets: dict[str, network.Subnet] = {}
        for role, prefix in self.plan.items():
            if not role.startswith("lustre-"):
                continue
            nsg = network.NetworkSecurityGroup(
                f"{name}-{role}", resource_group_name=rg,
                network_security_group_name=f"{self.spec.cluster_name}-{role}",
                security_rules=lustre_security_rules(self.plan["nodes"], prefix, cfg.location), tags=self.tags,
                opts=self._opts())
            # Outbound through the NAT gateway: AMLFS needs its path to Azure's services (its prerequisites) and a
            # subnet without default outbound access has none otherwise
            # (https://learn.microsoft.com/en-us/azure/virtual-network/ip-services/default-outbound-access).
            self.lustre_subnets[role.removeprefix("lustre-")] = network.Subnet(
                f"{name}-{role}", resource_group_name=rg, virtual_network_name=self.vnet.name, subnet_name=role,
                address_prefix=prefix, network_security_group={"id": nsg.id}, nat_gateway={"id": self.nat.id},
                default_outbound_access=False,
                opts=self._opts([self.nodes_subnet]))

    # --- AKS ----------------------------------------------------------------------------------------------

    def _infiniband_feature(self, name: str) -> None:
        """Registers AKSInfinibandSupport when a pool is on InfiniBand, before the pools exist: a resource, not a
        preflight, so the first ``pulumi up`` gets it without a manual ``az feature register``. It is a
        subscription-wide setting other clusters may rely on: kept when the stack is destroyed."""
        self.infiniband_feature: features.SubscriptionFeatureRegistration | None = None
        if not any(p.fabric == "infiniband" for p in self.spec.pools):
            return
        namespace, feature = INFINIBAND_FEATURE
        self.infiniband_feature = features.SubscriptionFeatureRegistration(
            f"{name}-infiniband", provider_namespace=namespace, feature_name=feature, properties={},
            opts=pulumi.ResourceOptions(parent=self, provider=self.azure_provider, retain_on_delete=True))

    def _cluster(self, name: str) -> None:
        cfg, spec = self.cfg, self.spec
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-cluster", resource_group_name=self.group.name, resource_name_=f"{spec.cluster_name}-cluster",
            tags=self.tags, opts=self._opts())
        role = self.group.id.apply(lambda gid: f"{gid.split('/resourceGroups/')[0]}/providers/"
                                               f"Microsoft.Authorization/roleDefinitions/{NETWORK_CONTRIBUTOR}")
        assignment = authorization.RoleAssignment(
            f"{name}-network", scope=self.vnet.id, principal_id=identity.principal_id,
            principal_type="ServicePrincipal", role_definition_id=role, opts=self._opts())
        self.system_pool = spec.system_pools[0]
        api: dict[str, Any] = {"enable_private_cluster": cfg.private_cluster}
        if cfg.authorized_ip_ranges:
            api["authorized_ip_ranges"] = cfg.authorized_ip_ranges
        extra: dict[str, Any] = {}
        if cfg.ssh_public_key is not None:
            extra["linux_profile"] = {"admin_username": cfg.ssh_user,
                                      "ssh": {"public_keys": [{"key_data": cfg.ssh_public_key}]}}
        if cfg.long_term_support:
            # AKS long-term support: the Premium tier and the LTS plan
            # (https://learn.microsoft.com/en-us/azure/aks/long-term-support).
            extra.update(sku={"name": "Base", "tier": "Premium"}, support_plan="AKSLongTermSupport")
        self.cluster = containerservice.ManagedCluster(
            name, resource_group_name=self.group.name, resource_name_=spec.cluster_name, location=cfg.location,
            dns_prefix=spec.cluster_name, kubernetes_version=cfg.kubernetes_version,
            node_resource_group=AZURE_NODE_GROUP.format(cluster=spec.cluster_name),
            identity={"type": "UserAssigned", "user_assigned_identities": [identity.id]},
            aad_profile={"managed": True, "enable_azure_rbac": True,
                         "admin_group_object_ids": cfg.admin_group_object_ids},
            disable_local_accounts=True, enable_rbac=True, api_server_access_profile=api,
            network_profile={"network_plugin": "azure", "network_plugin_mode": "overlay",
                             "network_dataplane": "cilium", "network_policy": "cilium",
                             "outbound_type": "userAssignedNATGateway", "pod_cidr": POD_CIDR,
                             "service_cidr": SERVICE_CIDR, "dns_service_ip": DNS_SERVICE_IP},
            agent_pool_profiles=[{"name": self.system_pool.name, **self._pool_args(self.system_pool)}],
            tags=self.tags, **extra,
            opts=self._opts([assignment, self.nodes_subnet,
                             *([self.infiniband_feature] if self.infiniband_feature is not None else [])]))

    def _pool_args(self, pool: NodePool) -> dict[str, Any]:
        """Arguments of an agent pool (the same for the cluster's System pool and separate pools)."""
        gpu = pool.role == "gpu"
        labels = node_labels(pool, operator_components=self.operator_components)
        if pool.fabric == "infiniband":
            labels[FABRIC_LABEL] = "infiniband"
        size = pool.size
        args: dict[str, Any] = {
            "mode": "System" if pool.role == "system" else "User",
            "type": "VirtualMachineScaleSets",
            "vm_size": pool.instance_type,
            "os_type": "Linux",
            "os_sku": node_os_sku(self.spec, pool),
            "vnet_subnet_id": self.nodes_subnet.id,
            "enable_node_public_ip": False,
            "node_labels": labels,
            "node_taints": [taint_spec(t) for t in node_taints(pool)],
            "tags": {**self.tags, POOL_TAG: pool.name, ROLE_TAG: pool.role},
            # GPU pools in the zone of the file systems; a system pool spreads over all three.
            "availability_zones": [self.cfg.zone] if gpu else ["1", "2", "3"],
        }
        if pool.min is not None and pool.max is not None and pool.count is None:
            args.update(enable_auto_scaling=True, min_count=pool.min, max_count=pool.max, count=size)
        else:
            args["count"] = size
        if gpu:
            # AKS installs its own NVIDIA driver on GPU sizes unless told not to: the lock's driver comes from
            # the GPU Operator (host_management: operator) or the Ansible roles.
            args["gpu_profile"] = {"driver": "None"}
        if pool.capacity.type == "reservation":
            args["capacity_reservation_group_id"] = pool.capacity.reservation_id
        return args

    def _agent_pool(self, name: str, pool: NodePool) -> containerservice.AgentPool:
        return containerservice.AgentPool(
            f"{name}-{pool.name}", resource_group_name=self.group.name, resource_name_=self.cluster.name,
            agent_pool_name=pool.name, **self._pool_args(pool), opts=self._opts([self.cluster]))

    # --- storage ------------------------------------------------------------------------------------------

    def _lustre(self, name: str, tib: dict[str, int]
                ) -> tuple[dict[str, pulumi.Output[str]], dict[str, dict[str, pulumi.Input[str]]]]:
        lustre = self.spec.storage.lustre
        if lustre is None:
            return {}, {}
        handles: dict[str, pulumi.Output[str]] = {}
        attributes: dict[str, dict[str, pulumi.Input[str]]] = {}
        for kind, volume in (("datasets", lustre.datasets), ("checkpoints", lustre.checkpoints)):
            tier = AZURE.managed_lustre.tier(volume.throughput_mbps_per_tib)
            if tier is None:  # the stack validation refuses this already
                raise ValueError(f"no Azure Managed Lustre tier of {volume.throughput_mbps_per_tib} MB/s per TiB")
            fs = storagecache.AmlFilesystem(
                f"{name}-{kind}", resource_group_name=self.group.name,
                aml_filesystem_name=f"{self.spec.cluster_name}-{kind}", location=self.cfg.location,
                zones=[self.cfg.zone], sku={"name": tier.sku}, storage_capacity_ti_b=float(tib[kind]),
                filesystem_subnet=self.lustre_subnets[kind].id,
                maintenance_window={"day_of_week": "Sunday", "time_of_day_utc": "02:00"},
                tags={**self.tags, "gpufleet-volume": kind}, opts=self._opts())
            # The PV's volumeHandle only has to be unique in the cluster (the driver reads the volume from its
            # attributes): the mount source <MGS address>@tcp:/lustrefs<subdir> is, and says what it is.
            mgs = fs.client_info.apply(lambda info: info.mgs_address)
            handles[kind] = mgs.apply(_handle(volume.subdir))
            attributes[kind] = volume_attributes(mgs, volume.subdir)
        return handles, attributes

    # --- Kubernetes add-ons of this backend -----------------------------------------------------------------

    def _lustre_csi(self, spec: ClusterSpec, lock: Lock) -> k8s.helm.v3.Release:
        """Microsoft's Azure Managed Lustre CSI driver at the lock's chart version, from its OCI registry."""
        chart = charts.azurelustre_csi(lock)
        return k8s.helm.v3.Release(
            chart.name, name=chart.name, chart=f"{chart.repo}/{chart.name}", version=chart.version,
            namespace=chart.namespace, values=lustre_csi_values(spec),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider))

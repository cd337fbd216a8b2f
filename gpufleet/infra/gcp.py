"""The gcp backend: VPCs for GPUDirect, GKE Standard with a system pool and A3 GPU pools, Google Cloud Managed
Lustre (pulumi-gcp).

Only the program imports this module, and only for ``backend: gcp``: pulumi-gcp is the optional extra
``pip install '.[gcp]'`` (``gpufleet.infra.backends`` names the install step when it is missing). The SDK is
large: only the submodules used here are imported (its package ``__init__`` loads none of them eagerly).

What gets built (docs/clouds.md has the why of each piece):

- The nodes' VPC: one subnet with secondary ranges for pods and Services, Private Google Access, a Cloud Router
  with Cloud NAT (the only way out: no node has a public address).
- Per GPUDirect flavour in the stack, the extra networks its machine type's GPU NICs need (the count from
  ``gpufleet/catalog/clouds.yaml``): TCPX/TCPXO one VPC with one subnet per GPU NIC, RDMA one RoCE VPC (the
  zone's RoCE network profile) with one subnet per NIC plus a VPC for the second gVNIC; the flavour's MTU; a
  firewall rule allowing all traffic within each gVNIC VPC's subnets.
- GKE Standard, regional control plane, private nodes (private endpoint unless the stack asks otherwise),
  Dataplane V2 with multi-networking, Workload Identity, the Managed Lustre CSI add-on, a least-privilege node
  service account; the default pool removed.
- A node pool per pool: the system pool (COS, no taint), GPU pools with the machine type's GPUs as guest
  accelerator, GKE's driver installation disabled (Google's COS installer or the GPU Operator installs it, per
  host_management), one additional node network per GPU NIC, gVNIC, compact placement (on-demand) or a specific
  reservation, taints and labels at registration, private nodes.
- In the cluster: a ``GKENetworkParamSet`` and a ``Network`` per extra network (what pods name in their
  ``networking.gke.io/interfaces`` annotation), Google's COS driver installer (host_management gke) and the
  flavour's NCCL plugin installers, each from a manifest pinned by commit in the catalog.
- Managed Lustre: one instance for datasets, one for checkpoints (tier and capacity from the stack, checked
  against the catalog), in the nodes' VPC through private services access, Lustre's port 988 open from its range;
  the platform layer's PVs use GKE's driver and its PV format.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import compute, container, lustre, projects, serviceaccount, servicenetworking
from pulumi_gcp import provider as gcp_provider

from gpufleet.catalog.clouds import GCP, GcpMachineType, GpuDirect
from gpufleet.infra.contract import BackendHandles, PoolHandle
from gpufleet.infra.scheduling import FABRIC_LABEL, node_labels, node_taints
from gpufleet.inventory.writer import GCP_CLUSTER_LABEL, GCP_HOSTS_LABEL, GCP_POOL_LABEL, GCP_ROLE_LABEL
from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec, Gcp, NodePool, gke_image

#: GKE spells taint effects in its API's enum.
GKE_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
#: Node label that keeps GKE's own GPU device plugin off a node (the GPU Operator's runs there instead; NVIDIA's
#: and Google's GPU Operator pages).
NO_GKE_DEVICE_PLUGIN = "gke-no-default-nvidia-gpu-device-plugin"
#: GCE labels (resource_labels) on every node VM: cluster, pool, role and host management, as the other clouds'
#: tags; the gcp_compute inventory file filters and groups by them (one copy: gpufleet.inventory.writer).
CLUSTER_LABEL = GCP_CLUSTER_LABEL
#: One role instead of the default compute service account's Editor: what a GKE node needs
#: (https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts#default-gke-service-agent).
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
PODS_RANGE = "pods"
SERVICES_RANGE = "services"
MULTI_NETWORK_API = "networking.gke.io/v1"


def gpu_networks(cluster: str, mt: GcpMachineType, flavour: GpuDirect, cidr: str) -> list[dict[str, Any]]:
    """The extra networks of a machine type, in attachment order: name, VPC, subnet, CIDR, device mode.

    TCPX/TCPXO: one VPC per GPU NIC. RDMA: the extra gVNICs' VPCs (NetDevice) first, then one RoCE VPC holding
    one subnet per GPU NIC (RDMA). Subnets are consecutive /24s of ``cidr``, one set per flavour."""
    blocks = iter(ipaddress.IPv4Network(cidr).subnets(new_prefix=24))
    out: list[dict[str, Any]] = []
    for i in range(mt.extra_gvnics):
        vpc = f"{cluster}-{mt.gpudirect}-gvnic-{i + 1}"
        out.append({"name": f"gvnic-{i + 1}", "vpc": vpc, "subnet": f"{vpc}-sub", "cidr": str(next(blocks)),
                    "device_mode": "NetDevice", "profile": None})
    for i in range(mt.gpu_nics):
        if flavour.device_mode == "RDMA":
            vpc = f"{cluster}-{mt.gpudirect}-net"
            out.append({"name": f"rdma-{i}", "vpc": vpc, "subnet": f"{vpc}-sub-{i}", "cidr": str(next(blocks)),
                        "device_mode": "RDMA", "profile": flavour.network_profile})
        else:
            vpc = f"{cluster}-{mt.gpudirect}-{i + 1}"
            out.append({"name": f"vpc{i + 1}", "vpc": vpc, "subnet": f"{vpc}-sub", "cidr": str(next(blocks)),
                        "device_mode": "NetDevice", "profile": None})
    return out


def kubeconfig_text(name: str, endpoint: str, ca: str) -> str:
    """A kubeconfig that authenticates with ``gke-gcloud-auth-plugin`` (the caller's gcloud credentials)."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": f"https://{endpoint}", "certificate-authority-data": ca}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "gke-gcloud-auth-plugin",
            "provideClusterInfo": True, "interactiveMode": "Never"}}}]})


def kubeconfig(cluster: container.Cluster, cfg: Gcp) -> pulumi.Output[str]:
    """The provider's kubeconfig, on the private endpoint when the stack keeps the API server private."""

    def render(args: list[Any]) -> str:
        name, public, private, ca = args
        return kubeconfig_text(name, private if cfg.private_endpoint else public, ca)

    return pulumi.Output.secret(pulumi.Output.all(
        cluster.name, cluster.endpoint, cluster.private_cluster_config.private_endpoint,
        cluster.master_auth.cluster_ca_certificate).apply(render))


def _mount_attributes(mount_point: str) -> dict[str, str]:
    """GKE's Lustre PV volumeAttributes from the instance's mount point ``<ip>@tcp:/<fsname>``."""
    nid, fsname = mount_point.split(":/", 1)
    return {"ip": nid.split("@", 1)[0], "filesystem": fsname}


#: Suffixes that tell the two instances' file system names apart (a name is 1-8 letters and digits).
FSNAME_SUFFIX = {"datasets": "ds", "checkpoints": "ck"}


def instance_fsnames(fsname: str) -> dict[str, str]:
    """One Lustre file system name per Managed Lustre instance: volumes of different instances with the same
    ``filesystem`` name cannot be mounted on one node (a limitation of GKE's Managed Lustre CSI driver,
    https://cloud.google.com/kubernetes-engine/docs/concepts/managed-lustre#limitations), and every training
    pod mounts both. The stack's name keeps its first six characters, a two-letter suffix names the volume."""
    return {kind: f"{fsname[:6]}{suffix}" for kind, suffix in FSNAME_SUFFIX.items()}


class GcpCluster(pulumi.ComponentResource):
    """Everything of a stack that lives in Google Cloud, and the Kubernetes provider of its GKE cluster."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:backend:GcpCluster", name, None, opts)
        cfg = spec.gcp
        if cfg is None:  # load_spec refuses this already; kept for direct callers
            raise ValueError("backend gcp needs gpufleet:gcp")
        self.cfg, self.spec = cfg, spec
        self.operator_components = lock.operator_components
        self.gcp_provider = gcp_provider.Provider(
            f"{name}-gcp", project=cfg.project, region=cfg.region, zone=cfg.zone,
            default_labels={CLUSTER_LABEL: spec.cluster_name}, opts=pulumi.ResourceOptions(parent=self))
        types = {p.instance_type or "" for p in spec.gpu_pools if p.fabric == "gpudirect"}
        self.flavours = {GCP.machine_types[t].gpudirect: GCP.machine_types[t] for t in sorted(types)}
        self._network(name)
        self._gpu_networks(name)
        self._cluster(name)
        self.node_pools = [self._pool(name, p) for p in spec.pools]
        self.lustre_instances: dict[str, lustre.Instance] = {}
        handles, attributes = self._lustre(name)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=kubeconfig(self.cluster, cfg), enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster, *self.node_pools]))
        self._in_cluster(spec)
        self.handles = BackendHandles(
            provider=self.provider, pools=[PoolHandle(p, (), taints_at_registration=True) for p in spec.pools],
            inventory_source={}, lustre_volume_handles=handles,
            lustre_csi_driver=GCP.managed_lustre.csi_driver if spec.storage.lustre is not None else None,
            lustre_volume_attributes=attributes)
        self.register_outputs({"cluster": self.cluster.name, "network": self.network.id})

    def _opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self.gcp_provider, depends_on=depends_on or [])

    # --- networks -----------------------------------------------------------------------------------------

    def _network(self, name: str) -> None:
        cfg = self.cfg
        # Managed Lustre shares this VPC with the nodes: Google's MTU for it; without Lustre, TCPX/TCPXO's (their
        # blueprints give the primary VPC the GPU VPCs' MTU too).
        mtus = [m for f in self.flavours if (m := GCP.gpudirect[f].mtu) is not None]
        mtu = GCP.managed_lustre.vpc_mtu if self.spec.storage.lustre is not None else max(mtus, default=None)
        extra: dict[str, Any] = {} if mtu is None else {"mtu": mtu}
        self.network = compute.Network(
            f"{name}-net", name=f"{self.spec.cluster_name}-net", auto_create_subnetworks=False,
            routing_mode="REGIONAL", **extra, opts=self._opts())
        self.subnet = compute.Subnetwork(
            f"{name}-nodes", name=f"{self.spec.cluster_name}-nodes", network=self.network.id, region=cfg.region,
            ip_cidr_range=cfg.subnet_cidr, private_ip_google_access=True,
            secondary_ip_ranges=[{"range_name": PODS_RANGE, "ip_cidr_range": cfg.pods_cidr},
                                 {"range_name": SERVICES_RANGE, "ip_cidr_range": cfg.services_cidr}],
            opts=self._opts())
        router = compute.Router(f"{name}-router", name=f"{self.spec.cluster_name}-router",
                                network=self.network.id, region=cfg.region, opts=self._opts())
        compute.RouterNat(f"{name}-nat", name=f"{self.spec.cluster_name}-nat", router=router.name,
                          region=cfg.region, nat_ip_allocate_option="AUTO_ONLY",
                          source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
                          log_config={"enable": True, "filter": "ERRORS_ONLY"}, opts=self._opts())

    def _gpu_networks(self, name: str) -> None:
        """The extra VPCs and subnets of every GPUDirect flavour in the stack, keyed by flavour."""
        cfg = self.cfg
        self.extra_networks: dict[str, list[dict[str, Any]]] = {}
        self.extra_subnets: dict[str, list[compute.Subnetwork]] = {}
        blocks = list(ipaddress.IPv4Network(cfg.gpu_cidr).subnets(new_prefix=20))
        for n, (key, mt) in enumerate(self.flavours.items()):
            flavour = GCP.gpudirect[key]
            nets = gpu_networks(self.spec.cluster_name, mt, flavour, str(blocks[n]))
            vpcs: dict[str, compute.Network] = {}
            subnets: list[compute.Subnetwork] = []
            for net in nets:
                if net["vpc"] not in vpcs:
                    args: dict[str, Any] = {"name": net["vpc"], "auto_create_subnetworks": False,
                                            "routing_mode": "REGIONAL"}
                    if net["profile"] is not None:
                        args["network_profile"] = (f"projects/{cfg.project}/global/networkProfiles/"
                                                   + net["profile"].format(zone=cfg.zone))
                    elif flavour.mtu is not None:
                        args["mtu"] = flavour.mtu
                    # Resource names are the cloud names (they start with the cluster name, as ``name`` is).
                    vpcs[net["vpc"]] = compute.Network(net["vpc"], **args, opts=self._opts())
                    if net["device_mode"] == "NetDevice":
                        self._gpu_firewall(net, vpcs[net["vpc"]], [n["cidr"] for n in nets if n["vpc"] == net["vpc"]])
                subnets.append(compute.Subnetwork(net["subnet"], name=net["subnet"], network=vpcs[net["vpc"]].id,
                                                  region=cfg.region, ip_cidr_range=net["cidr"], opts=self._opts()))
            self.extra_networks[key] = nets
            self.extra_subnets[key] = subnets

    def _gpu_firewall(self, net: dict[str, Any], vpc: compute.Network, cidrs: list[str]) -> None:
        """GPU traffic between the nodes of a gVNIC GPU VPC: every protocol within its subnets (a VPC denies
        ingress by default). Google's A3 Ultra guide creates no rule on the RoCE VPC (RDMA, not IP)."""
        compute.Firewall(f"{net['vpc']}-internal", name=f"{net['vpc']}-internal", network=vpc.id, direction="INGRESS",
                         allows=[{"protocol": "tcp", "ports": ["0-65535"]}, {"protocol": "udp", "ports": ["0-65535"]},
                                 {"protocol": "icmp"}],
                         source_ranges=cidrs, opts=self._opts())

    # --- GKE ----------------------------------------------------------------------------------------------

    def _cluster(self, name: str) -> None:
        cfg, spec = self.cfg, self.spec
        self.node_account = serviceaccount.Account(
            f"{name}-nodes", account_id=f"{spec.cluster_name}-nodes"[:30], display_name=f"{spec.cluster_name} nodes",
            opts=self._opts())
        member = projects.IAMMember(f"{name}-nodes", project=cfg.project, role=NODE_ROLE,
                                    member=self.node_account.email.apply(lambda e: f"serviceAccount:{e}"),
                                    opts=self._opts())
        private: dict[str, Any] = {"enable_private_nodes": True, "enable_private_endpoint": cfg.private_endpoint,
                                   "master_ipv4_cidr_block": cfg.master_cidr}
        extra: dict[str, Any] = {"private_cluster_config": private}
        if cfg.authorized_networks:
            extra["master_authorized_networks_config"] = {
                "cidr_blocks": [{"cidr_block": c} for c in cfg.authorized_networks]}
        if cfg.kubernetes_version is not None:
            extra["min_master_version"] = cfg.kubernetes_version
        self.cluster = container.Cluster(
            name, name=spec.cluster_name, location=cfg.region, node_locations=[cfg.zone],
            network=self.network.id, subnetwork=self.subnet.id, networking_mode="VPC_NATIVE",
            ip_allocation_policy={"cluster_secondary_range_name": PODS_RANGE,
                                  "services_secondary_range_name": SERVICES_RANGE},
            # Dataplane V2 (it enforces the platform layer's NetworkPolicies) and multi-networking (the GPU NICs).
            datapath_provider="ADVANCED_DATAPATH", enable_multi_networking=True,
            release_channel={"channel": cfg.release_channel},
            workload_identity_config={"workload_pool": f"{cfg.project}.svc.id.goog"},
            # GKE's Managed Lustre CSI driver, on Lustre's own port 988 (nodes from 1.33.2-gke.4655000 on: the
            # legacy port 6988 only served instances with gke_support_enabled, which this backend does not make).
            addons_config={"lustre_csi_driver_config": {"enabled": self.spec.storage.lustre is not None,
                                                        "enable_legacy_lustre_port": False}},
            remove_default_node_pool=True, initial_node_count=1,
            node_config={"service_account": self.node_account.email,
                         "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"]},
            **extra, opts=self._opts([member, *[s for subs in self.extra_subnets.values() for s in subs]]))

    def _pool(self, name: str, pool: NodePool) -> container.NodePool:
        cfg = self.cfg
        gpu = pool.role == "gpu"
        mt = GCP.machine_types.get(pool.instance_type or "")
        labels = node_labels(pool, operator_components=self.operator_components)
        image = gke_image(pool)
        ansible = pool.host_management == "ansible"
        node_config: dict[str, Any] = {
            "machine_type": pool.instance_type,
            "image_type": image,
            "service_account": self.node_account.email,
            "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            "workload_metadata_config": {"mode": "GKE_METADATA"},
            # Managed Lustre mounts on secure-boot nodes of GPU machine types only (its GKE limitations). Ansible
            # pools have no Managed Lustre (the stack refuses it) and their NVIDIA module is built by DKMS, unsigned:
            # secure boot would refuse to load it.
            "shielded_instance_config": {
                "enable_secure_boot": not ansible and (gpu or self.spec.storage.lustre is None),
                "enable_integrity_monitoring": True},
            "resource_labels": {CLUSTER_LABEL: self.spec.cluster_name, GCP_POOL_LABEL: pool.name,
                                GCP_ROLE_LABEL: pool.role, GCP_HOSTS_LABEL: pool.host_management},
            "taints": [{"key": t["key"], "value": t["value"], "effect": GKE_EFFECT[t["effect"]]}
                       for t in node_taints(pool)],
        }
        network_config: dict[str, Any] = {"enable_private_nodes": True}
        extra: dict[str, Any] = {"node_config": node_config, "network_config": network_config}
        if gpu and mt is not None and mt.accelerator is not None:
            node_config["guest_accelerators"] = [{
                "type": mt.accelerator, "count": mt.gpus,
                # GKE's installer follows a channel, never the lock's version: off. Google's COS installer
                # (host_management gke) or the GPU Operator's driver container (operator) installs it.
                "gpu_driver_installation_config": {"gpu_driver_version": "INSTALLATION_DISABLED"}}]
            # The GPU Operator's device plugin, not GKE's, advertises the GPUs (both would).
            labels[NO_GKE_DEVICE_PLUGIN] = "true"
            if image == "COS_CONTAINERD":
                node_config["gvnic"] = {"enabled": True}
            if pool.fabric == "gpudirect" and mt.gpudirect in self.extra_subnets:
                labels[FABRIC_LABEL] = "gpudirect"
                network_config["additional_node_network_configs"] = [
                    {"network": net["vpc"], "subnetwork": net["subnet"]} for net in self.extra_networks[mt.gpudirect]]
            flavour = GCP.gpudirect.get(mt.gpudirect)
            if pool.capacity.type == "on-demand" and (flavour is None or flavour.compact_placement):
                # Compact placement: the pool's VMs close together in the zone. A reservation's A3 capacity comes
                # densely colocated already (Google's A3 blueprints set no policy there); A3 Ultra has none.
                extra["placement_policy"] = {"type": "COMPACT"}
        if mt is not None and mt.boot_disk is not None:
            node_config["disk_type"] = mt.boot_disk
        if pool.capacity.type == "reservation":
            node_config["reservation_affinity"] = {
                "consume_reservation_type": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name", "values": [pool.capacity.reservation_id]}
        node_config["labels"] = labels
        size = pool.size
        if pool.min is not None and pool.max is not None and pool.count is None:
            extra["autoscaling"] = {"min_node_count": pool.min, "max_node_count": pool.max}
            extra["initial_node_count"] = size
        else:
            extra["node_count"] = size
        return container.NodePool(
            f"{name}-{pool.name}", name=pool.name, cluster=self.cluster.id, location=cfg.region,
            # GPU pools and the system pool in the zone of the Lustre instances (GPU placement is zonal).
            node_locations=[cfg.zone], management={"auto_repair": True, "auto_upgrade": True}, **extra,
            opts=self._opts([self.cluster]))

    # --- storage ------------------------------------------------------------------------------------------

    def _lustre(self, name: str) -> tuple[dict[str, pulumi.Output[str]], dict[str, dict[str, pulumi.Output[str]]]]:
        lustre_spec = self.spec.storage.lustre
        if lustre_spec is None:
            return {}, {}
        cfg = self.cfg
        ml = GCP.managed_lustre
        # Managed Lustre sits behind private services access: a reserved range peered to Google's service network.
        net = ipaddress.IPv4Network(cfg.lustre_cidr)
        reserved = compute.GlobalAddress(
            f"{name}-lustre-range", name=f"{self.spec.cluster_name}-lustre", purpose="VPC_PEERING",
            address_type="INTERNAL", address=str(net.network_address), prefix_length=net.prefixlen,
            network=self.network.id, opts=self._opts())
        peering = servicenetworking.Connection(
            f"{name}-lustre-peering", network=self.network.id, service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[reserved.name], opts=self._opts())
        compute.Firewall(f"{name}-lustre", name=f"{self.spec.cluster_name}-lustre", network=self.network.id,
                         direction="INGRESS", allows=[{"protocol": "tcp", "ports": [str(p) for p in ml.ports]}],
                         source_ranges=[cfg.lustre_cidr], opts=self._opts())
        handles: dict[str, pulumi.Output[str]] = {}
        attributes: dict[str, dict[str, pulumi.Output[str]]] = {}
        fsnames = instance_fsnames(lustre_spec.fsname)
        for kind, volume in (("datasets", lustre_spec.datasets), ("checkpoints", lustre_spec.checkpoints)):
            instance_id = f"{self.spec.cluster_name}-{kind}"
            inst = lustre.Instance(
                f"{name}-{kind}", instance_id=instance_id, location=cfg.zone, filesystem=fsnames[kind],
                capacity_gib=str(volume.capacity_gib),
                per_unit_storage_throughput=str(volume.throughput_mbps_per_tib),
                network=self.network.id, gke_support_enabled=False,
                labels={CLUSTER_LABEL: self.spec.cluster_name, "gpufleet-volume": kind},
                opts=self._opts([peering]))
            self.lustre_instances[kind] = inst
            # GKE's driver's PV: volumeHandle <project>/<zone>/<instance>, the address and fsname as attributes.
            handles[kind] = pulumi.Output.from_input(f"{cfg.project}/{cfg.zone}/{instance_id}")
            mount = inst.mount_point.apply(_mount_attributes)
            attributes[kind] = {"ip": mount.apply(lambda m: m["ip"]),
                                "filesystem": mount.apply(lambda m: m["filesystem"])}
        return handles, attributes

    # --- Kubernetes objects of this backend ---------------------------------------------------------------

    def _in_cluster(self, spec: ClusterSpec) -> None:
        opts = pulumi.ResourceOptions(parent=self, provider=self.provider)
        for key, nets in self.extra_networks.items():
            for net in nets:
                params = k8s.apiextensions.CustomResource(
                    f"gke-network-params-{key}-{net['name']}", api_version=MULTI_NETWORK_API,
                    kind="GKENetworkParamSet", metadata={"name": f"{key}-{net['name']}"},
                    spec={"vpc": net["vpc"], "vpcSubnet": net["subnet"], "deviceMode": net["device_mode"]},
                    opts=opts)
                k8s.apiextensions.CustomResource(
                    f"gke-network-{key}-{net['name']}", api_version=MULTI_NETWORK_API, kind="Network",
                    metadata={"name": f"{key}-{net['name']}"},
                    spec={"type": "Device", "parametersRef": {"group": "networking.gke.io",
                                                              "kind": "GKENetworkParamSet",
                                                              "name": f"{key}-{net['name']}"}},
                    opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[params]))
        manifests: list[str] = []
        if any(p.host_management == "gke" for p in spec.gpu_pools):
            manifests.append(GCP.cos_driver_installer.manifest)
        for key in self.flavours:
            manifests += GCP.gpudirect[key].installers
        for url in manifests:
            k8s.yaml.v2.ConfigFile(f"gke-{url.rsplit('/', 1)[-1].removesuffix('.yaml')}", file=url, opts=opts)

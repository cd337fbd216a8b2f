"""gpufleet's mandatory policies, as plain functions over (resource type, props) plus pulumi-policy adapters.

Props are the resources' inputs as the engine reports them (camelCase, as in Kubernetes manifests).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

#: The cloud catalog (machine types and their fabric), read where gpufleet keeps it: one copy of the facts.
CLOUD_CATALOG = Path(__file__).resolve().parents[1] / "gpufleet" / "catalog" / "clouds.yaml"

ROLE_LABEL = "gpufleet.io/role"
VOLUME_LABEL = "gpufleet.io/volume"
GPU_TAINT_KEY = "nvidia.com/gpu"
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")

NODE_PATCH = "kubernetes:core/v1:NodePatch"
POOL_LABEL = "gpufleet.io/pool"
#: Existing nodes get their taints from a Job running gpufleet/infra/node_taints.py (read-modify-write),
#: never a patch; its arguments name the taints (``--taint key=value:effect``).
JOB = "kubernetes:batch/v1:Job"
HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")
PV = "kubernetes:core/v1:PersistentVolume"
# Cloud node pools.
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
AKS_AGENT_POOL = "azure-native:containerservice:AgentPool"
#: An AKS cluster carries its first (System) pool inline, as agentPoolProfiles.
AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"
FABRIC_LABEL = "gpufleet.io/fabric"
AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
GCP_NETWORK = "gcp:compute/network:Network"
GCP_LUSTRE = "gcp:lustre/instance:Instance"
ANY_IPV4 = "0.0.0.0/0"


def _get(props: Mapping[str, Any], *path: str) -> Any:
    cur: Any = props
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def node_labels(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """The node labels a node or node pool resource declares (empty when it is not one)."""
    labels: Any = None
    if resource_type == NODE_PATCH:
        labels = _get(props, "metadata", "labels")
    elif resource_type == EKS_NODE_GROUP:
        labels = props.get("labels")
    elif resource_type == GKE_NODE_POOL:
        labels = _get(props, "nodeConfig", "labels")
    elif resource_type == AKS_AGENT_POOL:
        labels = props.get("nodeLabels")
    elif resource_type in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        labels = props.get("tags")
    return labels if isinstance(labels, Mapping) else {}


def pool_role(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The gpufleet role label of a node or node pool resource, None when it is not one of ours."""
    role = node_labels(resource_type, props).get(ROLE_LABEL)
    return str(role) if role is not None else None


def _has_gpu_taint(resource_type: str, props: Mapping[str, Any]) -> bool:
    if resource_type == NODE_PATCH:
        return True  # existing nodes: gpu_nodes_tainted, over the whole stack (the taint is in a Job)
    if resource_type in (EKS_NODE_GROUP, GKE_NODE_POOL):
        taints = (props.get("taints") if resource_type == EKS_NODE_GROUP
                  else _get(props, "nodeConfig", "taints")) or []
        return any(t.get("key") == GPU_TAINT_KEY and t.get("effect") == "NO_SCHEDULE" for t in taints)
    if resource_type == AKS_AGENT_POOL:
        return any(str(t).startswith(f"{GPU_TAINT_KEY}=") and str(t).endswith(":NoSchedule")
                   for t in props.get("nodeTaints") or [])
    return True


def gpu_pool_tainted(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if pool_role(resource_type, props) != "gpu" or resource_type in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        return []
    if _has_gpu_taint(resource_type, props):
        return []
    return [f"GPU nodes must carry the taint {GPU_TAINT_KEY}=present:NoSchedule so that only GPU "
            f"workloads land there; add it to the pool's taints"]


def node_patch_without_taints(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == NODE_PATCH and _get(props, "spec", "taints") is not None:
        return ["a node patch must not set spec.taints: the list is atomic under server-side apply, so the "
                "patch conflicts with the kubelet's and the node controller's taints, or deletes them when "
                "forced; taint existing nodes by read-modify-write (gpufleet's taint Job, kubectl taint) instead"]
    return []


def _job_taints(props: Mapping[str, Any]) -> tuple[str | None, set[str]]:
    pool = (_get(props, "metadata", "labels") or {}).get(POOL_LABEL)
    pod = _get(props, "spec", "template", "spec") or {}
    args = {a for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
            for a in (c.get("command") or [])}
    return pool, args


def gpu_nodes_tainted(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Every GPU node patched by the program belongs to a pool whose taint Job sets the GPU taint."""
    items = list(resources)
    tainted = {pool for t, p in items if t == JOB
               for pool, args in [_job_taints(p)] if f"{GPU_TAINT_KEY}=present:NoSchedule" in args}
    out = []
    for t, p in items:
        if t == NODE_PATCH and pool_role(t, p) == "gpu":
            pool = (_get(p, "metadata", "labels") or {}).get(POOL_LABEL)
            if pool not in tainted:
                out.append(f"GPU node {_get(p, 'metadata', 'name')} (pool {pool}) gets no "
                           f"{GPU_TAINT_KEY}=present:NoSchedule: no taint Job for its pool sets it")
    return out


def helm_pinned(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type not in HELM_TYPES:
        return []
    version = props.get("version")
    chart = props.get("chart", "?")
    if not isinstance(version, str) or not EXACT_VERSION.match(version):
        return [f"Helm chart {chart} must be pinned to an exact version (got {version!r})"]
    return []


def _true(value: Any) -> bool:
    # pulumi-aws types some booleans of launch templates as strings ("true"/"false").
    return value is True or (isinstance(value, str) and value.lower() == "true")


@cache
def _catalog() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(CLOUD_CATALOG.read_text())
    return raw


def _efa_interfaces() -> dict[str, int]:
    return {name: int(t["efa_interfaces"]) for name, t in _catalog()["aws"]["instance_types"].items()}


def _infiniband_hcas() -> dict[str, int]:
    return {name: int(t["infiniband_hcas"]) for name, t in _catalog()["azure"]["vm_sizes"].items()}


def _gpudirect_networks() -> dict[str, tuple[str, int]]:
    """Machine type -> (GPUDirect flavour, extra networks a node pool attaches: GPU NICs and extra gVNICs)."""
    return {name: (str(t["gpudirect"]), int(t["gpu_nics"]) + int(t.get("extra_gvnics", 0)))
            for name, t in _catalog()["gcp"]["machine_types"].items()}


def gpu_pool_has_its_fabric(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A GPU pool attaches every fabric interface its machine type supports (EFA on AWS; on Azure the ND sizes'
    InfiniBand, which the platform layer's RDMA device plugin exposes on pools labelled for it; on Google Cloud
    one additional node network per GPUDirect NIC): without them NCCL falls back to TCP sockets over one NIC and
    multi-node training runs at a fraction of its bandwidth."""
    if pool_role(resource_type, props) != "gpu":
        return []
    if resource_type == GKE_NODE_POOL:
        mtype = str(_get(props, "nodeConfig", "machineType") or "")
        flavour, want = _gpudirect_networks().get(mtype, ("none", 0))
        have = len(_get(props, "networkConfig", "additionalNodeNetworkConfigs") or [])
        if have < want:
            return [f"{mtype} has {want} GPUDirect networks ({flavour}), the GPU node pool attaches {have}; set "
                    "the pool's fabric: gpudirect"]
        return []
    if resource_type == AKS_AGENT_POOL:
        size = str(props.get("vmSize") or "")
        hcas = _infiniband_hcas().get(size, 0)
        if hcas and (props.get("nodeLabels") or {}).get(FABRIC_LABEL) != "infiniband":
            return [f"{size} has {hcas} InfiniBand HCAs, the GPU pool is not labelled {FABRIC_LABEL}=infiniband "
                    "(no RDMA device plugin there); set the pool's fabric: infiniband"]
        return []
    if resource_type != AWS_LAUNCH_TEMPLATE:
        return []
    itype = str(props.get("instanceType") or "")
    want = _efa_interfaces().get(itype, 0)
    have = sum(1 for n in props.get("networkInterfaces") or [] if n.get("interfaceType") in ("efa", "efa-only"))
    if have < want:
        return [f"{itype} supports {want} EFA interfaces, the GPU pool's launch template attaches {have}; "
                "set the pool's fabric: efa"]
    return []


def no_public_ip_on_gpu_nodes(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == AKS_CLUSTER:
        return [msg for p in props.get("agentPoolProfiles") or [] if isinstance(p, Mapping)
                for msg in no_public_ip_on_gpu_nodes(AKS_AGENT_POOL, p)]
    if pool_role(resource_type, props) != "gpu":
        return []
    public = False
    if resource_type == AKS_AGENT_POOL:
        public = bool(props.get("enableNodePublicIP"))
    elif resource_type == AWS_INSTANCE:
        public = _true(props.get("associatePublicIpAddress"))
    elif resource_type == AWS_LAUNCH_TEMPLATE:
        public = any(_true(n.get("associatePublicIpAddress")) for n in props.get("networkInterfaces") or [])
    elif resource_type == GKE_NODE_POOL:
        # Unset inherits the cluster's setting: a GPU node pool says private itself.
        public = _get(props, "networkConfig", "enablePrivateNodes") is not True
    if public:
        return ["GPU nodes must not get public IP addresses; reach them through the management network"]
    return []


def _inline_pool_roles(resource_type: str, props: Mapping[str, Any]) -> set[str | None]:
    """Roles of the pools an AKS cluster carries inline (its System pool)."""
    if resource_type != AKS_CLUSTER:
        return set()
    return {pool_role(AKS_AGENT_POOL, p) for p in props.get("agentPoolProfiles") or [] if isinstance(p, Mapping)}


def system_pool_exists(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    items = list(resources)
    roles = {pool_role(t, p) for t, p in items} | {r for t, p in items for r in _inline_pool_roles(t, p)}
    if "gpu" in roles and "system" not in roles:
        return ["GPU pools need a system pool: operators and monitoring must not run on GPU nodes"]
    return []


def mount_source(csi: Mapping[str, Any]) -> Any:
    """What a Lustre PV mounts, ``<nid>@tcp:/<fsname>[/<dir>]``, whichever driver's format it is in: the clouds'
    drivers carry it in volumeAttributes (AWS FSx: dnsname, mountname; Azure Managed Lustre: mgs-ip-address,
    fs-name, sub-dir; GKE Managed Lustre: ip, filesystem), HPE's driver in the volumeHandle itself."""
    attrs = csi.get("volumeAttributes") or {}
    if any(not isinstance(v, str) for v in attrs.values()):
        return None  # not known yet (a preview of new file systems): nothing to compare
    if "dnsname" in attrs:
        return f"{attrs['dnsname']}@tcp:/{attrs.get('mountname', 'fsx')}"
    if "mgs-ip-address" in attrs:
        sub = str(attrs.get("sub-dir") or "").strip("/")
        return f"{attrs['mgs-ip-address']}@tcp:/{attrs.get('fs-name', '')}{'/' + sub if sub else ''}"
    if "ip" in attrs and "filesystem" in attrs:
        return f"{attrs['ip']}@tcp:/{attrs['filesystem']}"
    return csi.get("volumeHandle")


def volumes_distinct(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    handles: dict[str, set[str]] = {"datasets": set(), "checkpoints": set()}
    for type_, props in resources:
        if type_ != PV:
            continue
        kind = (_get(props, "metadata", "labels") or {}).get(VOLUME_LABEL)
        csi = _get(props, "spec", "csi") or {}
        # Both name the volume: the handle (a cloud's file system id) and what gets mounted.
        for handle in {csi.get("volumeHandle"), mount_source(csi)}:
            if kind in handles and isinstance(handle, str):
                handles[kind].add(handle)
    shared = sorted(handles["datasets"] & handles["checkpoints"])
    if shared:
        return [f"dataset and checkpoint volumes must be distinct; both use {', '.join(shared)}"]
    # One inside the other shares a path too: the read-only dataset mount would see checkpoint writes.
    nested = sorted(f"{a} / {b}" for a in handles["datasets"] for b in handles["checkpoints"]
                    if _inside(a, b) or _inside(b, a))
    if nested:
        return [f"dataset and checkpoint volumes must not contain each other: {', '.join(nested)}"]
    return []


def _inside(inner: str, outer: str) -> bool:
    """``<nids>:/<fsname><subdir>`` handle ``inner`` lies under ``outer`` (same file system, deeper path)."""
    return inner.startswith(outer.rstrip("/") + "/")


# --- cloud gaps (issue 32): what the providers' documentation asks and a stack could silently undo ----------


def efa_interfaces_on_every_card(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A multi-card instance type's EFA interfaces sit one per network card: stacked on one card they share its
    bandwidth (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html)."""
    if resource_type != AWS_LAUNCH_TEMPLATE or pool_role(resource_type, props) != "gpu":
        return []
    efa = [n for n in props.get("networkInterfaces") or [] if n.get("interfaceType") in ("efa", "efa-only")]
    cards = {int(n.get("networkCardIndex") or 0) for n in efa}
    if len(efa) > 1 and len(cards) < len(efa):
        return [f"the GPU launch template puts {len(efa)} EFA interfaces on {len(cards)} network card(s); put "
                "one on each card (networkCardIndex 0..n-1)"]
    return []


def gpu_launch_template_in_cluster_placement(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """EFA's low latency needs the instances in one cluster placement group
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html#placement-groups-cluster)."""
    if resource_type != AWS_LAUNCH_TEMPLATE or pool_role(resource_type, props) != "gpu":
        return []
    # A GPU pool without EFA (fabric: none) has no inter-node GPU traffic to keep close.
    efa = any(n.get("interfaceType") in ("efa", "efa-only") for n in props.get("networkInterfaces") or [])
    if efa and not _get(props, "placement", "groupName"):
        return ["the GPU launch template attaches EFA but no placement group; put the pool in a cluster "
                "placement group (placement.groupName)"]
    return []


def efa_group_references_itself(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """EFA's security group allows all traffic from and to itself, not from the world
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security)."""
    if resource_type != AWS_SG_INGRESS:
        return []
    if props.get("cidrIpv4") == ANY_IPV4 or props.get("cidrIpv6") == "::/0":
        return ["a security group ingress rule allows traffic from anywhere; EFA's rule references its own "
                "security group (referencedSecurityGroupId), reach anything else through the management network"]
    return []


def no_public_ip_on_launch(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type == AWS_SUBNET and _true(props.get("mapPublicIpOnLaunch")):
        return ["a subnet assigns public IP addresses on launch; set mapPublicIpOnLaunch: false (the NAT gateway "
                "gets the only public address)"]
    return []


def eks_endpoint_not_open_to_the_world(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A public EKS endpoint without publicAccessCidrs is open to 0.0.0.0/0, the API's default
    (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html)."""
    if resource_type != EKS_CLUSTER or not _true(_get(props, "vpcConfig", "endpointPublicAccess")):
        return []
    cidrs = _get(props, "vpcConfig", "publicAccessCidrs") or [ANY_IPV4]
    if ANY_IPV4 in cidrs:
        return ["the EKS API endpoint is public to 0.0.0.0/0; keep it private or list the networks that may "
                "reach it (gpufleet:aws.public_access_cidrs)"]
    return []


def infiniband_pool_in_one_zone(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """One InfiniBand pool is one scale set on one InfiniBand network: spread over zones it would be split."""
    if resource_type == AKS_CLUSTER:
        return [msg for p in props.get("agentPoolProfiles") or [] if isinstance(p, Mapping)
                for msg in infiniband_pool_in_one_zone(AKS_AGENT_POOL, p)]
    if resource_type != AKS_AGENT_POOL or (props.get("nodeLabels") or {}).get(FABRIC_LABEL) != "infiniband":
        return []
    zones = props.get("availabilityZones") or []
    if len(zones) != 1:
        return [f"an InfiniBand pool spans zones {zones or 'unset'}; keep it in one zone (gpufleet:azure.zone)"]
    return []


def gpudirect_pool_on_cos(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """GPUDirect pools run the node image the catalog names for their flavour (Container-Optimized OS: Google's
    GPUDirect guides and blueprints, cited in the catalog; an Ubuntu image has no GPUDirect NCCL plugin)."""
    if resource_type != GKE_NODE_POOL or pool_role(resource_type, props) != "gpu":
        return []
    if not _get(props, "networkConfig", "additionalNodeNetworkConfigs"):
        return []
    mtype = str(_get(props, "nodeConfig", "machineType") or "")
    flavour = _gpudirect_networks().get(mtype, ("none", 0))[0]
    want = (_catalog()["gcp"]["gpudirect"].get(flavour) or {}).get("image")
    image = str(_get(props, "nodeConfig", "imageType") or "")
    if want and image.upper() != str(want).upper():
        return [f"GPUDirect ({flavour}) pool on image {image or 'unset'}: it runs on {want} only; use "
                "host_management: gke"]
    return []


def gke_gpu_networks_distinct(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """TCPX/TCPXO want one VPC per GPU NIC; RDMA NICs share one RoCE VPC, one subnet each
    (https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx)."""
    if resource_type != GKE_NODE_POOL or pool_role(resource_type, props) != "gpu":
        return []
    nets = _get(props, "networkConfig", "additionalNodeNetworkConfigs") or []
    if len(nets) < 2:
        return []
    mtype = str(_get(props, "nodeConfig", "machineType") or "")
    flavour = _gpudirect_networks().get(mtype, ("none", 0))[0]
    key = "network" if flavour in ("tcpx", "tcpxo") else "subnetwork"
    values = [str(n.get(key)) for n in nets]
    if len(set(values)) < len(values):
        return [f"the GPU node pool attaches its {len(values)} additional networks through "
                f"{len(set(values))} distinct {key}(s); each GPU NIC needs its own"]
    return []


def _gpu_network_names(items: list[tuple[str, Mapping[str, Any]]]) -> set[str]:
    return {str(n.get("network")) for t, p in items if t == GKE_NODE_POOL and pool_role(t, p) == "gpu"
            for n in _get(p, "networkConfig", "additionalNodeNetworkConfigs") or []}


def gcp_gpu_vpcs_jumbo_mtu(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """A GPUDirect VPC runs at the catalog's MTU (8244); GCP's default 1460 fragments every NCCL message."""
    items = list(resources)
    want = min((int(f["mtu"]) for f in _catalog()["gcp"]["gpudirect"].values() if f.get("mtu")), default=8244)
    used = _gpu_network_names(items)
    return [f"GPU VPC {p.get('name')} has MTU {p.get('mtu') or 1460}; set {want} or more"
            for t, p in items if t == GCP_NETWORK and p.get("name") in used and not p.get("networkProfile")
            and int(p.get("mtu") or 1460) < want]


def lustre_fsnames_distinct(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """GKE's Managed Lustre CSI driver cannot mount two instances with one filesystem name on a node
    (https://cloud.google.com/kubernetes-engine/docs/concepts/managed-lustre#limitations)."""
    names = [str(p.get("filesystem")) for t, p in resources if t == GCP_LUSTRE]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        return [f"Managed Lustre instances share the filesystem name {', '.join(dup)}; give each its own"]
    return []


RESOURCE_FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
#: Every workload namespace gets this NetworkPolicy (gpufleet.infra.manifests.network_policies): how the pack
#: tells a workload namespace from the platform's own.
WORKLOAD_DEFAULT_DENY = "default-deny"


def gpu_pools_queued(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Kueue admits GPU jobs (docs/scheduling.md): every GPU pool has a ResourceFlavor selecting its nodes and
    every workload namespace a LocalQueue; otherwise jobs there are never admitted or land anywhere."""
    items = list(resources)
    pools = {str(node_labels(t, p).get(POOL_LABEL)) for t, p in items
             if pool_role(t, p) == "gpu" and node_labels(t, p).get(POOL_LABEL) is not None}
    flavored = {(_get(p, "spec", "nodeLabels") or {}).get(POOL_LABEL) for t, p in items if t == RESOURCE_FLAVOR}
    out = [f"GPU pool {pool} has no Kueue ResourceFlavor (spec.nodeLabels {POOL_LABEL}={pool}): its GPUs are "
           "outside every queue's quota" for pool in sorted(pools - flavored)]
    workload = {_get(p, "metadata", "namespace") for t, p in items
                if t == NETWORK_POLICY and _get(p, "metadata", "name") == WORKLOAD_DEFAULT_DENY}
    queued = {_get(p, "metadata", "namespace") for t, p in items if t == LOCAL_QUEUE}
    out += [f"workload namespace {ns} has no Kueue LocalQueue: its jobs cannot be admitted"
            for ns in sorted(n for n in workload - queued if n)]
    return out


ResourceCheck = Callable[[str, Mapping[str, Any]], list[str]]
StackCheck = Callable[[Iterable[tuple[str, Mapping[str, Any]]]], list[str]]

RESOURCE_POLICIES: dict[str, tuple[str, ResourceCheck]] = {
    "gpu-pools-tainted": ("GPU node pools carry nvidia.com/gpu=present:NoSchedule", gpu_pool_tainted),
    "node-patches-without-taints": ("node patches never set spec.taints (atomic list)",
                                    node_patch_without_taints),
    "helm-charts-pinned": ("Helm charts are pinned to exact versions", helm_pinned),
    "no-public-ip-gpu-nodes": ("GPU nodes have no public IP addresses", no_public_ip_on_gpu_nodes),
    "gpu-pools-have-their-fabric": ("GPU pools attach every fabric interface their machine type supports",
                                    gpu_pool_has_its_fabric),
    "efa-interfaces-on-every-card": ("a GPU launch template puts its EFA interfaces on distinct network cards",
                                     efa_interfaces_on_every_card),
    "gpu-launch-template-in-cluster-placement": ("GPU launch templates name a cluster placement group",
                                                 gpu_launch_template_in_cluster_placement),
    "efa-group-references-itself": ("security group ingress never comes from 0.0.0.0/0",
                                    efa_group_references_itself),
    "no-public-ip-on-launch": ("subnets assign no public IP addresses on launch", no_public_ip_on_launch),
    "eks-endpoint-not-open-to-the-world": ("a public EKS endpoint lists its allowed networks",
                                           eks_endpoint_not_open_to_the_world),
    "infiniband-pool-in-one-zone": ("an AKS InfiniBand pool stays in one zone", infiniband_pool_in_one_zone),
    "gpudirect-pool-on-cos": ("GPUDirect-TCPX/TCPXO pools run Container-Optimized OS", gpudirect_pool_on_cos),
    "gke-gpu-networks-distinct": ("every GPU NIC of a GKE pool has its own network", gke_gpu_networks_distinct),
}
STACK_POLICIES: dict[str, tuple[str, StackCheck]] = {
    "system-pool-exists": ("a system pool exists when GPU pools do", system_pool_exists),
    "gpu-nodes-tainted": ("existing GPU nodes get nvidia.com/gpu=present:NoSchedule", gpu_nodes_tainted),
    "datasets-checkpoints-distinct": ("dataset and checkpoint volumes are distinct", volumes_distinct),
    "gcp-gpu-vpcs-jumbo-mtu": ("GKE GPU VPCs run at GPUDirect's MTU", gcp_gpu_vpcs_jumbo_mtu),
    "lustre-fsnames-distinct": ("Managed Lustre instances have distinct filesystem names",
                                lustre_fsnames_distinct),


    "gpu-pools-queued": ("every GPU pool has a Kueue flavor and every workload namespace a LocalQueue",
                         gpu_pools_queued),
}


def violations(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, list[str]]:
    """Every policy over a list of (type, props); the pack's verdict without the engine."""
    items = list(resources)
    out: dict[str, list[str]] = {}
    for name, (_d, check) in RESOURCE_POLICIES.items():
        found = [msg for t, p in items for msg in check(t, p)]
        if found:
            out[name] = found
    for name, (_d, stack_check) in STACK_POLICIES.items():
        found = stack_check(items)
        if found:
            out[name] = found
    return out


def _resource_validator(check: ResourceCheck) -> Callable[[Any, Callable[..., None]], None]:
    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        for msg in check(args.resource_type, args.props):
            report_violation(msg, None)
    return validate


def _stack_validator(check: StackCheck) -> Callable[[Any, Callable[..., None]], None]:
    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        for msg in check([(r.resource_type, r.props) for r in args.resources]):
            report_violation(msg, None)
    return validate


def policies() -> list[Any]:
    """The pulumi-policy objects (constructing these does not start a server; PolicyPack does)."""
    from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

    out: list[Any] = [
        ResourceValidationPolicy(name=name, description=desc, validate=_resource_validator(check),
                                 enforcement_level=EnforcementLevel.MANDATORY)
        for name, (desc, check) in RESOURCE_POLICIES.items()
    ]
    out += [
        StackValidationPolicy(name=name, description=desc, validate=_stack_validator(check),
                              enforcement_level=EnforcementLevel.MANDATORY)
        for name, (desc, check) in STACK_POLICIES.items()
    ]
    return out


def build_pack() -> Any:
    """Construct the PolicyPack: starts the analyzer server and blocks (call only from __main__)."""
    from pulumi_policy import EnforcementLevel, PolicyPack

    return PolicyPack(name="gpufleet", policies=policies(), enforcement_level=EnforcementLevel.MANDATORY)

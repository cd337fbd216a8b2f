"""Plain Kubernetes objects of the platform layer, as data (validated offline with kubernetes-validate)."""

from __future__ import annotations

from typing import Any

from gpufleet.infra import charts
from gpufleet.infra.scheduling import gpu_node_tolerations, node_labels, node_taints
from gpufleet.infra.values import COUNTERS_CONFIGMAP, COUNTERS_KEY
from gpufleet.spec import ClusterSpec, Host, Lustre, LustreVolume, NodePool

#: Kubernetes version the offline schemas are taken from (kubernetes-validate ships schemas per release).
K8S_SCHEMA_VERSION = "1.33"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
VOLUME_LABEL = "gpufleet.io/volume"
LUSTRE_STORAGE_CLASS = "lustre"

#: PriorityClasses: training outranks batch work; preemption of training by anything else is never wanted.
PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "gpufleet-training": (100000, "GPU training jobs; preempts batch work"),
    "gpufleet-batch": (10000, "preemptible GPU batch and evaluation work"),
}


def namespace(name: str, privileged: bool = False) -> dict[str, Any]:
    labels = dict(MANAGED_BY)
    if privileged:
        # Operators run privileged node agents (drivers, device plugins, RDMA plugins).
        labels["pod-security.kubernetes.io/enforce"] = "privileged"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def platform_namespaces(spec: ClusterSpec) -> list[dict[str, Any]]:
    out = [namespace(charts.GPU_OPERATOR_NAMESPACE, privileged=True), namespace(charts.MONITORING_NAMESPACE)]
    if any(p.fabric in ("infiniband", "roce") for p in spec.gpu_pools):
        out.append(namespace(charts.NETWORK_OPERATOR_NAMESPACE, privileged=True))
    out += [namespace(ns) for ns in spec.workload_namespaces]
    return out


def priority_classes() -> list[dict[str, Any]]:
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name, "labels": dict(MANAGED_BY)},
             "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
             "description": desc}
            for name, (value, desc) in PRIORITY_CLASSES.items()]


def _netpol(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED_BY)}, "spec": spec}


def network_policies(workload_ns: str) -> list[dict[str, Any]]:
    """Default deny in a GPU workload namespace, then the explicit allows training needs."""
    ns_sel = "kubernetes.io/metadata.name"
    return [
        _netpol(workload_ns, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        # Workers of one job talk to each other (NCCL bootstrap, torch.distributed rendezvous).
        _netpol(workload_ns, "allow-same-namespace", {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}], "egress": [{"to": [{"podSelector": {}}]}]}),
        _netpol(workload_ns, "allow-dns", {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {ns_sel: "kube-system"}}}],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}),
        _netpol(workload_ns, "allow-monitoring-scrape", {
            "podSelector": {}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {
                "matchLabels": {ns_sel: charts.MONITORING_NAMESPACE}}}]}]}),
    ]


def counters_configmap(csv: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": COUNTERS_CONFIGMAP, "namespace": ns, "labels": dict(MANAGED_BY)},
            "data": {COUNTERS_KEY: csv}}


def lustre_volume_handle(lustre: Lustre, volume: LustreVolume) -> str:
    """Mount source of a Lustre (sub)directory: ``<mgs nid>[:<failover nid>]:/<fsname>[/subdir]``."""
    subdir = volume.subdir.rstrip("/")
    return f"{':'.join(lustre.mgs_nids)}:/{lustre.fsname}{subdir}"


def lustre_storage_class() -> dict[str, Any]:
    # Static provisioning only: the filesystem exists outside Kubernetes; the class binds our PVs to claims.
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": LUSTRE_STORAGE_CLASS, "labels": dict(MANAGED_BY)},
            "provisioner": "kubernetes.io/no-provisioner", "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate"}


def lustre_volumes(spec: ClusterSpec) -> list[dict[str, Any]]:
    """A PersistentVolume and a claim per workload namespace for datasets (read-only) and checkpoints."""
    lustre = spec.storage.lustre
    if lustre is None:
        return []
    out: list[dict[str, Any]] = []
    for kind, volume, read_only in (("datasets", lustre.datasets, True),
                                    ("checkpoints", lustre.checkpoints, False)):
        for ns in spec.workload_namespaces:
            pv_name = f"lustre-{kind}-{ns}"
            mode = "ReadOnlyMany" if read_only else "ReadWriteMany"
            labels = {**MANAGED_BY, VOLUME_LABEL: kind}
            out.append({"apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": {"name": pv_name, "labels": labels,
                                     "annotations": {"gpufleet.io/mount-path": volume.mount_path}},
                        "spec": {"capacity": {"storage": f"{volume.capacity_gib}Gi"},
                                 "accessModes": [mode], "volumeMode": "Filesystem",
                                 "persistentVolumeReclaimPolicy": "Retain",
                                 "storageClassName": LUSTRE_STORAGE_CLASS,
                                 "claimRef": {"kind": "PersistentVolumeClaim", "name": kind, "namespace": ns},
                                 "csi": {"driver": charts.LUSTRE_CSI_DRIVER, "fsType": "lustre",
                                         "readOnly": read_only,
                                         "volumeHandle": lustre_volume_handle(lustre, volume)}}})
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": kind, "namespace": ns, "labels": labels},
                        "spec": {"accessModes": [mode], "storageClassName": LUSTRE_STORAGE_CLASS,
                                 "volumeName": pv_name,
                                 "resources": {"requests": {"storage": f"{volume.capacity_gib}Gi"}}}})
    return out


def lustre_node_tolerations_patch(spec: ClusterSpec) -> dict[str, Any]:
    """The Lustre CSI node DaemonSet must run on GPU nodes too; its chart has no tolerations value."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "lustre-csi-node", "namespace": charts.LUSTRE_NAMESPACE},
            "spec": {"template": {"spec": {"tolerations": gpu_node_tolerations(spec.gpu_pools)}}}}


def node_patch(pool: NodePool, host: Host) -> dict[str, Any]:
    """Labels and taints an existing node gets (server-side apply: only these fields are ours)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": host.name, "labels": node_labels(pool)},
            "spec": {"taints": node_taints(pool)}}

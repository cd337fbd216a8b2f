"""Plain Kubernetes objects of the platform layer, as data (validated offline with kubernetes-validate)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import yaml

from gpufleet import REPO_ROOT
from gpufleet.catalog.charts import IMAGES
from gpufleet.infra import charts
from gpufleet.infra.scheduling import (
    CONTROL_PLANE_TOLERATION,
    POOL_LABEL,
    ROLE_LABEL,
    SYSTEM_NODE_SELECTOR,
    gpu_node_tolerations,
    node_labels,
    taint_args,
)
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


PSA = "pod-security.kubernetes.io"
#: Namespaces the program's objects use but does not create: Kubernetes' own, and the Lustre CSI chart's,
#: which the chart creates (the program labels it with a NamespacePatch).
EXTERNAL_NAMESPACES = frozenset({"kube-system", charts.LUSTRE_NAMESPACE})
#: Pod Security level each platform namespace needs, and why (docs/pulumi.md lists the same).
PLATFORM_LEVELS: dict[str, str] = {
    # Driver, toolkit, device plugin and MIG manager run privileged with host paths.
    charts.GPU_OPERATOR_NAMESPACE: "privileged",
    # RDMA shared device plugin and OFED driver: privileged, host network and paths.
    charts.NETWORK_OPERATOR_NAMESPACE: "privileged",
    # node-exporter (hostNetwork, hostPID, hostPath) and dcgm-exporter (SYS_ADMIN).
    charts.MONITORING_NAMESPACE: "privileged",
    # The CSI node plugin is privileged with Bidirectional mount propagation.
    charts.LUSTRE_NAMESPACE: "privileged",
    # Kueue's controller runs as non-root with RuntimeDefault seccomp and no capabilities (its chart defaults).
    charts.KUEUE_NAMESPACE: "restricted",
}


def pod_security_labels(level: str, *, enforce: bool = True) -> dict[str, str]:
    """Pod Security admission labels: warn and audit always, enforce when asked."""
    labels = {f"{PSA}/warn": level, f"{PSA}/warn-version": "latest",
              f"{PSA}/audit": level, f"{PSA}/audit-version": "latest"}
    if enforce:
        labels |= {f"{PSA}/enforce": level, f"{PSA}/enforce-version": "latest"}
    return labels


def namespace(name: str, level: str, *, enforce: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**MANAGED_BY, **pod_security_labels(level, enforce=enforce)}}}


def gpufleet_namespace_level(spec: ClusterSpec) -> str:
    # The drift CronJob writes its metric into node_exporter's textfile directory and the health watcher's
    # node agent reads the kernel log (hostPath volumes, which baseline forbids, read-only or not); the node
    # taint Jobs and the watcher's controller alone meet restricted.
    return "privileged" if spec.drift is not None or spec.health_watch is not None else "restricted"


def platform_namespaces(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every namespace the program creates, each labelled with the Pod Security level its pods need."""
    out = [namespace(charts.GPU_OPERATOR_NAMESPACE, PLATFORM_LEVELS[charts.GPU_OPERATOR_NAMESPACE])]
    if spec.monitoring.mode == "kube-prometheus-stack":
        out.append(namespace(charts.MONITORING_NAMESPACE, PLATFORM_LEVELS[charts.MONITORING_NAMESPACE]))
    if any(p.fabric in ("infiniband", "roce") for p in spec.gpu_pools):
        out.append(namespace(charts.NETWORK_OPERATOR_NAMESPACE, PLATFORM_LEVELS[charts.NETWORK_OPERATOR_NAMESPACE]))
    if spec.gpu_pools:
        out.append(namespace(charts.KUEUE_NAMESPACE, PLATFORM_LEVELS[charts.KUEUE_NAMESPACE]))
    out.append(namespace(charts.GPUFLEET_NAMESPACE, gpufleet_namespace_level(spec)))
    level, enforce = spec.pod_security.level, spec.pod_security.enforce
    out += [namespace(ns, level, enforce=enforce) for ns in spec.workload_namespaces]
    return out


def external_namespaces(spec: ClusterSpec) -> frozenset[str]:
    """Namespaces objects of ours live in that the program does not create (declared, never guessed)."""
    out = EXTERNAL_NAMESPACES
    if spec.monitoring.mode == "existing":
        out |= {charts.MONITORING_NAMESPACE}
    if spec.health_watch is not None:
        # The health watcher's right to create Events about Nodes, which core/v1 keeps in "default".
        out |= {"default"}
    return out


def lustre_namespace_patch() -> dict[str, Any]:
    """The Lustre chart creates its namespace unlabelled: the labels are patched on (a granular map)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": charts.LUSTRE_NAMESPACE,
                         "labels": pod_security_labels(PLATFORM_LEVELS[charts.LUSTRE_NAMESPACE])}}


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


def critical_pods_quota(ns: str) -> dict[str, Any]:
    """GKE admits system-node-critical/system-cluster-critical pods outside kube-system only within a
    ResourceQuota for those priority classes (the GPU Operator's daemonsets use system-node-critical; NVIDIA's
    GKE page creates the same quota)."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "critical-pods", "namespace": ns, "labels": dict(MANAGED_BY)},
            "spec": {"hard": {"pods": "100"},
                     "scopeSelector": {"matchExpressions": [{
                         "operator": "In", "scopeName": "PriorityClass",
                         "values": ["system-node-critical", "system-cluster-critical"]}]}}}


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


def lustre_volumes(spec: ClusterSpec, handles: Mapping[str, Any] | None = None, *, driver: str | None = None,
                   attributes: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A PersistentVolume and a claim per workload namespace for datasets (read-only) and checkpoints.

    ``handles``: volumeHandles a backend made (a cloud's managed Lustre), by kind; otherwise from the stack's
    mgs_nids. ``driver``/``attributes``: a cloud's own Lustre CSI driver and each volume's volumeAttributes in its
    format (EKS's FSx for Lustre add-on, Microsoft's Azure Managed Lustre driver, GKE's Managed Lustre add-on);
    otherwise the platform's driver for MGS NIDs (charts.LUSTRE_CSI_DRIVER, HPE's)."""
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
                                 "csi": _lustre_csi(kind, read_only, (handles or {}).get(kind)
                                                    or lustre_volume_handle(lustre, volume),
                                                    driver, (attributes or {}).get(kind))}})
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": kind, "namespace": ns, "labels": labels},
                        "spec": {"accessModes": [mode], "storageClassName": LUSTRE_STORAGE_CLASS,
                                 "volumeName": pv_name,
                                 "resources": {"requests": {"storage": f"{volume.capacity_gib}Gi"}}}})
    return out


def _lustre_csi(kind: str, read_only: bool, handle: Any, driver: str | None,
                attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    if driver is None:
        return {"driver": charts.LUSTRE_CSI_DRIVER, "fsType": "lustre", "readOnly": read_only, "volumeHandle": handle}
    csi: dict[str, Any] = {"driver": driver, "readOnly": read_only, "volumeHandle": handle}
    if attributes:
        csi["volumeAttributes"] = dict(attributes)
    return csi


def lustre_node_tolerations_patch(spec: ClusterSpec) -> dict[str, Any]:
    """Lustre is mounted by GPU workloads (datasets, checkpoints), nothing of the platform mounts it: the CSI
    node DaemonSet runs on GPU nodes only, tolerating exactly their taints (its chart has neither value)."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "lustre-csi-node", "namespace": charts.LUSTRE_NAMESPACE},
            "spec": {"template": {"spec": {"nodeSelector": {ROLE_LABEL: "gpu"},
                                           "tolerations": gpu_node_tolerations(spec.gpu_pools)}}}}


def node_patch(pool: NodePool, host: Host, *, operator_components: bool = False,
               drift_metrics: bool = False) -> dict[str, Any]:
    """Labels an existing node gets, by server-side apply (labels are a granular map: other managers'
    labels stay). Never taints: ``spec.taints`` is an atomic list, see :func:`taint_job`."""
    labels = node_labels(pool, operator_components=operator_components, host=host)
    if drift_metrics:
        labels[DRIFT_METRICS_LABEL] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host.name, "labels": labels}}


#: Node whose node_exporter publishes the drift metric (the drift CronJob runs there).
DRIFT_METRICS_LABEL = "gpufleet.io/drift-metrics"
TAINTER = "gpufleet-node-taints"
#: Restricted-level pod and container security (what every pod of ours meets unless it needs a host path).
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}


def system_placement() -> dict[str, Any]:
    return {"nodeSelector": dict(SYSTEM_NODE_SELECTOR), "tolerations": [dict(CONTROL_PLANE_TOLERATION)]}


def taint_rbac() -> list[dict[str, Any]]:
    """Identity (read, list and patch Nodes, nothing else) and program of the taint Jobs."""
    ns = charts.GPUFLEET_NAMESPACE
    meta = {"name": TAINTER, "labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": ns}},
        taint_script_configmap(),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TAINTER},
         "subjects": [{"kind": "ServiceAccount", "name": TAINTER, "namespace": ns}]},
    ]


TAINT_SCRIPT = REPO_ROOT / "gpufleet" / "infra" / "node_taints.py"
TAINT_SCRIPT_DIR = "/opt/gpufleet"


def taint_script_configmap() -> dict[str, Any]:
    """The taint Jobs' program (standard library only), as a ConfigMap the plain Python image mounts."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": TAINTER, "namespace": charts.GPUFLEET_NAMESPACE, "labels": dict(MANAGED_BY)},
            "data": {TAINT_SCRIPT.name: TAINT_SCRIPT.read_text()}}


def taint_job(pool: NodePool, hosts: list[Host]) -> dict[str, Any] | None:
    """A Job giving the pool's registered nodes the pool's taints by read-modify-write
    (``gpufleet/infra/node_taints.py``), keeping every other manager's taints. Its name carries a digest of
    the taints, the hosts and the program: a Job is immutable, so a change makes a new one that runs again.
    None when the pool has no hosts (nothing registered to taint)."""
    if not hosts:
        return None
    args = taint_args(pool)
    digest = hashlib.sha256(json.dumps([args, sorted(h.name for h in hosts),
                                        TAINT_SCRIPT.read_text()]).encode()).hexdigest()[:8]
    container = {"name": "taint", "image": IMAGES["python"].ref,
                 "command": ["python3", f"{TAINT_SCRIPT_DIR}/{TAINT_SCRIPT.name}", *args],
                 "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                 "securityContext": dict(RESTRICTED_CONTAINER),
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                 "volumeMounts": [{"name": "program", "mountPath": TAINT_SCRIPT_DIR, "readOnly": True}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"taints-{pool.name}-{digest}", "namespace": charts.GPUFLEET_NAMESPACE,
                         "labels": {**MANAGED_BY, POOL_LABEL: pool.name}},
            "spec": {"backoffLimit": 4, "ttlSecondsAfterFinished": 86400, "template": {
                "metadata": {"labels": {**MANAGED_BY, POOL_LABEL: pool.name}},
                "spec": {"serviceAccountName": TAINTER, "restartPolicy": "OnFailure",
                         "securityContext": dict(RESTRICTED_POD), **system_placement(),
                         "containers": [container],
                         "volumes": [{"name": "program", "configMap": {"name": TAINTER}}]}}}}


DRIFT = "gpufleet-drift"
CRONJOB_FILE = REPO_ROOT / "gpufleet" / "drift" / "deploy" / "cronjob.yaml"
#: The placeholder cronjob.yaml carries where the stack's gpufleet:drift.image goes.
DRIFT_IMAGE_PLACEHOLDER = "GPUFLEET_DRIFT_IMAGE"


def drift_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The drift CronJob (the one definition: gpufleet/drift/deploy/cronjob.yaml) with the stack's pinned
    image, schedule and stack name, and its own ServiceAccount without an API token (it needs no API)."""
    if spec.drift is None:
        return []
    cron = yaml.safe_load(CRONJOB_FILE.read_text())
    cron["spec"]["schedule"] = spec.drift.schedule
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        if c["image"] == DRIFT_IMAGE_PLACEHOLDER:
            c["image"] = spec.drift.image
        for env in c.get("env", []):
            if env["name"] == "GPUFLEET_STACK":
                env["value"] = spec.stack
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
          "metadata": {"name": pod["serviceAccountName"], "namespace": cron["metadata"]["namespace"],
                       "labels": dict(MANAGED_BY)}}
    return [sa, cron]


def dashboard_configmap(ns: str, text: str) -> dict[str, Any]:
    """The Grafana dashboard as a ConfigMap the Grafana sidecar loads (kube-prometheus-stack values:
    grafana.sidecar.dashboards.label grafana_dashboard, labelValue "1")."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpufleet-gpu-dashboard", "namespace": ns,
                         "labels": {**MANAGED_BY, "grafana_dashboard": "1"}},
            "data": {"gpufleet-gpus.json": text}}

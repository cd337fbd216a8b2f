"""Helm values and NVIDIA custom resources derived from the spec and the lock (pure data, no Pulumi).

Every key set in :func:`gpu_operator_values` and :func:`dcgm_exporter_values` must exist in the pinned
chart's ``values.yaml`` (tests walk them against ``../shared/upstream/``); :func:`cluster_policy` and
:func:`nvidia_drivers` must validate against the GPU Operator CRDs of the pinned release.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT
from gpufleet.drift.metrics import DEFAULT_TEXTFILE
from gpufleet.infra import charts
from gpufleet.infra.scheduling import (
    CONTROL_PLANE_TOLERATION,
    POOL_LABEL,
    SYSTEM_NODE_SELECTOR,
    gpu_node_tolerations,
    node_taints,
    toleration,
)
from gpufleet.lock import Lock, render_gpu_operator_values
from gpufleet.spec import ClusterSpec

#: DCGM counters we export; written by the monitoring area (gpufleet/monitoring/).
COUNTERS_FILE = REPO_ROOT / "gpufleet" / "monitoring" / "dcgm-counters.csv"
COUNTERS_CONFIGMAP = "gpufleet-dcgm-counters"
#: The Grafana dashboard gpufleet ships (loaded by the Grafana sidecar from a labelled ConfigMap).
DASHBOARD_FILE = REPO_ROOT / "gpufleet" / "monitoring" / "grafana-dashboard.json"
#: The GPU Operator reads custom metrics from this key of the ConfigMap named in dcgmExporter.config.name
#: (gpu-operator v26.7.0 values.yaml, comment above dcgmExporter.config).
COUNTERS_KEY = "dcgm-metrics.csv"
#: Where dcgm-exporter reads its counters by default (dcgm-exporter chart 4.8.2 values.yaml, arguments).
EXPORTER_COUNTERS_PATH = "/etc/dcgm-exporter/default-counters.csv"

#: Keys upstream documents only in comments of values.yaml (the chart template reads them all the same).
#: Each entry is checked by a test against the comment text of the pinned values.yaml.
COMMENTED_UPSTREAM_KEYS: dict[str, tuple[str, ...]] = {
    "gpu-operator": ("dcgmExporter.config.name",),
    "dcgm-exporter": (),
}
#: Keys a subchart defines (its own values.yaml, not in ../shared/upstream): the parent passes the section
#: through. gpu-operator and network-operator bundle node-feature-discovery (master/gc/worker placement);
#: kube-prometheus-stack bundles prometheus-node-exporter 4.56.1, grafana 12.11.1 and kube-state-metrics
#: 8.4.0 (its Chart.yaml dependencies), whose placement keys are the subcharts' own.
SUBCHART_KEYS: dict[str, tuple[str, ...]] = {
    "gpu-operator": ("node-feature-discovery.master.nodeSelector", "node-feature-discovery.master.tolerations",
                     "node-feature-discovery.gc.nodeSelector", "node-feature-discovery.gc.tolerations"),
    "network-operator": (),
    "kube-prometheus-stack": ("prometheus-node-exporter.tolerations",
                              "prometheus-node-exporter.extraHostVolumeMounts",
                              "grafana.nodeSelector", "grafana.tolerations",
                              "kube-state-metrics.nodeSelector", "kube-state-metrics.tolerations"),
}
#: Where node_exporter reads textfile metrics inside its pod (the host directory the drift check writes).
NODE_EXPORTER_TEXTFILE_MOUNT = "/host/textfile"
#: kube-prometheus-stack 88.5.3's own prometheus-node-exporter.extraArgs: a list value replaces the chart's,
#: so they are kept next to ours (a test compares them with the pinned values.yaml).
KPS_NODE_EXPORTER_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+"
    "|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs"
    "|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs"
    "|sysfs|tracefs|erofs)$",
)
#: Grafana sidecar: ConfigMaps with this label are loaded as dashboards (kube-prometheus-stack default).
DASHBOARD_LABEL = ("grafana_dashboard", "1")

NVIDIA_API = "nvidia.com/v1"
NVIDIA_DRIVER_API = "nvidia.com/v1alpha1"


def counters_csv(path: Path = COUNTERS_FILE) -> str | None:
    """Our DCGM counters list, or None while the monitoring area has not shipped it."""
    return path.read_text() if path.is_file() else None


def monitor_labels(spec: ClusterSpec) -> dict[str, str]:
    """Labels our ServiceMonitors and PrometheusRules carry: what an existing Prometheus selects them by
    (gpufleet's kube-prometheus-stack selects every one, see kube_prometheus_stack_values)."""
    return dict(spec.monitoring.selector) if spec.monitoring.mode == "existing" else {}


def system_tolerations() -> list[dict[str, Any]]:
    return [dict(CONTROL_PLANE_TOLERATION)]


def gpu_operator_values(spec: ClusterSpec, lock: Lock, *, with_counters: bool,
                        dcgm_exporter: bool = True) -> dict[str, Any]:
    """Values for the GPU Operator chart at ``lock.gpu_operator``.

    Driver and toolkit containers are off when the hosts are Ansible-managed (the lock says "host"):
    the operator must then find the host's driver, never install its own. When the operator does
    manage drivers, it does so through one NVIDIADriver object per operator-managed pool
    (:func:`nvidia_drivers`), so that pools Ansible manages are never touched.
    """
    from_lock = render_gpu_operator_values(lock)
    driver_by_operator = bool(from_lock["driver"]["enabled"])
    gpu_pools = spec.gpu_pools
    monitor: dict[str, Any] = {"enabled": dcgm_exporter, "interval": "15s"}
    if monitor_labels(spec):
        monitor["additionalLabels"] = monitor_labels(spec)
    exporter: dict[str, Any] = {"enabled": dcgm_exporter, "serviceMonitor": monitor}
    if dcgm_exporter and with_counters:
        exporter["config"] = {"name": COUNTERS_CONFIGMAP}
    return {
        "operator": {
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            # System nodes carry no taint of ours; on small clusters they are the control plane.
            "tolerations": system_tolerations(),
        },
        "daemonsets": {
            "priorityClassName": "system-node-critical",
            "tolerations": gpu_node_tolerations(gpu_pools),
        },
        "mig": {"strategy": spec.mig_strategy},
        # driver/toolkit enabled and versions are the lock's decision (gpufleet.lock.render).
        "driver": {
            **from_lock["driver"],
            "nvidiaDriverCRD": {"enabled": driver_by_operator, "deployDefaultCR": False},
        },
        "toolkit": from_lock["toolkit"],
        # Google's driver installer mode (driver manager gke): where that driver lives, CDI on.
        **{k: from_lock[k] for k in ("hostPaths", "cdi") if k in from_lock},
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": True},
        "migManager": {"enabled": spec.mig_strategy != "none"},
        # Standalone hostengine off: the exporter embeds nv-hostengine (chart default, made explicit).
        "dcgm": {"enabled": False},
        "dcgmExporter": exporter,
        "nodeStatusExporter": {"enabled": False},
        # NFD (the operator's subchart): master, garbage collector and prune job on system nodes (the prune
        # job takes master.nodeSelector/tolerations: node-feature-discovery templates/post-delete-job.yaml);
        # the worker labels GPU nodes, so it tolerates every GPU taint.
        "node-feature-discovery": {
            "master": {"nodeSelector": dict(SYSTEM_NODE_SELECTOR), "tolerations": system_tolerations()},
            "gc": {"nodeSelector": dict(SYSTEM_NODE_SELECTOR), "tolerations": system_tolerations()},
            "worker": {"tolerations": system_tolerations() + gpu_node_tolerations(gpu_pools)},
        },
    }


def dcgm_exporter_values(spec: ClusterSpec, *, with_counters: bool) -> dict[str, Any]:
    """Values for the standalone dcgm-exporter chart (used only when the operator's exporter is off)."""
    values: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "serviceMonitor": {"enabled": True, "interval": "15s", "additionalLabels": monitor_labels(spec)},
        # Runs where the GPUs are: the exporter is a per-GPU-node agent, so it tolerates the GPU taint.
        "nodeSelector": {"gpufleet.io/role": "gpu"},
        "tolerations": gpu_node_tolerations(spec.gpu_pools),
        "arguments": ["-f", EXPORTER_COUNTERS_PATH],
    }
    if with_counters:
        values["extraConfigMapVolumes"] = [
            {"name": "gpufleet-counters",
             "configMap": {"name": COUNTERS_CONFIGMAP,
                           "items": [{"key": COUNTERS_KEY, "path": "default-counters.csv"}]}},
        ]
        values["extraVolumeMounts"] = [
            {"name": "gpufleet-counters", "mountPath": EXPORTER_COUNTERS_PATH,
             "subPath": "default-counters.csv"},
        ]
    return values


def rdma_shared_device_config() -> dict[str, Any]:
    """k8s-rdma-shared-dev-plugin config: one shared RDMA resource over the pools' Mellanox HCAs."""
    # 15b3: Mellanox/NVIDIA networking PCI vendor id; mlx5_core: the ConnectX kernel driver.
    selectors = {"vendors": ["15b3"], "drivers": ["mlx5_core"]}
    return {"configList": [{"resourceName": "rdma_shared_device_a", "rdmaHcaMax": 63,
                            "selectors": selectors}]}


def network_operator_values(spec: ClusterSpec) -> dict[str, Any]:
    control_plane = CONTROL_PLANE_TOLERATION["key"]
    return {
        # NFD already runs with the GPU Operator; a second copy would fight over the same labels. The
        # NodeFeatureRules stay on: they need the NFD CRDs the gpu-operator chart installs (depends_on).
        "nfd": {"enabled": False, "deployNodeFeatureRules": True},
        "operator": {
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            # "additional tolerations for the DaemonSets deployed by the operator": GPU pools' taints.
            "tolerations": system_tolerations() + gpu_node_tolerations(spec.gpu_pools),
            # The chart's default prefers node-role.kubernetes.io/master, a label Kubernetes no longer sets.
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": control_plane, "operator": "In", "values": [""]}]}}]}},
        },
    }


def kube_prometheus_stack_values(spec: ClusterSpec) -> dict[str, Any]:
    """kube-prometheus-stack on system nodes, selecting every ServiceMonitor/PrometheusRule in the cluster,
    Grafana loading labelled dashboard ConfigMaps, node_exporter reading the drift check's textfile."""
    place = {"nodeSelector": dict(SYSTEM_NODE_SELECTOR), "tolerations": system_tolerations()}
    label, label_value = DASHBOARD_LABEL
    return {
        "crds": {"enabled": True},
        "prometheusOperator": {**place, "admissionWebhooks": {"patch": dict(place)}},
        "prometheus": {"prometheusSpec": {
            **place,
            # Select ServiceMonitors and PrometheusRules without the chart's release label (the GPU
            # Operator's dcgm-exporter ServiceMonitor and our rules do not carry it).
            "ruleSelectorNilUsesHelmValues": False,
            "serviceMonitorSelectorNilUsesHelmValues": False,
            "podMonitorSelectorNilUsesHelmValues": False,
        }},
        "alertmanager": {"alertmanagerSpec": dict(place)},
        "grafana": {**place, "sidecar": {"dashboards": {
            "enabled": True, "label": label, "labelValue": label_value, "searchNamespace": "ALL"}}},
        "kube-state-metrics": dict(place),
        # node_exporter runs on every node, GPU nodes included.
        "prometheus-node-exporter": {
            "tolerations": system_tolerations() + gpu_node_tolerations(spec.gpu_pools),
            "extraArgs": [*KPS_NODE_EXPORTER_ARGS,
                          f"--collector.textfile.directory={NODE_EXPORTER_TEXTFILE_MOUNT}"],
            "extraHostVolumeMounts": [{"name": "gpufleet-textfile", "hostPath": str(DEFAULT_TEXTFILE.parent),
                                       "mountPath": NODE_EXPORTER_TEXTFILE_MOUNT, "readOnly": True}],
        },
    }


def nic_cluster_policy(spec: ClusterSpec, lock: Lock) -> dict[str, Any]:
    """NicClusterPolicy deploying the RDMA shared device plugin on InfiniBand/RoCE pools only."""
    rdma_pools = [p for p in spec.gpu_pools if p.fabric in ("infiniband", "roce")]
    tag = f"network-operator-v{charts.network_operator(lock).version}"
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": POOL_LABEL, "operator": "In",
                                       "values": [p.name for p in rdma_pools]}]}]}},
            "tolerations": gpu_node_tolerations(rdma_pools),
            "rdmaSharedDevicePlugin": {
                "image": "k8s-rdma-shared-dev-plugin",
                "repository": "nvcr.io/nvidia/mellanox",
                "version": tag,
                "config": json.dumps(rdma_shared_device_config(), sort_keys=True),
            },
        },
    }


#: ClusterPolicy sections the chart fills from the value section of the same name.
_CLUSTER_POLICY_SECTIONS = ("daemonsets", "mig", "driver", "toolkit", "devicePlugin", "gfd", "migManager",
                            "dcgm", "dcgmExporter", "nodeStatusExporter")


def cluster_policy(values: dict[str, Any]) -> dict[str, Any]:
    """The ClusterPolicy the chart renders from our values (its ``clusterpolicy.yaml`` template), restricted
    to the keys we set. ``operator.*`` values configure the operator Deployment, not the policy.
    """
    spec: dict[str, Any] = {"operator": {}}
    for section in _CLUSTER_POLICY_SECTIONS:
        if section in values:
            spec[section] = copy.deepcopy(values[section])
    driver = spec.get("driver", {})
    crd = driver.pop("nvidiaDriverCRD", None)
    if crd is not None:
        driver["useNvidiaDriverCRD"] = crd.get("enabled", False)
    return {"apiVersion": NVIDIA_API, "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec}


def nvidia_drivers(spec: ClusterSpec, lock: Lock) -> list[dict[str, Any]]:
    """One NVIDIADriver per operator-managed GPU pool, pinned to the lock's driver, limited to that pool."""
    if lock.driver_managed_by != "operator":
        return []
    out = []
    for pool in spec.gpu_pools:
        if pool.host_management != "operator":
            continue
        out.append({
            "apiVersion": NVIDIA_DRIVER_API,
            "kind": "NVIDIADriver",
            "metadata": {"name": f"driver-{pool.name}"},
            "spec": {
                "driverType": "gpu",
                "default": False,
                "image": "driver",
                "repository": "nvcr.io/nvidia",
                "version": lock.driver,
                "kernelModuleType": lock.kernel_module,
                "nodeSelector": {POOL_LABEL: pool.name},
                "tolerations": [toleration(t) for t in node_taints(pool)],
            },
        })
    return out

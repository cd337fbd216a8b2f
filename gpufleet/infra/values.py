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
from gpufleet.infra import charts
from gpufleet.infra.scheduling import (
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

NVIDIA_API = "nvidia.com/v1"
NVIDIA_DRIVER_API = "nvidia.com/v1alpha1"


def counters_csv(path: Path = COUNTERS_FILE) -> str | None:
    """Our DCGM counters list, or None while the monitoring area has not shipped it."""
    return path.read_text() if path.is_file() else None


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
    exporter: dict[str, Any] = {
        "enabled": dcgm_exporter,
        "serviceMonitor": {"enabled": dcgm_exporter, "interval": "15s"},
    }
    if dcgm_exporter and with_counters:
        exporter["config"] = {"name": COUNTERS_CONFIGMAP}
    return {
        "operator": {
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            # The chart default tolerates control-plane nodes only; system nodes carry no taint of ours.
            "tolerations": [],
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
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": True},
        "migManager": {"enabled": spec.mig_strategy != "none"},
        # Standalone hostengine off: the exporter embeds nv-hostengine (chart default, made explicit).
        "dcgm": {"enabled": False},
        "dcgmExporter": exporter,
        "nodeStatusExporter": {"enabled": False},
    }


def dcgm_exporter_values(spec: ClusterSpec, *, with_counters: bool) -> dict[str, Any]:
    """Values for the standalone dcgm-exporter chart (used only when the operator's exporter is off)."""
    values: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "serviceMonitor": {"enabled": True, "interval": "15s"},
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


def network_operator_values() -> dict[str, Any]:
    # NFD already runs with the GPU Operator; a second copy would fight over the same labels.
    return {"nfd": {"enabled": False},
            "operator": {"nodeSelector": dict(SYSTEM_NODE_SELECTOR), "tolerations": []}}


def nic_cluster_policy(spec: ClusterSpec) -> dict[str, Any]:
    """NicClusterPolicy deploying the RDMA shared device plugin on InfiniBand/RoCE pools only."""
    rdma_pools = [p for p in spec.gpu_pools if p.fabric in ("infiniband", "roce")]
    tag = f"network-operator-v{charts.NETWORK_OPERATOR_VERSION}"
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

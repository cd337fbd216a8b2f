"""Helm charts the platform layer installs, each pinned to one exact version.

Repository, namespace and the known versions (each with its public source) live in the chart catalog,
``gpufleet/catalog/charts.yaml``; the version a stack installs is its lock's entry for the chart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.catalog.charts import CHARTS
from gpufleet.lock import Lock

#: Exact versions only: a range or a missing version would let ``pulumi up`` drift silently.
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Chart:
    name: str
    repo: str
    version: str
    namespace: str


GPU_OPERATOR_NAMESPACE = CHARTS["gpu-operator"].namespace
NETWORK_OPERATOR_NAMESPACE = CHARTS["network-operator"].namespace
MONITORING_NAMESPACE = CHARTS["kube-prometheus-stack"].namespace
LUSTRE_NAMESPACE = CHARTS["lustre-csi-driver"].namespace
KUEUE_NAMESPACE = CHARTS["kueue"].namespace
#: Namespace of gpufleet's own workloads (drift CronJob, node taint Jobs).
GPUFLEET_NAMESPACE = "gpufleet"
#: Every namespace a platform component runs in: each chart's (the catalog) and gpufleet's own. A workload
#: namespace must be none of them (its default-deny policies and Pod Security level would apply there).
PLATFORM_NAMESPACES = frozenset({entry.namespace for entry in CHARTS.values()} | {GPUFLEET_NAMESPACE})
#: CSI driver name registered by HPE's Lustre CSI driver (its CSIDriver object): the platform layer's driver for
#: Lustre reached by MGS NIDs; cloud backends name their cloud's own (BackendHandles.lustre_csi_driver).
LUSTRE_CSI_DRIVER = "lustre-csi.hpe.com"


def chart(name: str, lock: Lock) -> Chart:
    """Chart ``name`` of the catalog at the version the lock pins."""
    entry = CHARTS[name]
    return Chart(name, entry.repo, str(getattr(lock, entry.lock_entry)), entry.namespace)


def gpu_operator(lock: Lock) -> Chart:
    return chart("gpu-operator", lock)


def dcgm_exporter(lock: Lock) -> Chart:
    return chart("dcgm-exporter", lock)


def network_operator(lock: Lock) -> Chart:
    return chart("network-operator", lock)


def lustre_csi(lock: Lock) -> Chart:
    return chart("lustre-csi-driver", lock)


def azurelustre_csi(lock: Lock) -> Chart:
    return chart("azurelustre-csi-driver", lock)


def kube_prometheus_stack(lock: Lock) -> Chart:
    return chart("kube-prometheus-stack", lock)


def aws_efa_device_plugin(lock: Lock) -> Chart:
    return chart("aws-efa-k8s-device-plugin", lock)


def kueue(lock: Lock) -> Chart:
    return chart("kueue", lock)

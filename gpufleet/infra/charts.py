"""Helm charts the platform layer installs, each pinned to one exact version.

| chart | repository | version source |
|---|---|---|
| gpu-operator | https://helm.ngc.nvidia.com/nvidia | the lock (``gpu_operator``) |
| dcgm-exporter | https://nvidia.github.io/dcgm-exporter/helm-charts | the lock (``dcgm_exporter_chart``) |
| network-operator | https://helm.ngc.nvidia.com/nvidia | 25.7.0 (NVIDIA Network Operator release) |
| lustre-csi-driver | HewlettPackard/lustre-csi-driver ``chart-releases/index.yaml`` | 0.1.12 |
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Exact versions only: a range or a missing version would let ``pulumi up`` drift silently.
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Chart:
    name: str
    repo: str
    version: str
    namespace: str


NGC_REPO = "https://helm.ngc.nvidia.com/nvidia"
DCGM_EXPORTER_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
LUSTRE_CSI_REPO = "https://raw.githubusercontent.com/HewlettPackard/lustre-csi-driver/releases/v0/chart-releases"

GPU_OPERATOR_NAMESPACE = "gpu-operator"
NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
MONITORING_NAMESPACE = "monitoring"
LUSTRE_NAMESPACE = "lustre-csi-system"

NETWORK_OPERATOR_VERSION = "25.7.0"
LUSTRE_CSI_VERSION = "0.1.12"
#: CSI driver name registered by HPE's Lustre CSI driver (its CSIDriver object).
LUSTRE_CSI_DRIVER = "lustre-csi.hpe.com"


def gpu_operator(version: str) -> Chart:
    return Chart("gpu-operator", NGC_REPO, version, GPU_OPERATOR_NAMESPACE)


def dcgm_exporter(version: str) -> Chart:
    return Chart("dcgm-exporter", DCGM_EXPORTER_REPO, version, MONITORING_NAMESPACE)


def network_operator() -> Chart:
    return Chart("network-operator", NGC_REPO, NETWORK_OPERATOR_VERSION, NETWORK_OPERATOR_NAMESPACE)


def lustre_csi() -> Chart:
    return Chart("lustre-csi-driver", LUSTRE_CSI_REPO, LUSTRE_CSI_VERSION, LUSTRE_NAMESPACE)

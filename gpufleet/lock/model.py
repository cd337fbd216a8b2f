"""The resolved version lock of a stack."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog.charts import chart_default

#: Entries a profile sets and a stack may override (``gpufleet:lock.versions.<key>``), in display order.
VERSION_KEYS: tuple[str, ...] = (
    "driver",
    "kernel_module",
    "fabric_manager",
    "nscq",
    "cuda",
    "cudnn",
    "nccl",
    "dcgm",
    "container_toolkit",
    "gpu_operator",
    "dcgm_exporter_chart",
    "network_operator",
    "lustre_csi",
    "azurelustre_csi",
    "kube_prometheus_stack",
    "aws_efa_device_plugin",
    "kueue",
    "rdma",
    "lustre_client",
    "kernel",
)

#: Entries that follow the driver unless overridden: NVIDIA releases them with the driver, same version.
FOLLOW_DRIVER: tuple[str, ...] = ("fabric_manager", "nscq")

#: Who installs the driver (and the toolkit): the host roles, the GPU Operator, or (Google Cloud COS node pools,
#: host_management gke) Google's COS driver installer, whose driver follows the GKE node version, not the lock.
Manager = Literal["host", "operator", "gke"]


class ComponentVersions(BaseModel):
    """The component entries, CUDA onward, that a profile sets and a lock pins: declared once for both.

    Pydantic orders fields base-first along the MRO (last base first), so a model lists this base first
    and its own leading entries in a base after it, which keeps them ahead of these, as in the YAML.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cuda: str
    cudnn: str
    nccl: str
    dcgm: str
    container_toolkit: str
    gpu_operator: str
    dcgm_exporter_chart: str
    #: Chart versions profiles may leave out: the chart catalog's default (gpufleet/catalog/charts.yaml).
    network_operator: str = Field(default_factory=lambda: chart_default("network_operator"))
    lustre_csi: str = Field(default_factory=lambda: chart_default("lustre_csi"))
    azurelustre_csi: str = Field(default_factory=lambda: chart_default("azurelustre_csi"))
    kube_prometheus_stack: str = Field(default_factory=lambda: chart_default("kube_prometheus_stack"))
    aws_efa_device_plugin: str = Field(default_factory=lambda: chart_default("aws_efa_device_plugin"))
    kueue: str = Field(default_factory=lambda: chart_default("kueue"))
    rdma: str
    lustre_client: str
    kernel: str | None = None


class _LockHead(BaseModel):
    """The entries a lock lists before the component versions (see ComponentVersions)."""

    stack: str = ""
    profile: str
    driver: str
    driver_branch: int
    kernel_module: Literal["open", "proprietary"]
    fabric_manager: str
    nscq: str


class Lock(ComponentVersions, _LockHead):
    """Every pinned version of one stack; one lock for all pools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Who installs the driver / container toolkit: our Ansible roles ("host") or the GPU Operator.
    driver_managed_by: Manager = "host"
    toolkit_managed_by: Manager = "host"

    @property
    def operator_components(self) -> bool:
        """Whether the GPU Operator deploys the driver or the toolkit anywhere: its switches are cluster-wide, so
        Ansible-managed GPU pools must then carry its opt-out labels."""
        return self.driver_managed_by == "operator" or self.toolkit_managed_by == "operator"

    cuda_compat: Literal["strict", "minor-version"] = "strict"
    #: True when a pool's GPU sits on an NVSwitch board: fabric manager and NSCQ are installed there.
    fabric_manager_required: bool = False

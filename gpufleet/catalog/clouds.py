"""Cloud machine types and prices (the data is ``clouds.yaml`` next to this module, every figure with its source).

Pure data: importing this needs no cloud SDK, so the stack validation and ``gpufleet plan`` use it everywhere.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

DATA_FILE = Path(__file__).with_name("clouds.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceType(_Frozen):
    name: str
    #: GPU model key of gpus.yaml; None for CPU machine types.
    gpu: str | None
    gpus: int = Field(ge=0)
    #: vCPUs and memory of one machine (the type's source page); Kueue's CPU/memory quotas are built from them.
    vcpus: int | None = Field(None, gt=0)
    memory_gib: int | None = Field(None, gt=0)
    #: Every EFA interface the type supports (the launch template attaches all of them).
    efa_interfaces: int = Field(ge=0)
    source: str = Field(pattern=r"^https://\S+$")


class Price(_Frozen):
    instance_type: str
    region: str
    usd_per_hour: float = Field(gt=0)
    date: dt.date
    source: str = Field(pattern=r"^https://\S+$")


class FsxCsi(_Frozen):
    """AWS's FSx for Lustre CSI driver as an EKS add-on, and what its controller's IAM role needs."""

    #: The CSI driver name (its CSIDriver object, the PVs' csi.driver).
    driver: str
    #: EKS add-on name and the pinned add-on version.
    addon: str
    addon_version: str = Field(pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
    #: The EKS Pod Identity agent add-on the driver's add-on authenticates through.
    identity_addon: str
    #: The controller's Kubernetes service account (the Pod Identity association's subject).
    service_account: str
    #: AWS managed policy of the controller's role.
    policy: str
    source: str = Field(pattern=r"^https://\S+$")
    pv_source: str = Field(pattern=r"^https://\S+$")


class FsxLustre(_Frozen):
    throughput_mbps_per_tib: list[int]
    capacity_gib_first: int
    capacity_gib_step: int
    source: str = Field(pattern=r"^https://\S+$")
    csi: FsxCsi

    def capacity_ok(self, gib: int) -> bool:
        return gib == self.capacity_gib_first or gib % self.capacity_gib_step == 0


class EfaInstaller(_Frozen):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    url: str = Field(pattern=r"^https://\S+\.tar\.gz$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    source: str = Field(pattern=r"^https://\S+$")


class _PricedCatalog(_Frozen):
    """A cloud's section with its on-demand price table (one row per machine type and region)."""

    prices: list[Price]

    def price(self, machine_type: str, region: str) -> Price | None:
        return next((p for p in self.prices if p.instance_type == machine_type and p.region == region), None)


class AwsCatalog(_PricedCatalog):
    instance_types: dict[str, InstanceType]
    fsx_lustre: FsxLustre
    efa_installer: EfaInstaller


class AzureVmSize(_Frozen):
    name: str
    gpu: str | None
    gpus: int = Field(ge=0)
    #: vCPUs and memory of one machine (the type's source page); Kueue's CPU/memory quotas are built from them.
    vcpus: int | None = Field(None, gt=0)
    memory_gib: int | None = Field(None, gt=0)
    #: InfiniBand HCAs of one VM (one per GPU on ND sizes) and the rate of each.
    infiniband_hcas: int = Field(ge=0)
    infiniband_gbps: int = Field(ge=0)
    source: str = Field(pattern=r"^https://\S+$")


class LustreTier(_Frozen):
    throughput_mbps_per_tib: int
    sku: str = Field(pattern=r"^AMLFS-Durable-Premium-\d+$")
    min_tib: int = Field(gt=0)
    step_tib: int = Field(gt=0)
    max_tib: int = Field(gt=0)

    def capacity_ok(self, tib: int) -> bool:
        return self.min_tib <= tib <= self.max_tib and tib % self.step_tib == 0


class SubnetPrefix(_Frozen):
    max_tib: int
    prefix: int = Field(ge=16, le=29)


class ManagedLustre(_Frozen):
    tiers: list[LustreTier]
    tiers_source: str = Field(pattern=r"^https://\S+$")
    subnet_prefix: list[SubnetPrefix]
    ports: list[tuple[int, int]]
    network_source: str = Field(pattern=r"^https://\S+$")
    fsname: str
    #: Microsoft's Azure Managed Lustre CSI driver (the chart is in the chart catalog) and its PV format's source.
    csi_driver: str
    csi_source: str = Field(pattern=r"^https://\S+$")
    csi_pv_source: str = Field(pattern=r"^https://\S+$")

    def tier(self, throughput: int | None) -> LustreTier | None:
        return next((t for t in self.tiers if t.throughput_mbps_per_tib == throughput), None)

    def prefix_for(self, tib: int) -> int | None:
        """The subnet prefix Microsoft's sizing table asks for a file system of ``tib`` TiB (None: beyond it)."""
        return next((s.prefix for s in self.subnet_prefix if tib <= s.max_tib), None)


class AzureCatalog(_PricedCatalog):
    vm_sizes: dict[str, AzureVmSize]
    managed_lustre: ManagedLustre


class GcpMachineType(_Frozen):
    name: str
    #: GKE's accelerator type of the machine's GPUs (node pool guest accelerator); None for CPU types.
    accelerator: str | None = None
    gpu: str | None
    gpus: int = Field(ge=0)
    #: vCPUs and memory of one machine (the type's source page); Kueue's CPU/memory quotas are built from them.
    vcpus: int | None = Field(None, gt=0)
    memory_gib: int | None = Field(None, gt=0)
    #: Google's GPUDirect flavour of the type (a key of ``GcpCatalog.gpudirect``); none for CPU types.
    gpudirect: Literal["tcpx", "tcpxo", "rdma", "none"]
    #: NICs that carry GPU-to-GPU traffic, beyond the primary gVNIC: TCPX/TCPXO one VPC each, RDMA one
    #: RoCE VPC with a subnet each.
    gpu_nics: int = Field(ge=0)
    #: Further gVNICs beside the primary (each in its own VPC); a3-ultragpu-8g has one.
    extra_gvnics: int = Field(0, ge=0)
    #: Boot disk type where the GKE default (pd-balanced) is not offered (N4: Hyperdisk only).
    boot_disk: str | None = None
    source: str = Field(pattern=r"^https://\S+$")


#: A manifest URL pinned to a commit of its repository (never a branch: what runs must not move).
PINNED_MANIFEST = r"^https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+\.yaml$"
PinnedManifest = Annotated[str, Field(pattern=PINNED_MANIFEST)]


class GpuDirect(_Frozen):
    """What Google's GPUDirect stack of one flavour needs of the nodes and the networks."""

    label: str
    #: GKE node image the flavour is supported on, and who installs the NVIDIA driver there.
    image: Literal["COS_CONTAINERD", "UBUNTU_CONTAINERD"]
    driver: Literal["gke", "operator"]
    #: Whether GKE's compact placement policy applies to the flavour's machine type (on-demand pools get it).
    compact_placement: bool
    #: MTU of the GPU VPCs; None: the network profile decides.
    mtu: int | None = Field(ge=1300, le=8896)
    #: GKENetworkParamSet deviceMode of the GPU networks.
    device_mode: Literal["NetDevice", "RDMA"]
    #: Network profile of the RDMA VPC (``{zone}`` is the pool's zone); None: a plain VPC per NIC.
    network_profile: str | None = None
    #: Google's DaemonSet manifests of the flavour (NCCL plugin installer, TCPXO's NRI device injector), by commit.
    installers: list[PinnedManifest] = Field(default_factory=list)
    source: str = Field(pattern=r"^https://\S+$")


class CosDriverInstaller(_Frozen):
    manifest: str = Field(pattern=PINNED_MANIFEST)
    #: Where it puts the driver on the node (the GPU Operator's hostPaths.driverInstallDir and toolkit.installDir).
    install_dir: str
    source: str = Field(pattern=r"^https://\S+$")


class GcpLustreTier(_Frozen):
    throughput_mbps_per_tib: int
    min_gib: int = Field(gt=0)
    step_gib: int = Field(gt=0)
    max_gib: int = Field(gt=0)

    def capacity_ok(self, gib: int) -> bool:
        return self.min_gib <= gib <= self.max_gib and gib % self.step_gib == 0


class GcpManagedLustre(_Frozen):
    tiers: list[GcpLustreTier]
    tiers_source: str = Field(pattern=r"^https://\S+$")
    #: The GKE Managed Lustre CSI driver (a GKE add-on) and its PV format's source.
    csi_driver: str
    csi_source: str = Field(pattern=r"^https://\S+$")
    ports: list[int]
    network_source: str = Field(pattern=r"^https://\S+$")
    vpc_mtu: int = Field(ge=1300, le=8896)
    vpc_mtu_source: str = Field(pattern=r"^https://\S+$")

    def tier(self, throughput: int | None) -> GcpLustreTier | None:
        return next((t for t in self.tiers if t.throughput_mbps_per_tib == throughput), None)


class GcpCatalog(_PricedCatalog):
    machine_types: dict[str, GcpMachineType]
    gpudirect: dict[str, GpuDirect]
    cos_driver_installer: CosDriverInstaller
    managed_lustre: GcpManagedLustre

    def flavour(self, machine_type: str) -> GpuDirect | None:
        """The GPUDirect flavour of a machine type (None: unknown type or none)."""
        mt = self.machine_types.get(machine_type)
        return None if mt is None else self.gpudirect.get(mt.gpudirect)


def _section(path: Path, cloud: str, types_key: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())[cloud]
    raw[types_key] = {k: {"name": k, **v} for k, v in raw[types_key].items()}
    return raw


def load_aws(path: Path = DATA_FILE) -> AwsCatalog:
    return AwsCatalog.model_validate(_section(path, "aws", "instance_types"))


def load_azure(path: Path = DATA_FILE) -> AzureCatalog:
    return AzureCatalog.model_validate(_section(path, "azure", "vm_sizes"))


def load_gcp(path: Path = DATA_FILE) -> GcpCatalog:
    return GcpCatalog.model_validate(_section(path, "gcp", "machine_types"))


AWS: AwsCatalog = load_aws()
AZURE: AzureCatalog = load_azure()
GCP: GcpCatalog = load_gcp()

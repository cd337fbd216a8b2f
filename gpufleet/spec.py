"""The cluster model, read from a stack file (``stacks/Pulumi.<stack>.yaml``).

A stack file is ordinary Pulumi stack config. Everything gpufleet reads lives under the
``gpufleet:`` namespace::

    config:
      gpufleet:backend: existing          # local | existing | aws | gcp | azure
      gpufleet:lock:                      # the version lock (see gpufleet.lock)
        profile: h100-cuda12.8
        versions: {driver: 570.172.08}    # optional single-entry overrides
      gpufleet:pools:
        - name: system
          role: system
          count: 3
        - name: h100-a
          role: gpu
          gpu: h100-sxm5-80gb
          count: 2
          fabric: infiniband
          hosts: [{name: gpu-a-0, address: 10.0.0.10}]
      gpufleet:storage: {...}
      gpufleet:networks: {...}

Validation errors name the stack file, the key path (``gpufleet:pools[1].gpu``), the value and a fix.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import posixpath
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from gpufleet import REPO_ROOT
from gpufleet.errors import REDACTED, ConfigError, ConfigProblem
from gpufleet.inputs import load_yaml
from gpufleet.module_utils.power_limit import canonical_power_limit

NAMESPACE = "gpufleet"
STACKS_DIR = REPO_ROOT / "stacks"
_T = TypeVar("_T")

#: Taint every GPU node carries so that only pods that tolerate it land there.
GPU_TAINT_KEY = "nvidia.com/gpu"

# Grammars of the values a stack gives. Each is matched in full (re.fullmatch: "$" would accept a trailing
# newline), so a value that passes cannot hold a line break, a shell word separator or a Jinja template.
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
#: RFC 1123 host name (lower case, as Kubernetes node names): dot-separated labels, 253 characters at most.
HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
#: DNS-1123 label (Kubernetes namespaces, pool, cluster and stack names).
DNS_LABEL = re.compile(_LABEL)
#: Stack names: a DNS-1123 label (the stack's inventory directory and Pulumi stack are named after it).
STACK_NAME = DNS_LABEL
#: Lustre file system name: 1-8 letters, digits, "_" or "-" (mkfs.lustre --fsname; it prefixes target labels).
LUSTRE_FSNAME = re.compile(r"[A-Za-z0-9_-]{1,8}")
#: Lustre NID: address@network, e.g. 10.0.0.5@o2ib, 10.0.0.5@tcp0, fs-0123.fsx.aws@tcp.
LUSTRE_NID = re.compile(r"[A-Za-z0-9.:-]{1,253}@[a-z][a-z0-9]*")
#: Login name on the hosts (POSIX portable user name, as useradd accepts it).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: Docker container names (sandbox hosts reached with connection: docker).
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")
#: Absolute path of plain path characters (no spaces, quotes or line breaks).
ABS_PATH = re.compile(r"/[A-Za-z0-9._/-]{0,4095}")
#: A whole-disk device path (local NVMe scratch drives).
DEVICE_PATH = re.compile(r"/dev/[A-Za-z0-9._/-]{1,200}")
#: NCCL_SOCKET_IFNAME / NCCL_IB_HCA lists: optional ^ (exclude) or = (exact), names, optional :port.
NCCL_IF_LIST = re.compile(r"[=^]?[A-Za-z0-9_.-]+(:[0-9]+)?(,[A-Za-z0-9_.-]+(:[0-9]+)?)*")
#: Cloud instance types and simulated board names.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: Kubernetes label key (optional DNS-subdomain prefix, then a name of 63 characters at most).
LABEL_KEY = re.compile(rf"({_LABEL}(\.{_LABEL})*/)?[A-Za-z0-9]([A-Za-z0-9_.-]{{0,61}}[A-Za-z0-9])?")
#: Kubernetes label value (empty, or 63 characters at most).
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")
#: Namespaces a workload namespace must not be: Kubernetes' own (default-deny there breaks the cluster).
RESERVED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default")


def _grammar(pattern: re.Pattern[str], what: str, example: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise PydanticCustomError("grammar", "not {what}", {"what": what, "example": example})
        return value
    check.grammar = f"{what}: `{pattern.pattern}`"  # type: ignore[attr-defined]  # read by gpufleet.stackdoc
    return check


def _address(value: str) -> str:
    if "%" in value:
        # ipaddress accepts any text after "%" as an IPv6 zone id (a line break included) and it would reach
        # hosts.yml; a host's address is global or site-scoped, never link-local with a zone.
        raise PydanticCustomError("grammar", "not {what}: an IPv6 zone id (%...) is not accepted",
                                  {"what": "an IP address or a DNS name", "example": "2001:db8::10"})
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    # ASCII first: str.lower() folds compatibility letters (the Kelvin sign K) into ASCII, which then matched.
    if not value.isascii() or HOSTNAME.fullmatch(value.lower()) is None:
        raise PydanticCustomError("grammar", "not {what}",
                                  {"what": "an IP address or a DNS name", "example": "192.0.2.10"})
    return value


#: The role whose preflight refuses system directories as a mount point; its vars file holds the list (one place).
_SCRATCH_VARS = REPO_ROOT / "roles" / "local_scratch" / "vars" / "main.yml"


@functools.cache
def system_paths() -> tuple[str, ...]:
    """Directories no scratch or Lustre file system may be mounted over (roles/local_scratch/vars/main.yml)."""
    import yaml

    return tuple(yaml.safe_load(_SCRATCH_VARS.read_text(encoding="utf-8"))["local_scratch_system_paths"])


def _clean_path(value: str) -> str:
    """An absolute path in its one spelling: ``..`` refused (it leaves the place it names), then ``//``, ``/./``
    and a trailing ``/`` folded (posixpath.normpath), so that comparisons and blocklists see what the kernel
    sees: ``/usr/`` and ``/usr//`` are ``/usr``."""
    _grammar(ABS_PATH, "an absolute path of plain characters", "/lustre/datasets")(value)
    if ".." in value.split("/"):
        raise PydanticCustomError("grammar", "not {what}: a '..' segment leaves the directory it names",
                                  {"what": "a plain absolute path", "example": "/lustre/datasets"})
    # normpath keeps a leading "//" (POSIX leaves its meaning to the system); Linux reads it as "/".
    return "/" + posixpath.normpath(value).lstrip("/")


def _mount_path(value: str) -> str:
    """A mount point: a clean absolute path that is not a system directory (mounting over /usr hides the OS)."""
    path = _clean_path(value)
    if path in system_paths():
        raise PydanticCustomError(
            "system_path", "{path} is a system directory: a file system mounted there hides what the host runs "
            "from", {"path": path, "fix": "mount it on a directory of its own, e.g. /scratch or /lustre/datasets "
                     f"(refused: {', '.join(system_paths())})"})
    return path


def _device_path(value: str) -> str:
    """A whole-disk device path under /dev, in its one spelling (``/dev//nvme2n1`` is ``/dev/nvme2n1``), so that
    one drive listed twice is seen as one."""
    _grammar(DEVICE_PATH, "a device path under /dev", "/dev/nvme2n1")(value)
    path = _clean_path(value)
    if not path.startswith("/dev/"):
        raise PydanticCustomError("grammar", "not {what}", {"what": "a device path under /dev",
                                                            "example": "/dev/nvme2n1"})
    return path


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise PydanticCustomError("grammar", "not {what}",
                                  {"what": "a CIDR network", "example": "192.0.2.0/24"}) from None
    return value


def _namespace(value: str) -> str:
    _grammar(DNS_LABEL, "a DNS-1123 label (a Kubernetes namespace)", "training")(value)
    if value in RESERVED_NAMESPACES or value.startswith("kube-"):
        raise PydanticCustomError(
            "reserved", "{value} is a Kubernetes system namespace: default-deny NetworkPolicies there break "
            "the cluster", {"value": value, "example": "training"})
    return value


#: Cron fields (Kubernetes CronJob, the robfig/cron standard parser): name, lowest, highest, names.
_CRON_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                  "dec")),
                ("day of week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")))
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_ITEM = re.compile(r"(\*|[0-9A-Za-z]{1,3}(-[0-9A-Za-z]{1,3})?)(/[0-9]{1,2})?", re.ASCII)


def _cron(value: str) -> str:
    """A five-field cron schedule, each field parsed against its range: it goes verbatim into the CronJob."""
    def bad(why: str) -> PydanticCustomError:
        return PydanticCustomError("grammar", "not {what}: {why}", {"what": "a cron schedule", "why": why,
                                                                     "example": "17 * * * *"})

    if value in _CRON_MACROS:
        return value
    fields = value.split(" ")
    if len(fields) != 5:
        raise bad("five fields separated by single spaces")
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in text.split(","):
            m = _CRON_ITEM.fullmatch(item)
            if m is None:
                raise bad(f"{name} {item[:20]!r} is not *, N, N-M or a list of them, with an optional /step")
            if m.group(1) == "*":
                continue
            for part in m.group(1).split("-"):
                number = names.index(part.lower()) + low if part.lower() in names else (
                    int(part) if part.isdigit() else None)
                if number is None or not low <= number <= high:
                    raise bad(f"{name} {part!r} is outside {low}-{high}")
    return value


_cron.grammar = ("a cron schedule: five fields (minute 0-59, hour 0-23, day 1-31, month 1-12 or jan-dec, weekday "  # type: ignore[attr-defined]
                 "0-6 or sun-sat), each *, N, N-M or a list, with an optional /step; or @hourly, @daily, ...")
_address.grammar = "an IP address (no IPv6 zone id) or an RFC 1123 DNS name (ASCII)"  # type: ignore[attr-defined]
_cidr.grammar = "a CIDR network"  # type: ignore[attr-defined]
_device_path.grammar = f"a device path under /dev: `{DEVICE_PATH.pattern}`, without '..' (stored normalised)"  # type: ignore[attr-defined]
_clean_path.grammar = ("an absolute path of letters, digits and . _ - /, without '..' segments (stored "  # type: ignore[attr-defined]
                       "normalised: /a//b/ is /a/b)")
_mount_path.grammar = (_clean_path.grammar[:-1]  # type: ignore[attr-defined]
                       + "), not a system directory (roles/local_scratch/vars/main.yml)")
_namespace.grammar = (f"a DNS-1123 label, not {', '.join(RESERVED_NAMESPACES)} "  # type: ignore[attr-defined]
                      "nor kube-*")

HostName = Annotated[str, AfterValidator(_grammar(HOSTNAME, "an RFC 1123 host name", "gpu-a-0"))]
Address = Annotated[str, AfterValidator(_address)]
UserName = Annotated[str, AfterValidator(_grammar(USER_NAME, "a user name", "ubuntu"))]
DnsLabel = Annotated[str, AfterValidator(_grammar(DNS_LABEL, "a DNS-1123 label", "gpufleet-prod"))]
Namespace = Annotated[str, AfterValidator(_namespace)]
LustreFsname = Annotated[str, AfterValidator(_grammar(
    LUSTRE_FSNAME, "a Lustre file system name (1-8 letters, digits, _ or -)", "ai"))]
LustreNid = Annotated[str, AfterValidator(_grammar(LUSTRE_NID, "a Lustre NID (address@network)",
                                                   "10.0.0.5@o2ib"))]
CleanPath = Annotated[str, AfterValidator(_clean_path)]
MountPath = Annotated[str, AfterValidator(_mount_path)]
DevicePath = Annotated[str, AfterValidator(_device_path)]
Cidr = Annotated[str, AfterValidator(_cidr)]
NcclIfList = Annotated[str, AfterValidator(_grammar(NCCL_IF_LIST, "an NCCL interface list", "=eth0"))]
PlainName = Annotated[str, AfterValidator(_grammar(PLAIN_NAME, "a plain name (letters, digits, . _ -)",
                                                   "p5.48xlarge"))]
LabelKey = Annotated[str, AfterValidator(_grammar(LABEL_KEY, "a Kubernetes label key", "example.com/team"))]
LabelValue = Annotated[str, AfterValidator(_grammar(LABEL_VALUE, "a Kubernetes label value", "ml"))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _doc(description: str, example: Any) -> dict[str, Any]:
    """Field documentation: docs/stack-config.md is generated from it (gpufleet.stackdoc)."""
    return {"description": description, "examples": [example]}


class Taint(_Strict):
    key: LabelKey = Field(**_doc("Taint key.", "example.com/dedicated"))
    value: LabelValue = Field("", **_doc("Taint value.", "ml"))
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", **_doc("Taint effect.", "NoSchedule"))


class NetworkPlace(_Strict):
    """Where a host sits in the data-centre network, outermost first: gpufleet labels its node with
    gpufleet.io/block, gpufleet.io/rack and gpufleet.io/switch, and Kueue's Topology uses them as levels."""

    block: LabelValue | None = Field(None, **_doc("Network block (spine group / NVLink domain group).", "b1"))
    rack: LabelValue | None = Field(None, **_doc("Rack.", "r07"))
    switch: LabelValue | None = Field(None, **_doc("Leaf switch the host's GPU NICs attach to.", "leaf-07a"))


class NodeResources(_Strict):
    """What one node of a pool offers besides GPUs (Kueue's CPU and memory quotas are pool size times this)."""

    cpu: int = Field(gt=0, **_doc("Allocatable CPUs of one node.", 192))
    memory_gib: int = Field(gt=0, **_doc("Allocatable memory of one node (GiB).", 1800))


class Host(_Strict):
    """A static host of a pool (existing/on-prem backend, and the sandbox)."""

    name: HostName = Field(**_doc("Host name (RFC 1123, lower case): Kubernetes node, Slurm node and "
                                  "Ansible inventory name.", "gpu-a-0"))
    address: str = Field(**_doc("IP address or DNS name Ansible connects to (a container name for "
                                "connection: docker).", "192.0.2.20"))
    #: How Ansible reaches it: ssh for real hosts, docker for sandbox containers.
    connection: Literal["ssh", "docker"] = Field(
        "ssh", **_doc("How Ansible reaches the host: ssh (real hosts) or docker (sandbox containers).", "ssh"))
    user: UserName | None = Field(None, **_doc("Login user for SSH (sudo for root work).", "ubuntu"))
    place: NetworkPlace | None = Field(None, **_doc(
        "The host's block/rack/leaf switch (overrides the pool's place; node labels for Kueue's topology).",
        {"rack": "r07", "switch": "leaf-07a"}))

    @model_validator(mode="after")
    def _check_address(self) -> Host:
        if self.connection == "docker":
            _grammar(CONTAINER_NAME, "a container name", "gpufleet-local-gpu-1")(self.address)
        else:
            _address(self.address)
        return self


#: A power limit as the stack file may write it; the same grammar the lock rules, role and module read.
PowerLimitText = Annotated[str, BeforeValidator(canonical_power_limit)]


#: Image of a cloud pool, per backend. None carries an NVIDIA driver: the GPU Operator's driver container or
#: Ansible installs the lock's. AWS: the EKS-optimized Amazon Linux 2023 AMI or your own AMI by id. Azure: the
#: AKS node OS SKU Ubuntu2204 or Ubuntu2404 (default: the one AKS ships for the cluster's Kubernetes version,
#: gpufleet/catalog/kubernetes.yaml; the GPU Operator's driver container and Microsoft's Azure Managed Lustre CSI
#: driver, which Microsoft supports on AKS Ubuntu node pools only, support both). Google Cloud: the GKE node
#: image COS_CONTAINERD (Container-Optimized OS, the only image Google's GPUDirect stacks support: the driver
#: then comes from Google's installer, host_management gke) or UBUNTU_CONTAINERD (where the GPU Operator's
#: driver container and the Ansible roles can run; gke_image).
CLOUD_IMAGES = {
    "aws": r"^(eks-standard|ami-[0-9a-f]{8,17})$",
    "azure": r"^Ubuntu2(204|404)$",
    "gcp": r"^(COS_CONTAINERD|UBUNTU_CONTAINERD)$",
}
CLOUD_IMAGE = "^(" + "|".join(p.strip("^$") for p in CLOUD_IMAGES.values()) + ")$"
#: A reservation a cloud pool consumes, per backend: an EC2 Capacity Reservation id, an Azure capacity
#: reservation group's resource id, a Compute Engine reservation by project and name.
RESERVATIONS = {
    "aws": r"^cr-[0-9a-f]{8,17}$",
    "azure": (r"^/subscriptions/[0-9a-f-]{36}/resourceGroups/[A-Za-z0-9._()-]{1,90}/providers/"
              r"Microsoft\.Compute/capacityReservationGroups/[A-Za-z0-9._-]{1,80}$"),
    "gcp": r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$",
}
RESERVATION = "^(" + "|".join(p.strip("^$") for p in RESERVATIONS.values()) + ")$"


def gke_image(pool: NodePool) -> str:
    """A GKE pool's node image: its own, else Ubuntu where the lock's driver is installed on the node (the GPU
    Operator's driver container, the Ansible roles: both need Ubuntu), else COS (GKE's default)."""
    if pool.image is not None:
        return pool.image
    lock_driver = pool.host_management == "ansible" or (pool.host_management == "operator" and pool.role == "gpu")
    return "UBUNTU_CONTAINERD" if lock_driver else "COS_CONTAINERD"


class Capacity(_Strict):
    """Where a cloud pool's machines come from: on-demand, an On-Demand Capacity Reservation, or a Capacity
    Block for ML (both named by their reservation id)."""

    type: Literal["on-demand", "reservation", "capacity-block"] = Field("on-demand", **_doc(
        "on-demand, reservation (AWS On-Demand Capacity Reservation, Azure capacity reservation group, Google "
        "Cloud specific reservation) or capacity-block (AWS Capacity Block for ML).", "capacity-block"))
    reservation_id: str | None = Field(None, pattern=RESERVATION, **_doc(
        "The reservation (types reservation and capacity-block): AWS cr-..., Azure the capacity reservation "
        "group's resource id, Google Cloud projects/<project>/reservations/<name>.", "cr-0123456789abcdef0"))

    @model_validator(mode="after")
    def _check(self) -> Capacity:
        if self.type != "on-demand" and self.reservation_id is None:
            raise ValueError(f"capacity type {self.type} needs reservation_id (the reservation to consume)")
        if self.type == "on-demand" and self.reservation_id is not None:
            raise ValueError("reservation_id is only for capacity type reservation or capacity-block")
        return self


class NodePool(_Strict):
    name: DnsLabel = Field(**_doc("Pool name (DNS-1123 label); Ansible group pool_<name>.", "h100-a"))
    role: Literal["system", "gpu"] = Field(**_doc("system (control plane, services) or gpu.", "gpu"))
    #: GPU model key from the catalog (gpufleet.catalog), required for role gpu.
    gpu: str | None = Field(None, **_doc("GPU model from the catalog (gpufleet/catalog), required for role "
                                         "gpu.", "h100-sxm5-80gb"))
    count: int | None = Field(None, ge=0, **_doc("Fixed node count; with hosts, the number of hosts.", 2))
    min: int | None = Field(None, ge=0, **_doc("Autoscaling minimum (with max, instead of count).", 0))
    max: int | None = Field(None, ge=0, **_doc("Autoscaling maximum (with min, instead of count).", 4))
    instance_type: PlainName | None = Field(None, **_doc("Cloud instance type (cloud backends).",
                                                         "p5.48xlarge"))
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, **_doc("Extra Kubernetes node labels.", {"example.com/team": "ml"}))
    taints: list[Taint] = Field(default_factory=list, **_doc("Extra node taints.",
                                                             [{"key": "example.com/dedicated"}]))
    fabric: Literal["infiniband", "roce", "efa", "gpudirect", "none"] = Field(
        "none", **_doc("GPU interconnect between nodes (gpudirect: Google Cloud's GPUDirect networks of A3 "
                       "machine types).", "infiniband"))
    #: Who installs the NVIDIA stack on these hosts: our Ansible roles, the GPU Operator's containers, or (Google
    #: Cloud's COS node pools) Google's driver installer with the GPU Operator's toolkit and device plugin.
    host_management: Literal["ansible", "operator", "gke"] = Field(
        "ansible", **_doc("Who installs the NVIDIA stack: the Ansible roles, the GPU Operator, or gke (Google "
                          "Cloud: Google's COS driver installer, the driver follows the GKE node version; "
                          "docs/clouds.md).", "ansible"))
    #: Power limit for every GPU of the pool, in the one power-limit grammar (gpufleet.module_utils.power_limit),
    #: stored in its canonical text (700 -> "700").
    power_limit: PowerLimitText | None = Field(None, **_doc(
        "Power limit of every GPU: watts, default, max or <n>% of default.", "700"))
    hosts: list[Host] = Field(default_factory=list, **_doc(
        "Static hosts (existing backend).", [{"name": "gpu-a-0", "address": "192.0.2.20"}]))
    image: str | None = Field(None, pattern=CLOUD_IMAGE, **_doc(
        "Cloud pools: the machine image. AWS: eks-standard (the EKS Amazon Linux 2023 AMI without NVIDIA "
        "driver; default) or your AMI by id (ami-...). Azure: Ubuntu2204 or Ubuntu2404 (default: the release "
        "AKS ships for the Kubernetes version). Google Cloud: "
        "COS_CONTAINERD or UBUNTU_CONTAINERD (the default for ansible pools and operator GPU pools).",
        "eks-standard"))
    capacity: Capacity = Field(default_factory=Capacity, **_doc(
        "Cloud pools: on-demand, an On-Demand Capacity Reservation or a Capacity Block.",
        {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}))
    place: NetworkPlace | None = Field(None, **_doc(
        "Block/rack/leaf switch of every host of the pool (a host's own place overrides it).", {"block": "b1"}))
    node_resources: NodeResources | None = Field(None, **_doc(
        "GPU pools without a cloud instance type: allocatable CPU and memory of one node (Kueue quotas).",
        {"cpu": 192, "memory_gib": 1800}))

    @model_validator(mode="after")
    def _check(self) -> NodePool:
        if self.role == "gpu" and not self.gpu:
            raise ValueError("a gpu pool needs 'gpu' (a model from the catalog, e.g. h100-sxm5-80gb)")
        if self.role == "system" and self.gpu:
            raise ValueError("a system pool carries no GPUs: remove 'gpu' or set role: gpu")
        if self.count is None and (self.min is None or self.max is None):
            raise ValueError("set 'count', or both 'min' and 'max'")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        if self.hosts and self.count is not None and self.count != len(self.hosts):
            raise PydanticCustomError(
                "count_hosts", "count is {count} but the pool lists {n} hosts",
                {"count": self.count, "n": len(self.hosts),
                 "fix": f"set count: {len(self.hosts)} or list {self.count} hosts"})
        return self

    @property
    def size(self) -> int:
        """Nodes to create now: the fixed count, else the autoscaling minimum."""
        return self.count if self.count is not None else (self.min or 0)


def _nvme_class(value: str) -> str:
    from gpufleet.catalog.storage import storage_catalog

    classes = storage_catalog().nvme.classes
    if value not in classes:
        raise PydanticCustomError("drive_class", "not an NVMe class of gpufleet/catalog/storage.yaml",
                                  {"fix": f"use one of {', '.join(sorted(classes))}"})
    return value


NvmeClassName = Annotated[str, AfterValidator(_nvme_class)]


def _gate(description: str, example: float) -> Any:
    # allow_inf_nan=False: a .nan threshold would pass no gate and fail none.
    return Field(None, gt=0, allow_inf_nan=False, **_doc(description, example))


class StorageGates(_Strict):
    """Thresholds of ``gpufleet bench storage`` for one target, each replacing its default (gpufleet/catalog/
    storage.yaml: NVMe datasheet classes; clouds.yaml: the managed Lustre tiers)."""

    min_read_mbps: float | None = _gate("Sequential read (and the parallel per-GPU read), MB/s (10^6 B/s); "
                                        "for Lustre the sum over the pool's nodes.", 20000)
    min_write_mbps: float | None = _gate("Sequential write, MB/s; for Lustre the sum over the pool's nodes.", 10000)
    min_read_iops: float | None = _gate("Random 4 KiB read IOPS (for Lustre summed over the nodes).", 500000)
    min_creates_per_s: float | None = _gate("mdtest file creates per second (Lustre volumes).", 5000)
    min_stats_per_s: float | None = _gate("mdtest file stats per second (Lustre volumes).", 20000)


class LustreVolume(_Strict):
    mount_path: MountPath = Field(**_doc("Where pods and hosts mount it.", "/lustre/datasets"))
    #: Sub-directory of the Lustre filesystem this volume exposes.
    subdir: CleanPath = Field("/", **_doc("Sub-directory of the file system this volume exposes.", "/datasets"))
    capacity_gib: int = Field(gt=0, **_doc("Capacity of the PersistentVolume (GiB).", 1048576))
    throughput_mbps_per_tib: int | None = Field(None, **_doc("Managed Lustre throughput tier.", 250))
    bench_gates: StorageGates | None = Field(None, **_doc(
        "Thresholds of gpufleet bench storage for this volume (default: throughput tier x capacity).",
        {"min_creates_per_s": 5000}))


class Lustre(_Strict):
    #: MGS NIDs, e.g. "10.0.0.5@o2ib" (on-prem) or a managed service endpoint.
    mgs_nids: list[LustreNid] = Field(default_factory=list, **_doc("MGS NIDs.", ["10.0.0.5@o2ib"]))
    fsname: LustreFsname = Field("lustre", **_doc("Lustre file system name (1-8 characters).", "ai"))
    datasets: LustreVolume = Field(**_doc("Read-mostly datasets volume.", {"mount_path": "/lustre/datasets",
                                                                           "capacity_gib": 1048576}))
    checkpoints: LustreVolume = Field(**_doc("Checkpoints volume.", {"mount_path": "/lustre/checkpoints",
                                                                     "capacity_gib": 262144}))


class LocalNvme(_Strict):
    mount_path: MountPath = Field("/scratch", **_doc("Mount point of the local NVMe scratch.", "/scratch"))
    raid0: bool = Field(True, **_doc("Stripe the drives into one md RAID 0 (false: exactly one drive).", True))
    devices: list[DevicePath] = Field(default_factory=list, **_doc(
        "Whole-disk drives for the scratch; empty: every NVMe disk that holds nothing (role local_scratch).",
        ["/dev/nvme2n1", "/dev/nvme3n1"]))
    drive_class: NvmeClassName | None = Field(None, **_doc(
        "NVMe datasheet class of the drives (gpufleet/catalog/storage.yaml; default: its default_class): the "
        "gates of gpufleet bench storage.", "pcie4-u2"))
    bench_gates: StorageGates | None = Field(None, **_doc(
        "Thresholds of gpufleet bench storage for the scratch (default: the drive class x drives).",
        {"min_read_mbps": 20000}))


class Storage(_Strict):
    lustre: Lustre | None = Field(None, **_doc("Lustre file system for datasets and checkpoints.", None))
    local_nvme: LocalNvme | None = Field(None, **_doc("Local NVMe scratch on GPU nodes.", {"raid0": True}))


class Networks(_Strict):
    management_cidr: Cidr | None = Field(None, **_doc(
        "Management network (Ansible, Kubernetes API, monitoring).", "192.0.2.0/24"))
    data_cidr: Cidr | None = Field(None, **_doc(
        "Data plane (RDMA/NCCL) network: not a /0, apart from management_cidr.", "198.51.100.0/24"))
    nccl_socket_ifname: NcclIfList | None = Field(None, **_doc(
        "Interfaces NCCL may use for bootstrap/sockets (NCCL_SOCKET_IFNAME).", "=eth0"))
    ib_hca: NcclIfList | None = Field(None, **_doc("HCAs NCCL uses (NCCL_IB_HCA).", "mlx5"))


class LockConfig(_Strict):
    """The stack's choice of version profile and overrides; resolved by gpufleet.lock."""

    profile: str = Field(**_doc("Version profile (gpufleet/lock/profiles.yaml).", "h100-cuda12.8"))
    versions: dict[str, str] = Field(default_factory=dict, **_doc(
        "Single-entry version overrides (docs/version-lock.md).", {"dcgm": "4.4.1"}))
    cuda_compat: Literal["strict", "minor-version"] = Field("strict", **_doc(
        "strict: NVIDIA's per-toolkit minimum driver; minor-version: CUDA minor version compatibility.",
        "strict"))


class Sandbox(_Strict):
    """Settings of the local container sandbox (backend local)."""

    board: PlainName = Field("h100-hgx", **_doc("Simulated board: h100-hgx, a100-hgx, l40s-pcie.", "h100-hgx"))


#: An image reference pinned to a tag (``latest`` is refused in the validator) or to a digest.
PINNED_IMAGE = r"^[a-z0-9][a-z0-9._/:-]*[a-z0-9](@sha256:[0-9a-f]{64}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$"


class Monitoring(_Strict):
    """Who scrapes the metrics: kube-prometheus-stack installed by gpufleet, or a Prometheus you run."""

    #: kube-prometheus-stack: gpufleet installs the chart (lock entry kube_prometheus_stack) on system nodes;
    #: existing: a Prometheus Operator already runs and selects our ServiceMonitors/PrometheusRules by label.
    mode: Literal["kube-prometheus-stack", "existing"] = Field("kube-prometheus-stack", **_doc(
        "kube-prometheus-stack (installed by gpufleet) or existing (your Prometheus Operator).", "existing"))
    #: Labels the existing Prometheus selects objects by (its serviceMonitorSelector / ruleSelector).
    selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, **_doc(
        "Labels your Prometheus selects ServiceMonitors and PrometheusRules by (mode existing).",
        {"release": "prometheus"}))

    @model_validator(mode="after")
    def _check(self) -> Monitoring:
        if self.mode == "existing" and not self.selector:
            raise ValueError("monitoring mode existing needs 'selector': the labels your Prometheus selects "
                             "ServiceMonitors and PrometheusRules by (e.g. {release: prometheus})")
        return self


class PodSecurity(_Strict):
    """Pod Security Standard of the workload namespaces (platform namespaces get the level their pods need)."""

    level: Literal["privileged", "baseline", "restricted"] = Field("restricted", **_doc(
        "Pod Security Standard level of the workload namespaces.", "restricted"))
    #: false: warn and audit only (pods that break the level still run); true: enforce it too.
    enforce: bool = Field(False, **_doc("true: enforce the level; false: warn and audit only.", True))


class Drift(_Strict):
    """The in-cluster drift check (gpufleet/drift/deploy/cronjob.yaml), deployed when this is set."""

    #: Image with this repository and its venv, pinned by tag (not latest) or digest.
    image: str = Field(pattern=PINNED_IMAGE, **_doc("Image with this repository, pinned by tag or digest.",
                                                    "registry.example.com/gpufleet:1.0.0"))
    schedule: Annotated[str, AfterValidator(_cron)] = Field(default="17 * * * *", **_doc(
        "Cron schedule of the check (five fields; numbers, *, ranges, lists, steps, month/day names).",
        "17 * * * *"))

    @model_validator(mode="after")
    def _not_latest(self) -> Drift:
        if self.image.endswith(":latest"):
            raise ValueError("the drift image must be pinned: a version tag or @sha256 digest, never :latest")
        return self


class HealthWatch(_Strict):
    """The in-cluster health watcher (docs/validation.md, "The watcher"): a node agent DaemonSet per GPU pool
    and one controller Deployment on system nodes that taints with the rate limit; deployed when this is set."""

    #: Image with this repository and its venv (the drift check's image), pinned by tag (not latest) or digest.
    image: str = Field(pattern=PINNED_IMAGE, **_doc("Image with this repository, pinned by tag or digest.",
                                                    "registry.example.com/gpufleet:1.0.0"))
    interval_s: int = Field(300, ge=30, le=86400, **_doc(
        "Seconds between two checks of every GPU node (the healthy streak counts these).", 300))
    max_share: float = Field(0.10, gt=0, le=1, allow_inf_nan=False, **_doc(
        "Rate limit: share of a pool's nodes that may carry a health taint at once (at least one node).", 0.1))
    healthy_streak: int = Field(3, ge=1, le=1000, **_doc(
        "Consecutive healthy checks before a tainted node is untainted.", 3))

    @model_validator(mode="after")
    def _not_latest(self) -> HealthWatch:
        if self.image.endswith(":latest"):
            raise ValueError("the health watcher image must be pinned: a version tag or @sha256 digest, "
                             "never :latest")
        return self


class AwsAccessEntry(_Strict):
    """An IAM principal allowed into the EKS cluster (an EKS access entry with one access policy)."""

    principal_arn: str = Field(pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$", **_doc(
        "IAM role or user ARN.", "arn:aws:iam::111122223333:role/gpufleet-admins"))
    policy: Literal["AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy", "AmazonEKSEditPolicy",
                    "AmazonEKSViewPolicy"] = Field("AmazonEKSClusterAdminPolicy", **_doc(
                        "EKS access policy, cluster scope.", "AmazonEKSClusterAdminPolicy"))


class Aws(_Strict):
    """Settings of the aws backend (stack key ``gpufleet:aws``)."""

    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", **_doc("AWS region.", "us-east-1"))
    availability_zones: list[str] = Field(min_length=2, **_doc(
        "Zones of the private subnets (EKS needs two); GPU pools and FSx use the first (cluster placement).",
        ["us-east-1a", "us-east-1b"]))
    vpc_cidr: str = Field("10.0.0.0/16", pattern=r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/(1[6-9]|20)$", **_doc(
        "VPC address range, /16 to /20.", "10.20.0.0/16"))
    kubernetes_version: str = Field("1.35", pattern=r"^1\.[0-9]{2}$", **_doc(
        "EKS Kubernetes version (in standard support: gpufleet/catalog/kubernetes.yaml).", "1.35"))
    long_term_support: bool = Field(False, **_doc(
        "Allow a version past standard support in EKS extended support (extra cost); off: standard support "
        "only (upgradePolicy STANDARD).", False))
    endpoint_public_access: bool = Field(False, **_doc(
        "Also expose the API server publicly (default: reachable from inside the VPC only).", False))
    public_access_cidrs: list[str] = Field(default_factory=list, **_doc(
        "Addresses allowed to the public endpoint (with endpoint_public_access).", ["203.0.113.0/24"]))
    access_entries: list[AwsAccessEntry] = Field(default_factory=list, **_doc(
        "IAM principals allowed into the cluster.",
        [{"principal_arn": "arn:aws:iam::111122223333:role/gpufleet-admins"}]))
    ansible_connection: Literal["ssm", "ssh"] = Field("ssm", **_doc(
        "How Ansible reaches nodes of ansible-managed pools: SSM Session Manager or SSH.", "ssm"))
    ssm_bucket: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", **_doc(
        "S3 bucket amazon.aws.aws_ssm stages files in (required with ssm and an ansible pool).",
        "example-ssm-staging"))
    ssh_user: str = Field("ec2-user", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", **_doc(
        "SSH login user (ansible_connection ssh).", "ec2-user"))
    lustre_s3_path: str | None = Field(
        None, pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$", **_doc(
            "S3 data repository linked to the datasets file system (auto-import).", "s3://example-datasets/corpus"))

    @model_validator(mode="after")
    def _check(self) -> Aws:
        try:
            ipaddress.IPv4Network(self.vpc_cidr)
        except ValueError as e:
            raise ValueError(f"vpc_cidr {self.vpc_cidr} is not a network address: {e}") from None
        if len(self.availability_zones) > 7:
            raise ValueError("at most 7 availability zones (the VPC is cut in eighths, one holds the NAT subnets)")
        wrong = [z for z in self.availability_zones if not re.fullmatch(re.escape(self.region) + r"[a-z]", z)]
        if wrong:
            raise ValueError(f"availability zones {', '.join(wrong)} are not zones of region {self.region}")
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise ValueError("public_access_cidrs needs endpoint_public_access: true")
        for cidr in self.public_access_cidrs:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError as e:
                raise ValueError(f"public_access_cidrs: {cidr} is not a network address: {e}") from None
        return self


#: An OpenSSH public key on one line (AKS puts it on the nodes for Ansible-managed pools).
SSH_PUBLIC_KEY = r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,2}( [A-Za-z0-9@._-]{1,64})?$"
UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _network(value: str, low: int, high: int) -> None:
    try:
        net = ipaddress.IPv4Network(value)
    except ValueError as e:
        raise ValueError(f"{value} is not a network address: {e}") from None
    if not low <= net.prefixlen <= high:
        raise ValueError(f"{value}: the prefix must be /{low} to /{high}")


class Azure(_Strict):
    """Settings of the azure backend (stack key ``gpufleet:azure``)."""

    location: str = Field(pattern=r"^[a-z][a-z0-9]{2,30}$", **_doc("Azure region (location name).", "eastus"))
    zone: Literal["1", "2", "3"] = Field("1", **_doc(
        "Availability zone of the GPU pools and the Azure Managed Lustre file systems (close together).", "1"))
    vnet_cidr: str = Field("10.30.0.0/16", **_doc(
        "Virtual network address range, /16 to /20: the first quarter holds the nodes, /24s of the second "
        "quarter the Lustre file systems (pods use the Azure CNI overlay, not VNet addresses).", "10.30.0.0/16"))
    kubernetes_version: str = Field("1.35", pattern=r"^1\.[0-9]{2}$", **_doc(
        "AKS Kubernetes version (in community support: gpufleet/catalog/kubernetes.yaml).", "1.35"))
    long_term_support: bool = Field(False, **_doc(
        "Run an AKS long-term-support version past community support (Premium tier, plan AKSLongTermSupport).",
        False))
    private_cluster: bool = Field(True, **_doc(
        "API server on a private endpoint in the virtual network only (default); false exposes it publicly.",
        True))
    authorized_ip_ranges: list[str] = Field(default_factory=list, **_doc(
        "Addresses allowed to the public API server (private_cluster: false only).", ["203.0.113.0/24"]))
    admin_group_object_ids: list[str] = Field(default_factory=list, **_doc(
        "Microsoft Entra ID groups (object ids) that are cluster admins (local accounts are disabled).",
        ["00000000-0000-0000-0000-000000000000"]))
    ssh_user: str = Field("azureuser", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", **_doc(
        "Node admin user Ansible logs in as (host_management: ansible pools).", "azureuser"))
    ssh_public_key: str | None = Field(None, pattern=SSH_PUBLIC_KEY, **_doc(
        "Public key AKS puts on the nodes for that user (required with an ansible pool).",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample admin@example"))

    @model_validator(mode="after")
    def _check(self) -> Azure:
        _network(self.vnet_cidr, 16, 20)
        if self.authorized_ip_ranges and self.private_cluster:
            raise ValueError("authorized_ip_ranges is for a public API server: set private_cluster: false")
        for cidr in self.authorized_ip_ranges:
            _network(cidr, 0, 32)
        bad = [g for g in self.admin_group_object_ids if re.fullmatch(UUID[1:-1], g) is None]
        if bad:
            raise ValueError(f"admin_group_object_ids: {', '.join(bad)} are not object ids (lower-case UUIDs)")
        return self


def _prefix_between(low: int, high: int) -> Callable[[str], str]:
    """A field validator: an IPv4 network of prefix /low to /high (the error then names the field)."""
    def check(value: str) -> str:
        _network(value, low, high)
        return value
    check.grammar = f"an IPv4 network, /{low} to /{high}"  # type: ignore[attr-defined]  # read by gpufleet.stackdoc
    return check


class Gcp(_Strict):
    """Settings of the gcp backend (stack key ``gpufleet:gcp``)."""

    project: str = Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$", **_doc("Google Cloud project id.",
                                                                          "example-ml-project"))
    region: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]$", **_doc("Region of the cluster's control plane.",
                                                               "us-central1"))
    zone: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]-[a-z]$", **_doc(
        "Zone of the nodes and the Managed Lustre instances (compact placement is zonal).", "us-central1-a"))
    subnet_cidr: Annotated[str, AfterValidator(_prefix_between(16, 24))] = Field(
        "10.40.0.0/20", **_doc("Nodes' subnet, /16 to /24.", "10.40.0.0/20"))
    pods_cidr: Annotated[str, AfterValidator(_prefix_between(9, 21))] = Field(
        "10.44.0.0/14", **_doc("Secondary range of the nodes' subnet for pods, /9 to /21.", "10.44.0.0/14"))
    services_cidr: Annotated[str, AfterValidator(_prefix_between(16, 27))] = Field(
        "10.40.16.0/20", **_doc("Secondary range for Services, /16 to /27.", "10.40.16.0/20"))
    gpu_cidr: Annotated[str, AfterValidator(_prefix_between(16, 20))] = Field("192.168.0.0/16", **_doc(
        "Range the GPU VPCs' subnets are cut from (one /24 per GPU NIC), /16 to /20.", "192.168.0.0/16"))
    lustre_cidr: Annotated[str, AfterValidator(_prefix_between(16, 24))] = Field("10.48.0.0/20", **_doc(
        "Private services access range Managed Lustre takes its addresses from, /16 to /24.", "10.48.0.0/20"))
    master_cidr: Annotated[str, AfterValidator(_prefix_between(28, 28))] = Field(
        "172.16.0.0/28", **_doc("The control plane's private /28.", "172.16.0.0/28"))
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = Field("REGULAR", **_doc(
        "GKE release channel (it also decides the COS driver of GPU nodes).", "REGULAR"))
    kubernetes_version: str | None = Field(None, pattern=r"^1\.[0-9]{2}(\.[0-9]+-gke\.[0-9]+)?$", **_doc(
        "Minimum control plane version (default: the channel's).", "1.34"))
    private_endpoint: bool = Field(True, **_doc(
        "API server on its private endpoint only (default); false also exposes the public one.", True))
    authorized_networks: list[str] = Field(default_factory=list, **_doc(
        "Addresses allowed to the API server (master authorized networks).", ["203.0.113.0/24"]))
    ssh_user: str = Field("gpufleet", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", **_doc(
        "User Ansible logs in as on nodes of host_management: ansible pools, with sudo: your OS Login POSIX "
        "username (docs/clouds.md).", "alice_example_com"))

    @model_validator(mode="after")
    def _check(self) -> Gcp:
        if not self.zone.startswith(self.region + "-"):
            raise ValueError(f"zone {self.zone} is not a zone of region {self.region}")
        nets = [ipaddress.IPv4Network(c) for c in (self.subnet_cidr, self.pods_cidr, self.services_cidr,
                                                   self.gpu_cidr, self.lustre_cidr, self.master_cidr)]
        overlap = [f"{a} and {b}" for i, a in enumerate(nets) for b in nets[i + 1:] if a.overlaps(b)]
        if overlap:
            raise ValueError(f"address ranges overlap: {', '.join(overlap)}")
        for cidr in self.authorized_networks:
            _network(cidr, 0, 32)
        return self


#: Backends whose pools are cloud node groups (autoscaled, no fixed hosts).
CLOUD_BACKENDS = ("aws", "gcp", "azure")


class Scheduling(_Strict):
    """Kueue admission and placement of GPU jobs (docs/scheduling.md)."""

    cohort: DnsLabel | None = Field(None, **_doc(
        "Kueue cohort of the stack's ClusterQueue: queues of one cohort borrow each other's unused quota.",
        "research"))
    topology_level: Literal["block", "rack", "switch", "host"] | None = Field(None, **_doc(
        "Level a job's pods are kept under (default: the innermost level above the host the pool has).",
        "switch"))
    topology_mode: Literal["required", "preferred"] = Field("preferred", **_doc(
        "required: a job waits until it fits under one such domain; preferred: Kueue tries, then widens.",
        "required"))
    pods_ready_timeout_s: int = Field(300, ge=30, **_doc(
        "waitForPodsReady: seconds a job's pods have to all start before Kueue evicts and requeues it.", 600))


class ClusterSpec(_Strict):
    """Everything a stack says about its cluster."""

    stack: DnsLabel
    backend: Literal["local", "existing", "aws", "gcp", "azure"] = Field(**_doc(
        "Where the cluster runs: local (container sandbox), existing (on-prem Kubernetes), aws, gcp, azure.",
        "existing"))
    cluster_name: DnsLabel = Field(**_doc("Cluster name (DNS-1123 label).", "onprem-h100"),
                                   json_schema_extra={"default_text": "gpufleet-<stack>"})
    lock: LockConfig = Field(**_doc("The version lock.", {"profile": "h100-cuda12.8"}))
    #: At least one: a stack without pools has no node to converge, validate or schedule on.
    pools: list[NodePool] = Field(min_length=1, **_doc("Node pools.", [{"name": "system", "role": "system",
                                                                          "count": 3}]))
    storage: Storage = Field(default_factory=Storage, **_doc("Shared and local storage.", {}))
    networks: Networks = Field(default_factory=Networks, **_doc("Networks.", {}))
    sandbox: Sandbox = Field(default_factory=Sandbox, **_doc("Local sandbox settings (backend local).", {}))
    #: At least one: GPU jobs need a namespace (Kueue's LocalQueues and the bench jobs go there).
    workload_namespaces: list[Namespace] = Field(default_factory=lambda: ["training"], min_length=1, **_doc(
        "Namespaces where GPU workloads run (default-deny NetworkPolicies apply there): each once, none a "
        "platform namespace (a chart's in gpufleet/catalog/charts.yaml, or gpufleet).", ["training"]))
    mig_strategy: Literal["none", "single", "mixed"] = Field("none", **_doc(
        "How the GPU Operator exposes MIG devices (GFD and device plugin); single and mixed need a GPU pool "
        "whose GPU has MIG (gpufleet/catalog/gpus.yaml).", "none"))
    monitoring: Monitoring = Field(default_factory=Monitoring, **_doc(
        "Who scrapes the metrics: kube-prometheus-stack installed by gpufleet, or an existing Prometheus.",
        {"mode": "kube-prometheus-stack"}))
    pod_security: PodSecurity = Field(default_factory=PodSecurity, **_doc(
        "Pod Security Standard of the workload namespaces.", {"level": "restricted", "enforce": False}))
    scheduling: Scheduling = Field(default_factory=Scheduling, **_doc(
        "Kueue queues and topology-aware placement of GPU jobs.", {"topology_level": "switch"}))
    drift: Drift | None = Field(None, **_doc("The in-cluster drift check (deployed when set).",
                                             {"image": "registry.example.com/gpufleet:1.0.0"}))
    health_watch: HealthWatch | None = Field(None, **_doc(
        "The in-cluster health watcher that taints unhealthy GPU nodes (deployed when set).",
        {"image": "registry.example.com/gpufleet:1.0.0"}))
    aws: Aws | None = Field(None, **_doc("Settings of the aws backend (required with backend aws).",
                                         {"region": "us-east-1", "availability_zones": ["us-east-1a", "us-east-1b"]}))
    azure: Azure | None = Field(None, **_doc("Settings of the azure backend (required with backend azure).",
                                             {"location": "eastus", "zone": "1"}))
    gcp: Gcp | None = Field(None, **_doc("Settings of the gcp backend (required with backend gcp).",
                                         {"project": "example-ml-project", "region": "us-central1",
                                          "zone": "us-central1-a"}))
    #: Kept for the lock rules' one-lock check; a stack file's unknown keys are refused before (load_spec).
    extra: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _cloud_defaults(cls, data: Any) -> Any:
        # Cloud pools have no hosts Ansible could reach by address: the GPU Operator manages their GPU stack
        # unless the pool says host_management: ansible (then a dynamic inventory finds the nodes).
        if isinstance(data, dict) and data.get("backend") in CLOUD_BACKENDS and isinstance(data.get("pools"), list):
            data = {**data, "pools": [{"host_management": "operator", **p} if isinstance(p, dict) else p
                                      for p in data["pools"]]}
        return data

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(dupes)}")
        return self

    @property
    def gpu_pools(self) -> list[NodePool]:
        return [p for p in self.pools if p.role == "gpu"]

    @property
    def system_pools(self) -> list[NodePool]:
        return [p for p in self.pools if p.role == "system"]


#: Key names whose values are, or when mistyped may be, secrets: an error names the key and never shows the value.
SECRET_NAME = re.compile(r"kubeconfig|passw|secret|token|credential|private|_key\b|_key_|apikey", re.IGNORECASE)


def _shown(loc: tuple[int | str, ...], value: Any, kind: str) -> Any:
    """The value an error shows for ``loc``: redacted where it may be a secret, i.e. under a secret-like key
    name, a key gpufleet does not read (a mistyped ``kubeconfg`` holds the kubeconfig), or pasted key
    material (a private key where the public one belongs)."""
    if kind == "extra_forbidden" or any(isinstance(part, str) and SECRET_NAME.search(part) for part in loc):
        return REDACTED
    if isinstance(value, str) and "-----BEGIN" in value:
        return REDACTED
    return value


#: Stack config keys (without namespace) mapped to ClusterSpec fields.
_FIELDS = {
    "backend": "backend",
    "clusterName": "cluster_name",
    "lock": "lock",
    "pools": "pools",
    "storage": "storage",
    "networks": "networks",
    "sandbox": "sandbox",
    "workloadNamespaces": "workload_namespaces",
    "migStrategy": "mig_strategy",
    "monitoring": "monitoring",
    "podSecurity": "pod_security",
    "drift": "drift",
    "healthWatch": "health_watch",
    "scheduling": "scheduling",
    "aws": "aws",
    "azure": "azure",
    "gcp": "gcp",
}
_REVERSE = {v: k for k, v in _FIELDS.items()}


#: Keys a stack may hold that gpufleet reads elsewhere (Pulumi secrets), never into the model.
SECRET_KEYS = ("kubeconfig",)

#: Keys people write expecting an effect gpufleet does not have: refused with the reason and the way that works.
NOT_READ: dict[str, tuple[str, str]] = {
    "gpuOperator": ("GPU Operator values are rendered from the version lock and the pools; overrides in the "
                    "stack are not read",
                    "remove gpufleet:gpuOperator; choose versions with gpufleet:lock and who manages the "
                    "driver with pools[].host_management (docs/version-lock.md)"),
}


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    """Path of a stack's config file; accepts a stack name or a path (refuses names that are not stack names)."""
    p = Path(stack)
    if p.suffix in (".yaml", ".yml"):
        return p
    if STACK_NAME.fullmatch(stack) is None:
        raise ConfigError([ConfigProblem(
            "--stack", "-", stack, "not a stack name (lower-case letters, digits and '-') nor a stack file path",
            "pass a stack under stacks/ by name (e.g. onprem-h100) or the path of a .yaml file")],
            kind="invalid stack name")
    return stacks_dir / f"Pulumi.{stack}.yaml"


def stack_name(path: Path) -> str:
    name = path.name
    if name.startswith("Pulumi.") and name.endswith((".yaml", ".yml")):
        return name[len("Pulumi.") :].rsplit(".", 1)[0]
    return path.stem


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i == 0:
            out = f"{NAMESPACE}:{_REVERSE.get(part, part)}"
        else:
            out += f".{part}"
    return out or NAMESPACE


def _lookup(data: dict[str, Any], loc: tuple[int | str, ...]) -> Any:
    cur: Any = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def _problem(path: Path, key: str, value: Any, rule: str, fix: str) -> ConfigError:
    return ConfigError([ConfigProblem(str(path), key, value, rule, fix)], kind="stack file problem")


def read_config(path: Path) -> dict[str, Any]:
    """The ``gpufleet:`` config of a stack file, keys without namespace.

    Refuses (ConfigError / InputError naming file, key, value and fix) anything that is not a stack file:
    a missing file, a directory, not UTF-8, invalid YAML, duplicate keys, an alias bomb, a document that is
    not a mapping, keys that are not strings.
    """
    if not path.exists():
        raise ConfigError([ConfigProblem(str(path), "-", None, "stack file not found",
                                         "pass a stack under stacks/ by name (e.g. onprem-h100) or an "
                                         "existing stack file path")], kind="stack file problem")
    raw = load_yaml(path)
    if raw is None:
        raw = {}
    # What is not a stack file is not shown: --stack may name a credentials file by mistake (or a symlink to one).
    if not isinstance(raw, dict):
        raise _problem(path, "-", REDACTED, f"a stack file is a mapping with a config: section, not a "
                       f"{type(raw).__name__}", "write `config:` with gpufleet:<key>: <value> entries under it "
                       "(see docs/stack-config.md)")
    config = raw.get("config") or {}
    if not isinstance(config, dict):
        raise _problem(path, "config", REDACTED, f"must be a mapping, not a {type(config).__name__}",
                       "write config: as key: value pairs")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise _problem(path, f"config.{key!r}", REDACTED, f"config keys are strings, not {type(key).__name__}",
                           "write keys as <namespace>:<key>, e.g. gpufleet:backend")
        if key.startswith(f"{NAMESPACE}:"):
            out[key.split(":", 1)[1]] = value
    return out


def _check_keys(path: Path, cfg: dict[str, Any]) -> list[ConfigProblem]:
    problems = []
    known = [*_FIELDS, *SECRET_KEYS]
    for key, value in cfg.items():
        if key in _FIELDS:
            continue
        if key in SECRET_KEYS:
            if not (isinstance(value, dict) and set(value) == {"secure"}):
                problems.append(ConfigProblem(
                    str(path), f"{NAMESPACE}:{key}", REDACTED,
                    f"{key} is a secret and is in clear text in the stack file",
                    f"remove it from the file (and rotate it: it was exposed), then: pulumi config set "
                    f"--secret {NAMESPACE}:{key} \"$(cat ~/.kube/config)\" --stack <stack>"))
            continue
        # gpufleet does not read these values, so an error has no need to show them (a mistyped secret key
        # holds the secret).
        if key in NOT_READ:
            rule, fix = NOT_READ[key]
            problems.append(ConfigProblem(str(path), f"{NAMESPACE}:{key}", REDACTED, rule, fix))
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"did you mean {NAMESPACE}:{close[0]}?" if close else f"known keys: {', '.join(known)}"
        problems.append(ConfigProblem(str(path), f"{NAMESPACE}:{key}", REDACTED, "unknown key (it would be ignored)",
                                      f"{hint} (docs/stack-config.md lists every key)"))
    return problems


def load_spec(stack: str, stacks_dir: Path = STACKS_DIR) -> ClusterSpec:
    """Read and validate a stack; raise ConfigError naming file, key path, value and fix."""
    path = stack_file(stack, stacks_dir)
    cfg = read_config(path)
    name = stack_name(path)
    if STACK_NAME.fullmatch(name) is None:
        raise _problem(path, "-", name, "the stack name from the file name (Pulumi.<stack>.yaml) is not a DNS-1123 "
                       "label; it names the inventory directory and the Pulumi stack",
                       "rename the file to Pulumi.<name>.yaml with lower-case letters, digits and '-'")
    problems = _check_keys(path, cfg)
    data: dict[str, Any] = {"stack": name}
    for key, value in cfg.items():
        if key in _FIELDS:
            data[_FIELDS[key]] = value
    data.setdefault("cluster_name", f"gpufleet-{data['stack']}")
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            msg = err["msg"].removeprefix("Value error, ")
            value = _shown(loc, _lookup(data, loc), err["type"]) if err["type"] != "missing" else None
            fix = _fix_for(err["type"], loc, msg, err.get("ctx") or {})
            problems.append(ConfigProblem(str(path), _key_path(loc), value, msg, fix))
    else:
        problems.extend(semantic_problems(path, spec))
        problems.extend(cloud_problems(spec, str(path)))
    if problems:
        raise ConfigError(problems, kind="stack file problem")
    return spec


def cloud_problems(spec: ClusterSpec, file: str) -> list[ConfigProblem]:
    """What the cloud backends need beyond each field's own shape: machine types the catalog knows (with
    their GPUs and fabric), managed Lustre sizes, images and reservations of the backend's cloud, how Ansible
    reaches autoscaled nodes."""
    out: list[ConfigProblem] = []

    def bad(key: str, value: Any, why: str, fix: str) -> None:
        out.append(ConfigProblem(file, f"{NAMESPACE}:{key}", value, why, fix))

    for cloud in CLOUD_BACKENDS:
        if getattr(spec, cloud, None) is not None and spec.backend != cloud:
            bad(cloud, "{...}", f"gpufleet:{cloud} is for backend {cloud}, this stack's backend is {spec.backend}",
                f"remove gpufleet:{cloud} or set gpufleet:backend: {cloud}")
    if spec.backend not in CLOUD_BACKENDS:
        for i, pool in enumerate(spec.pools):
            if pool.image is not None or pool.capacity.type != "on-demand":
                bad(f"pools[{i}]", pool.name, "image and capacity are settings of cloud pools",
                    f"remove image/capacity from pool {pool.name}")
        return out
    if getattr(spec, spec.backend) is None:
        bad(spec.backend, None, f"the {spec.backend} backend needs its region and zones",
            f"add gpufleet:{spec.backend}: {{...}} (docs/stack-config.md, docs/clouds.md)")
    for i, pool in enumerate(spec.pools):
        key = f"pools[{i}]"
        if pool.hosts:
            bad(f"{key}.hosts", [h.name for h in pool.hosts], "cloud pools have no static hosts: their node "
                "group makes and replaces the machines", "remove hosts (Ansible finds the nodes by their tags)")
        if pool.image is not None and re.fullmatch(CLOUD_IMAGES[spec.backend][1:-1], pool.image) is None:
            bad(f"{key}.image", pool.image, f"not an image of the {spec.backend} backend",
                f"use an image matching {CLOUD_IMAGES[spec.backend]} (docs/clouds.md)")
        rid = pool.capacity.reservation_id
        if rid is not None and re.fullmatch(RESERVATIONS[spec.backend][1:-1], rid) is None:
            bad(f"{key}.capacity.reservation_id", rid, f"not a reservation of the {spec.backend} backend",
                f"use a reservation matching {RESERVATIONS[spec.backend]}")
        if pool.capacity.type == "capacity-block" and spec.backend != "aws":
            bad(f"{key}.capacity.type", "capacity-block", "Capacity Blocks for ML are an AWS offering",
                "use type reservation with the reservation to consume, or on-demand")
    _catalog_problems(spec, bad)
    _kubernetes_version_problems(spec, bad)
    return out


def _kubernetes_version_problems(spec: ClusterSpec, bad: Bad) -> None:
    """The managed Kubernetes version is one the cloud still supports (gpufleet/catalog/kubernetes.yaml), and
    AKS pools that name an image name the one AKS ships for that version."""
    from gpufleet.catalog import kubernetes as kv

    cfg = getattr(spec, spec.backend, None)
    cloud = kv.versions(spec.backend)
    if cfg is None or cloud is None:
        return
    version, long_term = cfg.kubernetes_version, bool(cfg.long_term_support)
    on = kv.today()
    current = kv.supported_versions(spec.backend, on)
    standing = kv.support(spec.backend, version, on, long_term)
    key = f"{spec.backend}.kubernetes_version"
    if standing is None:
        bad(key, version, f"gpufleet's catalog has no support window for this version on {spec.backend}",
            f"use one of {', '.join(current) or 'the catalog versions'} (gpufleet/catalog/kubernetes.yaml)")
        return
    if standing.status == "unsupported":
        entry = cloud.versions[version]
        lts = (f", or set {spec.backend}.long_term_support: true ({cloud.long_term} until "
               f"{entry.long_term_end}, {cloud.long_term_source})"
               if entry.long_term_end is not None and on <= entry.long_term_end and not long_term else "")
        bad(key, version, f"out of standard support since {entry.standard_end} ({entry.source})",
            f"set {' or '.join(current) or 'a newer version'}{lts}")
        return
    want = kv.node_os(spec.backend, version)
    for i, pool in enumerate(spec.pools):
        if want is not None and pool.image is not None and pool.image != want:
            bad(f"pools[{i}].image", pool.image, f"AKS {version} nodes run {want} (AKS moves its Ubuntu OS "
                "SKU with the version)", f"set image: {want} (or remove image)")


Bad = Callable[[str, Any, str, str], None]


def _check_pool_type(bad: Bad, key: str, pool: NodePool, itype: Any, catalog: str, known: list[str]) -> bool:
    """The pool's machine type is in the catalog and carries the pool's GPU; False when it is unknown."""
    if itype is None:
        bad(f"{key}.instance_type", pool.instance_type, f"not an instance type gpufleet's {catalog} catalog knows",
            f"use one of: {', '.join(sorted(known))} (gpufleet/catalog/clouds.yaml)")
        return False
    if itype.gpu != pool.gpu:
        bad(f"{key}.gpu", pool.gpu, f"{itype.name} carries {itype.gpus} x {itype.gpu or 'no GPU'}",
            f"set gpu to {itype.gpu}" if itype.gpu else "use a GPU instance type or role system")
    return True


def _fsx_volume(key: str, vol: LustreVolume, bad: Bad) -> None:
    from gpufleet.catalog.clouds import AWS

    fsx = AWS.fsx_lustre
    if vol.throughput_mbps_per_tib not in fsx.throughput_mbps_per_tib:
        bad(f"{key}.throughput_mbps_per_tib", vol.throughput_mbps_per_tib,
            "FSx for Lustre PERSISTENT_2 offers these throughputs per TiB only",
            f"set one of {fsx.throughput_mbps_per_tib} ({fsx.source})")
    if not fsx.capacity_ok(vol.capacity_gib):
        bad(f"{key}.capacity_gib", vol.capacity_gib,
            f"FSx for Lustre PERSISTENT_2 sizes are {fsx.capacity_gib_first} GiB or a multiple of "
            f"{fsx.capacity_gib_step} GiB", f"round to a multiple of {fsx.capacity_gib_step}")
    if vol.subdir != "/":
        bad(f"{key}.subdir", vol.subdir, "AWS's FSx for Lustre CSI driver mounts a file system's root "
            f"(<dnsname>@tcp:/<mountname>, {fsx.csi.pv_source})",
            "remove subdir (datasets and checkpoints are separate file systems)")


def _amlfs_volume(key: str, vol: LustreVolume, bad: Bad) -> None:
    from gpufleet.catalog.clouds import AZURE

    aml = AZURE.managed_lustre
    tier = aml.tier(vol.throughput_mbps_per_tib)
    if tier is None:
        bad(f"{key}.throughput_mbps_per_tib", vol.throughput_mbps_per_tib,
            "Azure Managed Lustre offers these throughputs per TiB only",
            f"set one of {[t.throughput_mbps_per_tib for t in aml.tiers]} ({aml.tiers_source})")
        return
    tib, rest = divmod(vol.capacity_gib, 1024)
    if rest or not tier.capacity_ok(tib):
        bad(f"{key}.capacity_gib", vol.capacity_gib,
            f"{tier.sku} sizes are {tier.min_tib} to {tier.max_tib} TiB in steps of {tier.step_tib} TiB",
            f"set a multiple of {tier.step_tib * 1024} GiB between {tier.min_tib * 1024} and "
            f"{tier.max_tib * 1024} ({aml.tiers_source})")
    elif aml.prefix_for(tib) is None:
        bad(f"{key}.capacity_gib", vol.capacity_gib, "larger than Microsoft's subnet sizing table goes",
            f"stay within {aml.subnet_prefix[-1].max_tib * 1024} GiB ({aml.network_source})")


def _gcp_lustre_volume(key: str, vol: LustreVolume, bad: Bad) -> None:
    from gpufleet.catalog.clouds import GCP

    ml = GCP.managed_lustre
    tier = ml.tier(vol.throughput_mbps_per_tib)
    if tier is None:
        bad(f"{key}.throughput_mbps_per_tib", vol.throughput_mbps_per_tib,
            "Google Cloud Managed Lustre offers these throughputs per TiB only",
            f"set one of {[t.throughput_mbps_per_tib for t in ml.tiers]} ({ml.tiers_source})")
    elif not tier.capacity_ok(vol.capacity_gib):
        bad(f"{key}.capacity_gib", vol.capacity_gib,
            f"Managed Lustre at {tier.throughput_mbps_per_tib} MB/s per TiB takes {tier.min_gib} to "
            f"{tier.max_gib} GiB in steps of {tier.step_gib} GiB",
            f"set a multiple of {tier.step_gib} GiB between {tier.min_gib} and {tier.max_gib} ({ml.tiers_source})")
    if vol.subdir != "/":
        bad(f"{key}.subdir", vol.subdir, "GKE's Managed Lustre CSI driver mounts an instance's root",
            "remove subdir (datasets and checkpoints are separate instances)")


def _aws_extra(spec: ClusterSpec, bad: Bad) -> None:
    if (spec.aws is not None and spec.aws.ansible_connection == "ssm" and spec.aws.ssm_bucket is None
            and any(p.host_management == "ansible" for p in spec.pools)):
        bad("aws.ssm_bucket", None, "Ansible over SSM (amazon.aws.aws_ssm) stages files in an S3 bucket",
            "set gpufleet:aws.ssm_bucket, or ansible_connection: ssh")


def _azure_extra(spec: ClusterSpec, bad: Bad) -> None:
    if not spec.system_pools:
        bad("pools", [p.name for p in spec.pools], "AKS needs a system pool (mode System) to create the cluster",
            "add a pool with role: system")
    for i, pool in enumerate(spec.pools):
        if re.fullmatch(r"[a-z][a-z0-9]{0,11}", pool.name) is None:
            bad(f"pools[{i}].name", pool.name, "AKS names agent pools with 1-12 lower-case letters and digits, "
                "starting with a letter", "rename the pool (e.g. ndv5, system)")
    if (spec.azure is not None and spec.azure.ssh_public_key is None
            and any(p.host_management == "ansible" for p in spec.pools)):
        bad("azure.ssh_public_key", None, "Ansible reaches AKS nodes over SSH: AKS must put a public key on them",
            "set gpufleet:azure.ssh_public_key (an OpenSSH public key line)")


def _gcp_extra(spec: ClusterSpec, bad: Bad) -> None:
    from gpufleet.catalog.clouds import GCP

    if not spec.system_pools:
        bad("pools", [p.name for p in spec.pools], "a GKE cluster needs a system pool (its system workloads "
            "must not land on GPU nodes)", "add a pool with role: system")
    for i, pool in enumerate(spec.pools):
        flavour = GCP.flavour(pool.instance_type or "")
        if (flavour is not None and pool.fabric == "gpudirect" and pool.image is not None
                and pool.image != flavour.image):
            bad(f"pools[{i}].image", pool.image, f"{flavour.label} on {pool.instance_type} runs on "
                f"{flavour.image} node images only ({flavour.source})",
                f"set image: {flavour.image} (or remove image)")
    flavours = {GCP.machine_types[p.instance_type].gpudirect for p in spec.gpu_pools
                if p.fabric == "gpudirect" and p.instance_type in GCP.machine_types}
    if spec.gcp is not None and len(flavours) > 2 ** (20 - int(spec.gcp.gpu_cidr.split("/")[1])):
        bad("gcp.gpu_cidr", spec.gcp.gpu_cidr, f"each GPUDirect flavour's subnets take a /20 of it; the stack has "
            f"{len(flavours)} ({', '.join(sorted(flavours))})", "use a larger range (/16 holds 16)")
    lustre = spec.storage.lustre
    version = spec.gcp.kubernetes_version if spec.gcp is not None else None
    if lustre is not None and version is not None and int(version.split(".")[1]) < 33:
        bad("gcp.kubernetes_version", version, "Managed Lustre on Lustre's port 988 needs GKE nodes of "
            f"1.33.2-gke.4655000 or later ({GCP.managed_lustre.network_source})", "set 1.34 or later, or remove it")
    # The platform layer hands Managed Lustre to workloads as PVs of GKE's CSI driver, which runs on COS nodes
    # only: an Ubuntu pool (operator or ansible) could not mount them (the lustre_client role is for on-prem MGS
    # NIDs, not GKE PVs).
    ubuntu = [p.name for p in spec.pools if gke_image(p) == "UBUNTU_CONTAINERD"]
    if lustre is not None and ubuntu:
        bad("storage.lustre", "{...}", f"GKE's Managed Lustre CSI driver runs on COS nodes only; pools "
            f"{', '.join(ubuntu)} are Ubuntu", "use host_management: gke (COS) for those pools, or no Lustre")
    if lustre is not None and re.fullmatch(r"[A-Za-z0-9]{1,8}", lustre.fsname) is None:
        bad("storage.lustre.fsname", lustre.fsname, "Managed Lustre file system names are 1-8 letters and digits",
            "rename it (e.g. lustrefs)")


@dataclass(frozen=True)
class _CloudRules:
    """What the stack validation checks of a cloud's pools and managed Lustre: the same shape for every cloud,
    the facts from its catalog section (gpufleet/catalog/clouds.yaml)."""

    #: The cloud's name in messages, and the catalog's machine types (name -> type with .gpu, .gpus).
    name: str
    types: Callable[[], Mapping[str, Any]]
    #: The fabric value of this cloud's GPU pools, its name, and how many fabric interfaces a type has.
    fabric: str
    fabric_name: str
    interfaces: Callable[[Any], int]
    lustre_service: str
    lustre_volume: Callable[[str, LustreVolume, Bad], None]
    extra: Callable[[ClusterSpec, Bad], None]


def _cloud_rules() -> dict[str, _CloudRules]:
    from gpufleet.catalog.clouds import AWS, AZURE, GCP

    return {
        "aws": _CloudRules("AWS", lambda: AWS.instance_types, "efa", "EFA", lambda t: t.efa_interfaces,
                           "FSx for Lustre", _fsx_volume, _aws_extra),
        "azure": _CloudRules("Azure", lambda: AZURE.vm_sizes, "infiniband", "InfiniBand",
                             lambda t: t.infiniband_hcas, "Azure Managed Lustre", _amlfs_volume, _azure_extra),
        "gcp": _CloudRules("Google Cloud", lambda: GCP.machine_types, "gpudirect", "GPUDirect",
                           lambda t: t.gpu_nics, "Google Cloud Managed Lustre", _gcp_lustre_volume, _gcp_extra),
    }


def _catalog_problems(spec: ClusterSpec, bad: Bad) -> None:
    rules = _cloud_rules()[spec.backend]
    types = rules.types()
    for i, pool in enumerate(spec.pools):
        key = f"pools[{i}]"
        itype = types.get(pool.instance_type or "")
        if not _check_pool_type(bad, key, pool, itype, rules.name, list(types)) or itype is None:
            continue
        if pool.fabric not in (rules.fabric, "none"):
            bad(f"{key}.fabric", pool.fabric, f"{rules.name} GPU machine types have one fabric: their fabric is "
                f"{rules.fabric_name}", f"set fabric: {rules.fabric} (or none for a pool without inter-node "
                "GPU traffic)")
        elif pool.fabric == rules.fabric and rules.interfaces(itype) == 0:
            bad(f"{key}.fabric", pool.fabric, f"{itype.name} has no {rules.fabric_name}", "set fabric: none")
    lustre = spec.storage.lustre
    if lustre is not None:
        if lustre.mgs_nids:
            bad("storage.lustre.mgs_nids", lustre.mgs_nids, f"the {spec.backend} backend makes "
                f"{rules.lustre_service} file systems itself; their MGS address comes from them", "remove mgs_nids")
        for name, vol in (("datasets", lustre.datasets), ("checkpoints", lustre.checkpoints)):
            rules.lustre_volume(f"storage.lustre.{name}", vol, bad)
    rules.extra(spec, bad)


def _same_host(host: Host) -> str | ipaddress.IPv4Address | ipaddress.IPv6Address:
    """What identifies the machine behind ``host.address``: an IP address as an address (``2001:db8::a`` and
    ``2001:0db8:0:0::A`` are one, an IPv4-mapped IPv6 address is its IPv4 address), a DNS name without case, a
    container name as written."""
    if host.connection == "docker":
        return host.address
    try:
        ip = ipaddress.ip_address(host.address)
    except ValueError:
        return host.address.lower()
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped if mapped is not None else ip


def _repeats(items: Iterable[tuple[Hashable, _T]]) -> Iterator[tuple[_T, _T]]:
    """``(first, later)`` for each item whose identity an earlier one already had: the one first-seen rule the
    "listed twice" checks share (each names both places)."""
    first: dict[Hashable, _T] = {}
    for same, item in items:
        if same in first:
            yield first[same], item
        else:
            first[same] = item


def _host_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """A host (by name or by address, compared as what they name) in two places: it would get two pools'
    settings, or two inventory entries for one machine."""
    problems = []
    for attr in ("name", "address"):
        entries = ((_same_host(host) if attr == "address" else getattr(host, attr),
                    (pool.name, f"{NAMESPACE}:pools[{i}].hosts[{j}].{attr}", getattr(host, attr)))
                   for i, pool in enumerate(spec.pools) for j, host in enumerate(pool.hosts))
        for (first_pool, first_key, first_value), (pool_name, key, value) in _repeats(entries):
            where = f"pools {first_pool} and {pool_name}" if first_pool != pool_name else f"pool {pool_name} twice"
            spelled = f", written {first_value}" if first_value != value else ""
            problems.append(ConfigProblem(
                str(path), key, value, f"host {value} is in {where} ({first_key} is the same {attr}{spelled})",
                f"list the host once, in one pool (remove {key} or {first_key})"))
    return problems


def _namespace_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """Workload namespaces listed twice, or that are a platform namespace (gpufleet's own or a chart's, from
    the chart catalog): default-deny NetworkPolicies and the workload Pod Security level would land on the GPU
    Operator, monitoring or Kueue."""
    from gpufleet.infra.charts import PLATFORM_NAMESPACES

    problems = []
    repeated = {i: first for first, i in _repeats((ns, i) for i, ns in enumerate(spec.workload_namespaces))}
    for i, ns in enumerate(spec.workload_namespaces):
        key = f"{NAMESPACE}:workloadNamespaces[{i}]"
        if i in repeated:
            problems.append(ConfigProblem(str(path), key, ns, f"listed twice: {NAMESPACE}:workloadNamespaces"
                                          f"[{repeated[i]}] is {ns} too", f"remove {key}"))
        elif ns in PLATFORM_NAMESPACES:
            problems.append(ConfigProblem(
                str(path), key, ns, f"{ns} is a platform namespace gpufleet installs into: default-deny "
                "NetworkPolicies and the workload Pod Security level there break its components",
                f"use a namespace of its own for workloads (not {', '.join(sorted(PLATFORM_NAMESPACES))})"))
    return problems


def _network_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """A /0 is every address, not a network of the cluster; the data plane and management networks are
    separate networks (LNet and NCCL pick interfaces by the data network: overlapping, they take the
    management NIC)."""
    problems = []
    nets = spec.networks
    parsed: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for field in ("management_cidr", "data_cidr"):
        value = getattr(nets, field)
        if value is None:
            continue
        net = ipaddress.ip_network(value, strict=False)
        key = f"{NAMESPACE}:networks.{field}"
        if net.prefixlen == 0:
            problems.append(ConfigProblem(str(path), key, value, "a /0 is every address, not a network of the "
                                          "cluster", f"set the {field.split('_')[0]} network's own prefix, e.g. "
                                          "198.51.100.0/24"))
        else:
            parsed[field] = net
    mgmt, data = parsed.get("management_cidr"), parsed.get("data_cidr")
    if mgmt is not None and data is not None and mgmt.version == data.version and mgmt.overlaps(data):
        what = "is the management network" if mgmt == data else f"overlaps the management network {mgmt}"
        problems.append(ConfigProblem(
            str(path), f"{NAMESPACE}:networks.data_cidr", nets.data_cidr,
            f"{what} ({NAMESPACE}:networks.management_cidr = {nets.management_cidr}): NCCL and LNet would use "
            "the management interfaces for data", "set the data (RDMA) network's own range, or remove data_cidr "
            "where there is no separate data network"))
    return problems


def _mig_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """A MIG strategy needs a GPU with MIG (the catalog's mig flag): on others the GPU Operator's MIG manager
    and the device plugin's MIG strategy have nothing to partition. Models the catalog lacks are the lock
    rules' error, not this one."""
    from gpufleet.catalog import GPUS

    known = [(p.name, p.gpu, GPUS[p.gpu]) for p in spec.gpu_pools if p.gpu in GPUS]
    if spec.mig_strategy == "none" or any(model.mig for _, _, model in known):
        return []
    if not known and spec.gpu_pools:
        return []
    pools = ", ".join(f"{name} ({gpu})" for name, gpu, _ in known) or "none"
    return [ConfigProblem(str(path), f"{NAMESPACE}:migStrategy", spec.mig_strategy,
                          f"no GPU pool has a GPU with MIG (GPU pools: {pools}; gpufleet/catalog/gpus.yaml)",
                          "set migStrategy: none, or add a pool of MIG-capable GPUs (A100, H100, H200, B200)")]


def _storage_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """Mount paths (already in their one spelling) that collide: the scratch on a Lustre mount point hides it."""
    problems = []
    lustre, scratch = spec.storage.lustre, spec.storage.local_nvme
    if scratch is not None:
        for first, i in _repeats((dev, i) for i, dev in enumerate(scratch.devices)):
            key, dev = f"{NAMESPACE}:storage.local_nvme.devices[{i}]", scratch.devices[i]
            problems.append(ConfigProblem(str(path), key, dev, f"listed twice: {NAMESPACE}:storage.local_nvme."
                                          f"devices[{first}] is the same drive", f"remove {key}"))
    if lustre is not None and scratch is not None:
        for name, vol in (("datasets", lustre.datasets), ("checkpoints", lustre.checkpoints)):
            if vol.mount_path == scratch.mount_path:
                problems.append(ConfigProblem(
                    str(path), f"{NAMESPACE}:storage.local_nvme.mount_path", scratch.mount_path,
                    f"is the mount path of the Lustre {name} volume ({NAMESPACE}:storage.lustre.{name}.mount_path):"
                    " one file system would hide the other", "give the scratch its own path, e.g. /scratch"))
    return problems


def _taint_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """Two taints of one pool with the same key and effect: Kubernetes refuses the node ("taints must be unique
    by key and effect pair", k8s.io/kubernetes pkg/apis/core/validation)."""
    problems = []
    for i, pool in enumerate(spec.pools):
        for first, j in _repeats(((t.key, t.effect), j) for j, t in enumerate(pool.taints)):
            key, taint = f"{NAMESPACE}:pools[{i}].taints[{j}]", pool.taints[j]
            problems.append(ConfigProblem(
                str(path), key, f"{taint.key}:{taint.effect}", f"pool {pool.name} has this key and effect "
                f"twice ({NAMESPACE}:pools[{i}].taints[{first}]): Kubernetes refuses the node",
                f"remove {key}, or give it another effect"))
    return problems


def semantic_problems(path: Path, spec: ClusterSpec) -> list[ConfigProblem]:
    """What each field's grammar cannot see: duplicates that differ only in spelling, overlapping networks,
    settings the pools' hardware cannot have, mount points that collide. Each names both places."""
    return [*_host_problems(path, spec), *_namespace_problems(path, spec), *_network_problems(path, spec),
            *_mig_problems(path, spec), *_storage_problems(path, spec), *_taint_problems(path, spec)]


def _fix_for(kind: str, loc: tuple[int | str, ...], msg: str, ctx: dict[str, Any]) -> str:
    key = _key_path(loc)
    if "fix" in ctx:
        return str(ctx["fix"])
    if "example" in ctx:
        return f"set {key} to a valid value, e.g. {ctx['example']} (docs/stack-config.md)"
    if kind == "missing":
        return f"add {key} (docs/stack-config.md)"
    if kind == "extra_forbidden":
        return f"remove {key} (unknown key; docs/stack-config.md lists the keys)"
    if kind == "literal_error":
        return f"set {key} to one of the allowed values ({msg.split('Input should be ')[-1]})"
    return f"correct {key} (docs/stack-config.md)"


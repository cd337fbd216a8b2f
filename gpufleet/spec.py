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

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from gpufleet import REPO_ROOT
from gpufleet.errors import ConfigError, ConfigProblem
from gpufleet.module_utils.power_limit import canonical_power_limit

NAMESPACE = "gpufleet"
STACKS_DIR = REPO_ROOT / "stacks"

#: Taint every GPU node carries so that only pods that tolerate it land there.
GPU_TAINT_KEY = "nvidia.com/gpu"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Taint(_Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Host(_Strict):
    """A static host of a pool (existing/on-prem backend, and the sandbox)."""

    name: str
    address: str
    #: How Ansible reaches it: ssh for real hosts, docker for sandbox containers.
    connection: Literal["ssh", "docker"] = "ssh"
    user: str | None = None


#: A power limit as the stack file may write it; the same grammar the lock rules, role and module read.
PowerLimitText = Annotated[str, BeforeValidator(canonical_power_limit)]


class NodePool(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    role: Literal["system", "gpu"]
    #: GPU model key from the catalog (gpufleet.catalog), required for role gpu.
    gpu: str | None = None
    count: int | None = Field(default=None, ge=0)
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)
    instance_type: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    fabric: Literal["infiniband", "roce", "efa", "none"] = "none"
    #: Who installs the NVIDIA stack on these hosts: our Ansible roles or the GPU Operator's containers.
    host_management: Literal["ansible", "operator"] = "ansible"
    #: Power limit for every GPU of the pool, in the one power-limit grammar (gpufleet.module_utils.power_limit),
    #: stored in its canonical text (700 -> "700").
    power_limit: PowerLimitText | None = None
    hosts: list[Host] = Field(default_factory=list)

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
        return self

    @property
    def size(self) -> int:
        """Nodes to create now: the fixed count, else the autoscaling minimum."""
        return self.count if self.count is not None else (self.min or 0)


class LustreVolume(_Strict):
    mount_path: str = Field(pattern=r"^/")
    #: Sub-directory of the Lustre filesystem this volume exposes.
    subdir: str = "/"
    capacity_gib: int = Field(gt=0)
    throughput_mbps_per_tib: int | None = None


class Lustre(_Strict):
    #: MGS NIDs, e.g. "10.0.0.5@o2ib" (on-prem) or a managed service endpoint.
    mgs_nids: list[str] = Field(default_factory=list)
    fsname: str = "lustre"
    datasets: LustreVolume
    checkpoints: LustreVolume


class LocalNvme(_Strict):
    mount_path: str = Field(default="/scratch", pattern=r"^/")
    raid0: bool = True


class Storage(_Strict):
    lustre: Lustre | None = None
    local_nvme: LocalNvme | None = None


class Networks(_Strict):
    #: Management (Ansible, Kubernetes API, monitoring) network.
    management_cidr: str | None = None
    #: Data plane (RDMA/NCCL) network.
    data_cidr: str | None = None
    #: Interfaces NCCL may use for bootstrap/sockets (NCCL_SOCKET_IFNAME).
    nccl_socket_ifname: str | None = None
    #: HCAs NCCL uses (NCCL_IB_HCA), e.g. "mlx5".
    ib_hca: str | None = None


class LockConfig(_Strict):
    """The stack's choice of version profile and overrides; resolved by gpufleet.lock."""

    profile: str
    versions: dict[str, str] = Field(default_factory=dict)
    #: strict: NVIDIA's per-toolkit minimum driver; minor-version: CUDA minor version compatibility.
    cuda_compat: Literal["strict", "minor-version"] = "strict"


class Sandbox(_Strict):
    """Settings of the local container sandbox (backend local)."""

    #: Simulated board: h100-hgx (default), a100-hgx, l40s-pcie.
    board: str = "h100-hgx"


#: An image reference pinned to a tag (``latest`` is refused in the validator) or to a digest.
PINNED_IMAGE = r"^[a-z0-9][a-z0-9._/:-]*[a-z0-9](@sha256:[0-9a-f]{64}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$"


class Monitoring(_Strict):
    """Who scrapes the metrics: kube-prometheus-stack installed by gpufleet, or a Prometheus you run."""

    #: kube-prometheus-stack: gpufleet installs the chart (lock entry kube_prometheus_stack) on system nodes;
    #: existing: a Prometheus Operator already runs and selects our ServiceMonitors/PrometheusRules by label.
    mode: Literal["kube-prometheus-stack", "existing"] = "kube-prometheus-stack"
    #: Labels the existing Prometheus selects objects by (its serviceMonitorSelector / ruleSelector).
    selector: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Monitoring:
        if self.mode == "existing" and not self.selector:
            raise ValueError("monitoring mode existing needs 'selector': the labels your Prometheus selects "
                             "ServiceMonitors and PrometheusRules by (e.g. {release: prometheus})")
        return self


class PodSecurity(_Strict):
    """Pod Security Standard of the workload namespaces (platform namespaces get the level their pods need)."""

    level: Literal["privileged", "baseline", "restricted"] = "restricted"
    #: false: warn and audit only (pods that break the level still run); true: enforce it too.
    enforce: bool = False


class Drift(_Strict):
    """The in-cluster drift check (gpufleet/drift/deploy/cronjob.yaml), deployed when this is set."""

    #: Image with this repository and its venv, pinned by tag (not latest) or digest.
    image: str = Field(pattern=PINNED_IMAGE)
    schedule: str = Field(default="17 * * * *", pattern=r"^(\S+ ){4}\S+$")

    @model_validator(mode="after")
    def _not_latest(self) -> Drift:
        if self.image.endswith(":latest"):
            raise ValueError("the drift image must be pinned: a version tag or @sha256 digest, never :latest")
        return self


class ClusterSpec(_Strict):
    """Everything a stack says about its cluster."""

    stack: str
    backend: Literal["local", "existing", "aws", "gcp", "azure"]
    cluster_name: str
    lock: LockConfig
    pools: list[NodePool]
    storage: Storage = Field(default_factory=Storage)
    networks: Networks = Field(default_factory=Networks)
    sandbox: Sandbox = Field(default_factory=Sandbox)
    #: Namespaces where GPU workloads run (default-deny NetworkPolicies apply there).
    workload_namespaces: list[str] = Field(default_factory=lambda: ["training"])
    #: How the GPU Operator exposes MIG devices (GFD and device plugin): none, single or mixed.
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    monitoring: Monitoring = Field(default_factory=Monitoring)
    pod_security: PodSecurity = Field(default_factory=PodSecurity)
    drift: Drift | None = None
    #: Config keys gpufleet does not model (cloud region etc.), passed to backends verbatim.
    extra: dict[str, Any] = Field(default_factory=dict)

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
}
_REVERSE = {v: k for k, v in _FIELDS.items()}


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    """Path of a stack's config file; accepts a stack name or a path."""
    p = Path(stack)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
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


def read_config(path: Path) -> dict[str, Any]:
    """The ``gpufleet:`` config of a stack file, keys without namespace."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(
            [ConfigProblem(str(path), "-", None, "stack file not found",
                           f"create {path} or pass an existing stack (see stacks/)")]
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError([ConfigProblem(str(path), "-", None, f"invalid YAML: {e}", "fix the syntax")]) from None
    config = raw.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError([ConfigProblem(str(path), "config", config, "must be a mapping",
                                         "write config: as key: value pairs")])
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")}


def load_spec(stack: str, stacks_dir: Path = STACKS_DIR) -> ClusterSpec:
    """Read and validate a stack; raise ConfigError naming file, key path, value and fix."""
    path = stack_file(stack, stacks_dir)
    cfg = read_config(path)
    data: dict[str, Any] = {"stack": stack_name(path)}
    extra: dict[str, Any] = {}
    for key, value in cfg.items():
        if key in _FIELDS:
            data[_FIELDS[key]] = value
        else:
            extra[key] = value
    data.setdefault("cluster_name", f"gpufleet-{data['stack']}")
    data["extra"] = extra
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            msg = err["msg"].removeprefix("Value error, ")
            value = _lookup(data, loc) if err["type"] != "missing" else None
            fix = _fix_for(err["type"], loc, msg)
            problems.append(ConfigProblem(str(path), _key_path(loc), value, msg, fix))
        raise ConfigError(problems) from None


def _fix_for(kind: str, loc: tuple[int | str, ...], msg: str) -> str:
    key = _key_path(loc)
    if kind == "missing":
        return f"add {key}"
    if kind == "extra_forbidden":
        return f"remove {key} (unknown key; check its spelling against docs/stack-config.md)"
    if kind == "literal_error":
        return f"set {key} to one of the allowed values ({msg.split('Input should be ')[-1]})"
    return f"correct {key}"

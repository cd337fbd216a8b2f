"""Compatibility rules of a lock against its stack. Each returns ConfigProblems; nothing raises here.

The message of every rule names the value, the rule and a fix; docs/version-lock.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.catalog import GPUS, GpuModel
from gpufleet.catalog.charts import CHARTS
from gpufleet.errors import ConfigProblem
from gpufleet.lock import compat
from gpufleet.lock.model import Lock
from gpufleet.lock.packages import DOCA_RELEASES
from gpufleet.lock.profiles import PROFILES
from gpufleet.lock.versions import (
    cuda_major_minor,
    cuda_update,
    nccl_cuda_build,
    vtuple,
)
from gpufleet.module_utils.power_limit import GRAMMAR as POWER_LIMIT_GRAMMAR
from gpufleet.module_utils.power_limit import PowerLimitError
from gpufleet.spec import ClusterSpec, NodePool


class RuleContext:
    """What every rule needs: the lock, the stack, where a value came from (override or profile).

    The naming methods (file_of, key, setting, pool_problem, ...) say where a value lives and what to
    change, naming stack-file keys. The rules run only here, once per command (gpufleet.lock.resolve);
    Ansible runs check the lock digest of what was rendered from a checked lock (gpufleet.lock.digest).
    """

    def __init__(self, spec: ClusterSpec, lock: Lock, file: str, overridden: set[str] | None = None) -> None:
        self.spec = spec
        self.lock = lock
        self.file = file
        self.overridden = set(spec.lock.versions) if overridden is None else overridden

    def file_of(self, entry: str) -> str:
        return self.file

    def key(self, entry: str) -> str:
        if entry in self.overridden:
            return f"gpufleet:lock.versions.{entry}"
        return f"gpufleet:lock.profile[{self.lock.profile}].{entry}"

    def setting(self, entry: str) -> str:
        """What a fix tells the user to set for a lock entry."""
        return f"versions.{entry}"

    def compat_setting(self) -> str:
        return "gpufleet:lock.cuda_compat"

    def pool_setting(self, field: str) -> str:
        return field

    def pool_problem(self, index: int, pool: NodePool, field: str, value: Any, rule: str,
                     fix: str) -> ConfigProblem:
        return ConfigProblem(self.file, f"gpufleet:pools[{index}].{field}", value, rule, fix)

    def blame(self, primary: str, secondary: str) -> str:
        """The entry to point at when two conflict: the overridden one, else primary."""
        if secondary in self.overridden and primary not in self.overridden:
            return secondary
        return primary

    def problem(self, entry: str, rule: str, fix: str) -> ConfigProblem:
        return ConfigProblem(self.file_of(entry), self.key(entry), getattr(self.lock, entry), rule, fix)

    def gpu_pools(self) -> list[tuple[int, NodePool, GpuModel]]:
        out = []
        for i, pool in enumerate(self.spec.pools):
            if pool.role == "gpu" and pool.gpu in GPUS:
                out.append((i, pool, GPUS[pool.gpu]))
        return out

    def gpus(self) -> dict[str, tuple[GpuModel, list[str]]]:
        """Distinct GPU models of the stack with the names of their pools."""
        seen: dict[str, tuple[GpuModel, list[str]]] = {}
        for _, pool, gpu in self.gpu_pools():
            seen.setdefault(gpu.key, (gpu, []))[1].append(pool.name)
        return seen


def _profiles_for(gpu_key: str) -> str:
    names = [p.name for p in PROFILES.values() if gpu_key in p.gpus]
    return ", ".join(names) if names else "none bundled"


def rule_cuda_driver(c: RuleContext) -> list[ConfigProblem]:
    lock = c.lock
    major, minor = cuda_major_minor(lock.cuda)
    update = cuda_update(lock.cuda)
    floor = compat.CUDA_MINOR_COMPAT_FLOOR.get(major)
    entry = c.blame("driver", "cuda")
    if lock.cuda_compat == "minor-version":
        if floor is None:
            rule = f"CUDA {major}.x has no minor version compatibility floor in gpufleet's table"
            fix = (f"set {c.compat_setting()}: strict, or add the floor to gpufleet/lock/compat.py "
                   "with its source")
            return [c.problem("cuda", rule, fix)]
        if vtuple(lock.driver) < vtuple(floor):
            rule = (f"CUDA {lock.cuda} under minor version compatibility needs driver >= {floor} "
                    f"(CUDA {major}.x floor), driver is {lock.driver}")
            return [c.problem(entry, rule, f"set {c.setting('driver')} to {floor} or newer")]
        return []
    minimum = compat.cuda_min_driver(major, minor, update)
    if minimum is None:
        known = sorted(f"{a}.{b}.{u}" for (a, b, u) in compat.CUDA_MIN_DRIVER if (a, b) == (major, minor))
        choices = ", ".join(known) if known else "a toolkit listed in gpufleet/lock/compat.py"
        rule = f"CUDA {lock.cuda} is not in NVIDIA's minimum-driver table known to gpufleet"
        fix = (f"set {c.setting('cuda')} to {choices}, or add CUDA {lock.cuda} to gpufleet/lock/compat.py "
               "with its source")
        return [c.problem("cuda", rule, fix)]
    if vtuple(lock.driver) >= vtuple(minimum):
        return []
    label = "GA" if update == 0 else f"Update {update}"
    fix = f"set {c.setting('driver')} to {minimum} or newer, or pick a toolkit this driver supports"
    if floor is not None and vtuple(lock.driver) >= vtuple(floor):
        fix += (f", or set {c.compat_setting()}: minor-version to accept CUDA minor version "
                f"compatibility (driver >= {floor})")
    return [c.problem(entry, f"CUDA {lock.cuda} needs driver >= {minimum} (NVIDIA's minimum for CUDA "
                             f"{major}.{minor} {label}), driver is {lock.driver}", fix)]


def rule_gpu_driver_branch(c: RuleContext) -> list[ConfigProblem]:
    out = []
    for gpu, pools in c.gpus().values():
        if c.lock.driver_branch < gpu.min_driver_branch:
            out.append(c.problem(
                "driver",
                f"{gpu.name} (pool {', '.join(pools)}) needs driver branch >= {gpu.min_driver_branch}, "
                f"driver is {c.lock.driver}",
                f"set {c.setting('driver')} to a {gpu.min_driver_branch} or newer driver, or use a profile made "
                f"for {gpu.key} ({_profiles_for(gpu.key)})"))
    return out


def rule_gpu_min_cuda(c: RuleContext) -> list[ConfigProblem]:
    out = []
    for gpu, pools in c.gpus().values():
        if cuda_major_minor(c.lock.cuda) < cuda_major_minor(gpu.min_cuda):
            out.append(c.problem(
                "cuda",
                f"{gpu.name} (pool {', '.join(pools)}, compute capability {gpu.compute_capability}) needs "
                f"CUDA >= {gpu.min_cuda}, toolkit is {c.lock.cuda}",
                f"set {c.setting('cuda')} to {gpu.min_cuda} or newer, or use a profile made for {gpu.key} "
                f"({_profiles_for(gpu.key)})"))
    return out


def rule_open_modules(c: RuleContext) -> list[ConfigProblem]:
    if c.lock.kernel_module == "open":
        return []
    out = []
    for gpu, pools in c.gpus().values():
        if gpu.open_modules_required:
            out.append(c.problem(
                "kernel_module",
                f"{gpu.name} (pool {', '.join(pools)}) requires the open kernel modules, kernel_module is "
                f"{c.lock.kernel_module}",
                f"set {c.setting('kernel_module')} to open"))
    return out


def rule_fabric_manager(c: RuleContext) -> list[ConfigProblem]:
    lock = c.lock
    if not lock.fabric_manager_required:
        return []
    out = []
    if lock.fabric_manager != lock.driver:
        rule = f"fabric manager {lock.fabric_manager} must equal driver {lock.driver}"
        out.append(c.problem("fabric_manager", rule,
                             f"set {c.setting('fabric_manager')} to {lock.driver} or remove the override"))
    if lock.nscq != lock.driver:
        out.append(c.problem("nscq", f"NSCQ {lock.nscq} must equal driver {lock.driver}",
                             f"set {c.setting('nscq')} to {lock.driver} or remove the override"))
    return out


def rule_nccl_cuda(c: RuleContext) -> list[ConfigProblem]:
    lock = c.lock
    cmaj, cmin = cuda_major_minor(lock.cuda)
    bmaj, bmin = nccl_cuda_build(lock.nccl)
    if bmaj != cmaj:
        rule = (f"NCCL {lock.nccl} is built for CUDA {bmaj}.{bmin}, the toolkit is CUDA {lock.cuda}: "
                "the CUDA major must match")
    elif bmin > cmin:
        rule = (f"NCCL {lock.nccl} is built for CUDA {bmaj}.{bmin}, "
                f"newer than the toolkit's CUDA {cmaj}.{cmin}")
    else:
        return []
    hint = compat.suggest_nccl(cmaj, cmin)
    fix = f"set {c.setting('nccl')} to a +cuda{cmaj}.{cmin} build"
    if hint and not hint.endswith(f"+cuda{cmaj}.{cmin}"):
        fix += f" or one for an older CUDA {cmaj}.x"
    fix += f" (e.g. {hint})" if hint else ""
    return [c.problem(c.blame("nccl", "cuda"), rule, fix)]


def rule_cudnn_cuda(c: RuleContext) -> list[ConfigProblem]:
    lock = c.lock
    major, _ = cuda_major_minor(lock.cuda)
    majors = compat.cudnn_cuda_majors(lock.cudnn)
    if major in majors:
        return []
    built = ", ".join(str(m) for m in majors) or "no CUDA major gpufleet knows"
    fix = f"set {c.setting('cudnn')} to a cuDNN with a CUDA {major} build"
    if major == 13:
        fix += " (9.12.0.46 or newer)"
    rule = (f"cuDNN {lock.cudnn} has no build for CUDA {major} (toolkit {lock.cuda}); "
            f"it is built for CUDA {built}")
    return [c.problem(c.blame("cudnn", "cuda"), rule, fix)]


def rule_dcgm_cuda(c: RuleContext) -> list[ConfigProblem]:
    lock = c.lock
    major, _ = cuda_major_minor(lock.cuda)
    majors = compat.dcgm_cuda_majors(lock.dcgm)
    if major in majors:
        return []
    built = ", ".join(str(m) for m in majors) or "no CUDA major gpufleet knows"
    fix = f"set {c.setting('dcgm')} to a DCGM release with CUDA {major} support"
    if major == 13:
        fix += " (4.4.1 or newer)"
    rule = (f"DCGM {lock.dcgm} has no CUDA {major} build (datacenter-gpu-manager-4-cuda{major}); "
            f"it supports CUDA {built}")
    return [c.problem(c.blame("dcgm", "cuda"), rule, fix)]


def rule_rdma_release(c: RuleContext) -> list[ConfigProblem]:
    """A DOCA release must be one whose DOCA-OFED packages the lock names (gpufleet.lock.packages)."""
    value = c.lock.rdma
    if value == "inbox" or value in DOCA_RELEASES:
        return []
    known = ", ".join(DOCA_RELEASES)
    rule = (f"DOCA {value}: gpufleet names no DOCA-OFED packages for it (known releases: {known}; each with its "
            "package versions in gpufleet/lock/packages.py DOCA_RELEASES)")
    return [c.problem("rdma", rule, f"set {c.setting('rdma')} to inbox or {known}")]


def rule_charts(c: RuleContext) -> list[ConfigProblem]:
    """Every chart version must be one the chart catalog knows, with its public source."""
    out = []
    for chart in CHARTS.values():
        value = getattr(c.lock, chart.lock_entry)
        if value not in chart.versions:
            known = list(chart.versions)
            rule = (f"{chart.name} chart {value} is not in gpufleet's chart catalog (known: {', '.join(known)}; "
                    "each with its release page or index.yaml entry in gpufleet/catalog/charts.yaml)")
            fix = f"set {c.setting(chart.lock_entry)} to {known[-1]} or remove the override"
            out.append(c.problem(chart.lock_entry, rule, fix))
    return out


def rule_pool_gpus_and_power(c: RuleContext) -> list[ConfigProblem]:
    out = []
    for i, pool in enumerate(c.spec.pools):
        if pool.role != "gpu" or pool.gpu is None:
            continue
        gpu = GPUS.get(pool.gpu)
        if gpu is None:
            out.append(c.pool_problem(i, pool, "gpu", pool.gpu, "GPU model is not in the catalog",
                                      f"use one of: {', '.join(sorted(GPUS))}"))
            continue
        if pool.power_limit is None:
            continue
        try:
            gpu.resolve_power_limit(pool.power_limit)
        except PowerLimitError as e:
            out.append(c.pool_problem(
                i, pool, "power_limit", pool.power_limit, str(e),
                f"set {c.pool_setting('power_limit')} within {gpu.power_min_w}-{gpu.power_max_w} W (default "
                f"{gpu.power_default_w} W): {POWER_LIMIT_GRAMMAR}"))
    return out


def rule_gke_driver(c: RuleContext) -> list[ConfigProblem]:
    """Who installs a GPU pool's driver must be able to there. ``gke`` (Google's COS driver installer) exists on
    Google Cloud only; Google's GPUDirect stacks run on Container-Optimized OS only, where the GPU Operator's
    driver container does not run (NVIDIA's GKE page) and Ansible has no package manager, so GPUDirect pools
    need ``gke``; the operator's driver container and the Ansible roles need Ubuntu (a GKE pool of any role);
    gke pools mix with neither operator nor ansible GPU pools, the GPU Operator's driver directory being
    cluster-wide. A gke pool's driver follows the GKE node version, not the lock."""
    from gpufleet.catalog.clouds import GCP
    from gpufleet.spec import gke_image

    out = []
    gke = [p.name for p in c.spec.gpu_pools if p.host_management == "gke"]
    for i, pool in enumerate(c.spec.pools):
        manager = pool.host_management
        if manager == "gke" and c.spec.backend != "gcp" and pool.role == "gpu":
            out.append(c.pool_problem(i, pool, "host_management", manager, "gke (Google's COS driver installer) "
                                      "exists on the gcp backend only", "set host_management: operator or ansible"))
            continue
        if c.spec.backend != "gcp":
            continue
        flavour = GCP.flavour(pool.instance_type or "")
        if (pool.role == "gpu" and manager != "gke" and pool.fabric == "gpudirect" and flavour is not None
                and flavour.driver == "gke"):
            out.append(c.pool_problem(
                i, pool, "host_management", manager,
                f"{flavour.label} ({pool.instance_type}) runs on {flavour.image} node images only, where the "
                f"NVIDIA driver comes from Google's installer and follows the GKE node version, not the lock's "
                f"driver {c.lock.driver} ({flavour.source})",
                "set host_management: gke (docs/clouds.md, 'Who manages the GPU software'), or fabric: none "
                "for a pool without GPUDirect"))
        elif manager == "ansible" and gke_image(pool) == "COS_CONTAINERD":
            out.append(c.pool_problem(i, pool, "image", pool.image, "the Ansible roles install packages with "
                                      "apt: Container-Optimized OS is read-only and has no package manager",
                                      "set image: UBUNTU_CONTAINERD (or remove image), or host_management: "
                                      + ("gke or operator" if pool.role == "gpu" else "operator")))
        elif pool.role != "gpu":
            continue
        elif manager == "operator" and pool.image == "COS_CONTAINERD":
            out.append(c.pool_problem(i, pool, "image", pool.image, "the GPU Operator's driver container does "
                                      "not run on Container-Optimized OS (NVIDIA's GKE page)",
                                      "set image: UBUNTU_CONTAINERD, or host_management: gke"))
        elif manager in ("operator", "ansible") and gke:
            mine = "the operator's" if manager == "operator" else "the host's (the Ansible roles install it in /)"
            out.append(c.pool_problem(
                i, pool, "host_management", manager, f"the GPU Operator's driver directory is cluster-wide: "
                f"pools {', '.join(gke)} (gke) need Google's, this pool {mine}",
                "use one host_management for every GPU pool of the cluster"))
    return out


def rule_one_lock(c: RuleContext) -> list[ConfigProblem]:
    out = []
    for key, value in c.spec.extra.items():
        if key.lower().startswith(("lock", "versions", "profile")):
            out.append(ConfigProblem(
                c.file, f"gpufleet:{key}", value,
                "a stack has exactly one version lock (gpufleet:lock) shared by every pool; a second lock "
                "would let pools skew",
                f"remove gpufleet:{key} and put single-entry overrides under gpufleet:lock.versions"))
    return out


#: Every rule, in report order; names are the ids docs/version-lock.md uses.
RULES: dict[str, Callable[[RuleContext], list[ConfigProblem]]] = {
    "cuda-driver": rule_cuda_driver,
    "gpu-driver-branch": rule_gpu_driver_branch,
    "gpu-min-cuda": rule_gpu_min_cuda,
    "open-modules": rule_open_modules,
    "fabric-manager": rule_fabric_manager,
    "nccl-cuda": rule_nccl_cuda,
    "cudnn-cuda": rule_cudnn_cuda,
    "dcgm-cuda": rule_dcgm_cuda,
    "rdma-release": rule_rdma_release,
    "charts": rule_charts,
    "power-limit": rule_pool_gpus_and_power,
    "gke-driver": rule_gke_driver,
    "one-lock": rule_one_lock,
}


def check_lock(spec: ClusterSpec, lock: Lock, file: str | Path) -> list[ConfigProblem]:
    """Every problem of ``lock`` for ``spec``; empty when the lock is valid."""
    return run_rules(RuleContext(spec, lock, str(file)))


def run_rules(ctx: RuleContext) -> list[ConfigProblem]:
    """Every rule over one context, in report order."""
    problems: list[ConfigProblem] = []
    for rule in RULES.values():
        problems.extend(rule(ctx))
    return problems


def check_operator_values(lock: Lock, values: Mapping[str, Any], file: str | Path,
                          key_prefix: str = "gpuOperator") -> list[ConfigProblem]:
    """GPU Operator values set elsewhere must agree with who manages the driver and the toolkit."""
    out = []
    for section, manager in (("driver", lock.driver_managed_by), ("toolkit", lock.toolkit_managed_by)):
        sect = values.get(section)
        enabled = sect.get("enabled") if isinstance(sect, Mapping) else None
        want = manager == "operator"
        if enabled is not None and enabled is not want:
            who = "the GPU Operator" if want else "the host roles (host_management: ansible)"
            out.append(ConfigProblem(
                str(file), f"{key_prefix}.{section}.enabled", enabled,
                f"GPU Operator {section}.enabled is {str(enabled).lower()} "
                f"but the {section} is managed by {who}",
                f"set {section}.enabled to {str(want).lower()}, or change the gpu pools' host_management"))
    return out

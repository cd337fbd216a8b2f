"""Lock resolution and every compatibility rule: bundled profiles pass, each rule fails with its message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import ConfigError
from gpufleet.lock import PROFILES, check_lock, check_operator_values, load_lock, resolve_lock
from gpufleet.spec import ClusterSpec

FILE = Path("stacks/Pulumi.t.yaml")


def spec(profile: str = "h100-cuda12.8", versions: dict[str, str] | None = None, gpu: str = "h100-sxm5-80gb",
         power_limit: str | None = "default", cuda_compat: str = "strict",
         pools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None) -> ClusterSpec:
    if pools is None:
        pools = [{"name": "gpu", "role": "gpu", "gpu": gpu, "count": 2, "power_limit": power_limit}]
    return ClusterSpec.model_validate({
        "stack": "t", "backend": "existing", "cluster_name": "t",
        "lock": {"profile": profile, "versions": versions or {}, "cuda_compat": cuda_compat},
        "pools": [{"name": "system", "role": "system", "count": 1}, *pools],
        "extra": extra or {},
    })


def problems(s: ClusterSpec) -> list[str]:
    with pytest.raises(ConfigError) as e:
        resolve_lock(s, FILE)
    return [str(p) for p in e.value.problems]


def one(s: ClusterSpec) -> str:
    found = problems(s)
    assert len(found) == 1, found
    return found[0]


PROFILE_GPUS = [(name, gpu) for name, p in PROFILES.items() for gpu in p.gpus]


@pytest.mark.parametrize(("profile", "gpu"), PROFILE_GPUS)
def test_every_bundled_profile_passes_every_rule(profile: str, gpu: str) -> None:
    s = spec(profile, gpu=gpu, power_limit="max")
    lock = resolve_lock(s, FILE)
    assert lock.profile == profile
    assert check_lock(s, lock, FILE) == []
    assert lock.fabric_manager == lock.nscq == lock.driver


def test_profiles_cover_the_contract_names() -> None:
    for name in ("h100-cuda12.8", "h100-cuda13.0", "a100-cuda12.4", "b200-cuda12.8", "h200-cuda12.8"):
        assert name in PROFILES
    p = PROFILES["h100-cuda12.8"]
    assert (p.driver, p.kernel_module, p.cuda, p.cudnn, p.nccl, p.dcgm, p.container_toolkit, p.gpu_operator,
            p.dcgm_exporter_chart) == ("570.172.08", "open", "12.8.1", "9.8.0.87", "2.26.2-1+cuda12.8",
                                       "4.4.1", "1.18.0", "v26.7.0", "4.8.2")


def test_local_stack_resolves() -> None:
    s, lock = load_lock("local")
    assert (s.stack, lock.profile, lock.driver, lock.driver_branch) == (
        "local", "h100-cuda12.8", "570.172.08", 570)
    assert (lock.driver_managed_by, lock.toolkit_managed_by, lock.fabric_manager_required) == (
        "host", "host", True)


def test_driver_override_carries_fabric_manager_and_nscq() -> None:
    lock = resolve_lock(spec(versions={"driver": "570.133.20"}), FILE)
    assert (lock.driver, lock.fabric_manager, lock.nscq) == ("570.133.20", "570.133.20", "570.133.20")


# --- cuda-driver -----------------------------------------------------------------------------------

def test_cuda_update_release_needs_newer_driver_than_ga() -> None:
    assert one(spec("a100-cuda12.4", {"driver": "550.54.14"}, gpu="a100-sxm4-80gb")) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.driver = '550.54.14': CUDA 12.4.1 needs driver >= "
        "550.54.15 (NVIDIA's minimum for CUDA 12.4 Update 1), driver is 550.54.14. Fix: set versions.driver "
        "to "
        "550.54.15 or newer, or pick a toolkit this driver supports, or set gpufleet:lock.cuda_compat: "
        "minor-version to accept CUDA minor version compatibility (driver >= 525.60.13)")


def test_cuda_override_blames_cuda() -> None:
    assert one(spec(versions={"cuda": "12.9.1"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.cuda = '12.9.1': CUDA 12.9.1 needs driver >= 575.57.08 "
        "(NVIDIA's minimum for CUDA 12.9 Update 1), driver is 570.172.08. Fix: set versions.driver to "
        "575.57.08 "
        "or newer, or pick a toolkit this driver supports, or set gpufleet:lock.cuda_compat: minor-version "
        "to "
        "accept CUDA minor version compatibility (driver >= 525.60.13)")


@pytest.mark.parametrize(("cuda", "driver", "ok"), [
    ("12.8.0", "570.26", True), ("12.8.1", "570.26", False), ("12.8.1", "570.124.06", True),
    ("13.0.0", "580.65.06", True), ("13.0.1", "580.65.06", False), ("13.0.2", "580.82.07", False),
    ("13.0.2", "580.95.05", True), ("12.4.1", "580.95.05", True), ("12.2.2", "535.104.05", True),
    ("12.2.2", "535.86.09", False),
])
def test_cuda_min_driver_table(cuda: str, driver: str, ok: bool) -> None:
    nccl = {12: "2.26.2-1+cuda12.2", 13: "2.28.3-1+cuda13.0"}[int(cuda.split(".")[0])]
    cudnn = "9.13.0.50"
    s = spec("h100-cuda12.8", {"cuda": cuda, "driver": driver, "nccl": nccl, "cudnn": cudnn})
    found = [p for p in (problems(s) if not ok else []) if "needs driver >=" in p]
    if ok:
        assert resolve_lock(s, FILE).cuda == cuda
    else:
        assert len(found) == 1


def test_unknown_cuda_release() -> None:
    assert one(spec(versions={"cuda": "12.7.0", "nccl": "2.21.5-1+cuda12.4"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.cuda = '12.7.0': CUDA 12.7.0 is not in NVIDIA's "
        "minimum-driver table known to gpufleet. Fix: set versions.cuda to a toolkit listed in "
        "gpufleet/lock/compat.py, or add CUDA 12.7.0 to gpufleet/lock/compat.py with its source")


def test_minor_version_mode_allows_older_driver_of_same_major() -> None:
    strict = spec("h100-cuda13.0", {"driver": "580.65.06"})
    assert "needs driver >= 580.95.05" in one(strict)
    relaxed = spec("h100-cuda13.0", {"driver": "580.65.06"}, cuda_compat="minor-version")
    assert resolve_lock(relaxed, FILE).cuda_compat == "minor-version"


def test_minor_version_mode_still_needs_the_major_floor() -> None:
    s = spec(versions={"cuda": "13.0.2", "nccl": "2.28.3-1+cuda13.0", "cudnn": "9.13.0.50"},
             cuda_compat="minor-version")
    assert one(s) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.cuda = '13.0.2': CUDA 13.0.2 under minor version "
        "compatibility needs driver >= 580 (CUDA 13.x floor), driver is 570.172.08. Fix: set versions.driver "
        "to "
        "580 or newer")


# --- GPU rules -------------------------------------------------------------------------------------

def test_gpu_rules_report_every_problem_from_the_profile() -> None:
    assert problems(spec("a100-cuda12.4", gpu="b200-sxm-180gb")) == [
        "stacks/Pulumi.t.yaml: gpufleet:lock.profile[a100-cuda12.4].driver = '550.163.01': NVIDIA B200 (pool "
        "gpu) "
        "needs driver branch >= 570, driver is 550.163.01. Fix: set versions.driver to a 570 or newer "
        "driver, or "
        "use a profile made for b200-sxm-180gb (h100-cuda13.0, h100-cuda13.0-r590, b200-cuda12.8)",
        "stacks/Pulumi.t.yaml: gpufleet:lock.profile[a100-cuda12.4].cuda = '12.4.1': NVIDIA B200 (pool gpu, "
        "compute capability 10.0) needs CUDA >= 12.8, toolkit is 12.4.1. Fix: set versions.cuda to 12.8 or "
        "newer, "
        "or use a profile made for b200-sxm-180gb (h100-cuda13.0, h100-cuda13.0-r590, b200-cuda12.8)",
        "stacks/Pulumi.t.yaml: gpufleet:lock.profile[a100-cuda12.4].kernel_module = 'proprietary': NVIDIA "
        "B200 "
        "(pool gpu) requires the open kernel modules, kernel_module is proprietary. Fix: set "
        "versions.kernel_module to open",
    ]


def test_open_modules_required_for_blackwell() -> None:
    assert one(spec("b200-cuda12.8", {"kernel_module": "proprietary"}, gpu="b200-sxm-180gb")) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.kernel_module = 'proprietary': NVIDIA B200 (pool gpu) "
        "requires the open kernel modules, kernel_module is proprietary. Fix: set versions.kernel_module to "
        "open")


def test_proprietary_modules_fine_on_hopper() -> None:
    assert resolve_lock(spec(versions={"kernel_module": "proprietary"}), FILE).kernel_module == "proprietary"


# --- fabric manager / NSCQ -------------------------------------------------------------------------

def test_fabric_manager_must_equal_driver_issue_example() -> None:
    s = spec(versions={"driver": "570.133.20", "fabric_manager": "570.124.06"})
    assert one(s) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.fabric_manager = '570.124.06': fabric manager "
        "570.124.06 "
        "must equal driver 570.133.20. Fix: set versions.fabric_manager to 570.133.20 or remove the override")


def test_nscq_must_equal_driver() -> None:
    assert one(spec(versions={"nscq": "570.133.20"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.nscq = '570.133.20': NSCQ 570.133.20 must equal driver "
        "570.172.08. Fix: set versions.nscq to 570.172.08 or remove the override")


def test_fabric_manager_not_checked_without_nvswitch() -> None:
    lock = resolve_lock(spec(versions={"fabric_manager": "570.133.20"}, gpu="l40s"), FILE)
    assert (lock.fabric_manager_required, lock.fabric_manager) == (False, "570.133.20")


# --- NCCL / cuDNN / DCGM vs CUDA -------------------------------------------------------------------

def test_nccl_cuda_major_must_match() -> None:
    assert one(spec(versions={"nccl": "2.27.7-1+cuda13.0"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.nccl = '2.27.7-1+cuda13.0': NCCL 2.27.7-1+cuda13.0 is "
        "built "
        "for CUDA 13.0, the toolkit is CUDA 12.8.1: the CUDA major must match. Fix: set versions.nccl to a "
        "+cuda12.8 build (e.g. 2.26.2-1+cuda12.8)")


def test_nccl_built_for_newer_minor() -> None:
    assert one(spec(versions={"nccl": "2.27.3-1+cuda12.9"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.nccl = '2.27.3-1+cuda12.9': NCCL 2.27.3-1+cuda12.9 is "
        "built "
        "for CUDA 12.9, newer than the toolkit's CUDA 12.8. Fix: set versions.nccl to a +cuda12.8 build "
        "(e.g. 2.26.2-1+cuda12.8)")


def test_nccl_fix_suggests_an_older_minor_when_none_matches() -> None:
    assert one(spec("a100-cuda12.4", {"cuda": "12.6.3", "driver": "560.35.05", "nccl": "2.27.3-1+cuda12.9"},
                    gpu="a100-sxm4-80gb")).endswith(
        "Fix: set versions.nccl to a +cuda12.6 build or one for an older CUDA 12.x (e.g. 2.21.5-1+cuda12.4)")


def test_nccl_older_minor_of_same_major_is_accepted() -> None:
    assert resolve_lock(spec(versions={"nccl": "2.21.5-1+cuda12.4"}), FILE).nccl == "2.21.5-1+cuda12.4"


def test_cudnn_needs_a_build_for_the_cuda_major() -> None:
    assert one(spec("h100-cuda13.0", {"cudnn": "9.8.0.87"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.cudnn = '9.8.0.87': cuDNN 9.8.0.87 has no build for "
        "CUDA 13 "
        "(toolkit 13.0.2); it is built for CUDA 11, 12. Fix: set versions.cudnn to a cuDNN with a CUDA 13 "
        "build "
        "(9.12.0.46 or newer)")


def test_dcgm_needs_the_cuda_major() -> None:
    assert one(spec("h100-cuda13.0", {"dcgm": "4.2.3"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.dcgm = '4.2.3': DCGM 4.2.3 has no CUDA 13 build "
        "(datacenter-gpu-manager-4-cuda13); it supports CUDA 11, 12. Fix: set versions.dcgm to a DCGM "
        "release "
        "with CUDA 13 support (4.4.1 or newer)")


def test_cuda_override_alone_blames_cuda_for_nccl() -> None:
    s = spec("h100-cuda13.0", {"cuda": "12.8.1", "cudnn": "9.8.0.87"})
    assert one(s).startswith("stacks/Pulumi.t.yaml: gpufleet:lock.versions.cuda = '12.8.1': NCCL "
                             "2.28.3-1+cuda13.0 is built for CUDA 13.0")


def test_unsupported_operator_chart() -> None:
    assert one(spec(versions={"gpu_operator": "v25.3.0"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.gpu_operator = 'v25.3.0': gpu-operator chart v25.3.0 "
        "is not in gpufleet's chart catalog (known: v26.7.0; each with its release page or index.yaml entry "
        "in gpufleet/catalog/charts.yaml). Fix: set versions.gpu_operator to v26.7.0 or remove the override")


@pytest.mark.parametrize(("entry", "version", "known"), [
    ("lustre_csi", "0.1.99", "0.1.12"),
    ("network_operator", "25.4.0", "25.7.0"),
    ("kube_prometheus_stack", "88.5.4", "88.5.3"),
])
def test_chart_version_unknown_to_the_catalog_fails(entry: str, version: str, known: str) -> None:
    found = one(spec(versions={entry: version}))
    assert f"gpufleet:lock.versions.{entry} = '{version}'" in found
    assert f"known: {known};" in found and f"set versions.{entry} to {known}" in found


# --- pools -----------------------------------------------------------------------------------------

def _pool(name: str, gpu: str = "h100-sxm5-80gb", **kw: Any) -> dict[str, Any]:
    return {"name": name, "role": "gpu", "gpu": gpu, "count": 1, **kw}


def test_mixed_management_turns_the_operator_components_on() -> None:
    lock = resolve_lock(spec(pools=[_pool("a"), _pool("b", host_management="operator")]), FILE)
    assert (lock.driver_managed_by, lock.toolkit_managed_by) == ("operator", "operator")
    assert lock.driver == "570.172.08"


def test_operator_managed_pools() -> None:
    lock = resolve_lock(spec(pools=[_pool("a", host_management="operator")]), FILE)
    assert (lock.driver_managed_by, lock.toolkit_managed_by) == ("operator", "operator")


def test_power_limit_outside_catalog_range() -> None:
    assert one(spec(power_limit="800")) == (
        "stacks/Pulumi.t.yaml: gpufleet:pools[1].power_limit = '800': power limit '800' = 800 W is outside "
        "NVIDIA H100 80GB HBM3's range 200-700 W. Fix: set power_limit within 200-700 W (default 700 W): whole "
        "watts (700), a whole percentage of the default limit (90%), 'default', 'min' or 'max'")


def test_power_limit_percentage_below_min() -> None:
    assert "power limit '40%' = 29 W is outside NVIDIA L4's range 40-72 W" in one(spec(gpu="l4", power_limit="40%"))


def test_unknown_gpu_model_in_pool() -> None:
    assert one(spec(gpu="h100")) == (
        "stacks/Pulumi.t.yaml: gpufleet:pools[1].gpu = 'h100': GPU model is not in the catalog. Fix: use one "
        "of: "
        "a100-sxm4-40gb, a100-sxm4-80gb, b200-sxm-180gb, h100-pcie-80gb, h100-sxm5-80gb, h200-sxm-141gb, l4, "
        "l40s")


def test_a_second_lock_is_rejected() -> None:
    assert one(spec(extra={"lock_h100": {"profile": "h100-cuda13.0"}})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock_h100 = {'profile': 'h100-cuda13.0'}: a stack has exactly one "
        "version "
        "lock (gpufleet:lock) shared by every pool; a second lock would let pools skew. Fix: remove "
        "gpufleet:lock_h100 and put single-entry overrides under gpufleet:lock.versions")


# --- resolution problems ---------------------------------------------------------------------------

def test_unknown_profile() -> None:
    assert one(spec("h100-cuda99")) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.profile = 'h100-cuda99': unknown profile. Fix: use one of: "
        + ", ".join(sorted(PROFILES)))


def test_unknown_entry_and_bad_format_are_all_listed() -> None:
    found = problems(spec(versions={"drivr": "570.172.08", "nccl": "2.26.2", "fabric_manager": "570.124.06"}))
    assert found == [
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.drivr = '570.172.08': unknown lock entry. Fix: use one "
        "of: "
        "driver, kernel_module, fabric_manager, nscq, cuda, cudnn, nccl, dcgm, container_toolkit, "
        "gpu_operator, "
        "dcgm_exporter_chart, network_operator, lustre_csi, azurelustre_csi, kube_prometheus_stack, "
        "aws_efa_device_plugin, kueue, rdma, "
        "lustre_client, kernel",
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.nccl = '2.26.2': not a valid nccl version (expected "
        "e.g. "
        "2.26.2-1+cuda12.8). Fix: correct gpufleet:lock.versions.nccl or remove the override to use the "
        "profile's "
        "2.26.2-1+cuda12.8",
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.fabric_manager = '570.124.06': fabric manager "
        "570.124.06 "
        "must equal driver 570.172.08. Fix: set versions.fabric_manager to 570.172.08 or remove the override",
    ]


def test_kernel_pin_and_empty_kernel() -> None:
    assert resolve_lock(spec(versions={"kernel": "5.15.0-139-generic"}), FILE).kernel == "5.15.0-139-generic"
    assert resolve_lock(spec(versions={"kernel": ""}), FILE).kernel is None


# --- operator values set elsewhere -----------------------------------------------------------------

def test_operator_values_must_match_the_manager() -> None:
    lock = resolve_lock(spec(), FILE)
    agree = {"driver": {"enabled": False}, "toolkit": {"enabled": False}}
    assert check_operator_values(lock, agree, FILE) == []
    found = [str(p) for p in check_operator_values(lock, {"driver": {"enabled": True}}, FILE)]
    assert found == [
        "stacks/Pulumi.t.yaml: gpuOperator.driver.enabled = True: GPU Operator driver.enabled is true but "
        "the "
        "driver is managed by the host roles (host_management: ansible). Fix: set driver.enabled to false, "
        "or "
        "change the gpu pools' host_management"]


def test_rdma_doca_release_must_be_one_the_lock_names() -> None:
    assert one(spec("h100-cuda12.8", {"rdma": "2.7.0"})) == (
        "stacks/Pulumi.t.yaml: gpufleet:lock.versions.rdma = '2.7.0': DOCA 2.7.0: gpufleet names no DOCA-OFED "
        "packages for it (known releases: 2.9.1; each with its package versions in gpufleet/lock/packages.py "
        "DOCA_RELEASES). Fix: set versions.rdma to inbox or 2.9.1")
    assert resolve_lock(spec("h100-cuda12.8", {"rdma": "2.9.1"}), FILE).rdma == "2.9.1"

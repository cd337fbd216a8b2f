"""Exact apt package names and versions of a lock, per NVIDIA's naming in its CUDA repository.

Naming (docs/architecture.md fixture table; ../shared/fixtures/real/apt/NVIDIA-APT-NAMING-RULES.md):
- driver packages carry the branch in the name up to 580 (``nvidia-utils-570``) and drop it from 590
  (``nvidia-utils``); NVIDIA rebuilds them Ubuntu-style, so their revision is ``-0ubuntu1``;
- fabric manager and NSCQ are branch-suffixed below 580 and unsuffixed from 580 (NVIDIA's
  gpu-driver-container, commit 78fa4ac "add driver 580.65.06"); NVIDIA-native, revision ``-1``;
- ``cuda-drivers-<branch>`` exists up to 580, plain ``cuda-drivers`` from 590; revision ``-1``;
- CUDA toolkit ``cuda-toolkit-X-Y``; cuDNN 9 ``libcudnn9-cuda-X``; NCCL ``libnccl2``/``libnccl-dev`` with
  the ``+cudaX.Y`` build in the version; DCGM 4 ``datacenter-gpu-manager-4-*`` with epoch ``1:``.
"""

from __future__ import annotations

from gpufleet.lock.model import Lock
from gpufleet.lock.versions import cuda_major_minor, vtuple

Package = tuple[str, str]

_UBUNTU_REV = "-0ubuntu1"
_NATIVE_REV = "-1"


def _driver_suffix(branch: int) -> str:
    return f"-{branch}" if branch < 590 else ""


def driver_packages(lock: Lock) -> list[Package]:
    """The co-versioned driver set (they depend on each other with ``= version``): pin all or none."""
    sfx = _driver_suffix(lock.driver_branch)
    flavour = "-open" if lock.kernel_module == "open" else ""
    version = lock.driver + _UBUNTU_REV
    names = [
        f"nvidia-driver{sfx}{flavour}",
        f"libnvidia-compute{sfx}",
        f"libnvidia-cfg1{sfx}",
        f"libnvidia-common{sfx}",
        f"nvidia-utils{sfx}",
        f"nvidia-compute-utils{sfx}",
        f"nvidia-kernel-common{sfx}",
        f"nvidia-dkms{sfx}{flavour}",
        f"nvidia-kernel-source{sfx}{flavour}",
    ]
    return [(n, version) for n in names]


def driver_meta_packages(lock: Lock) -> list[Package]:
    return [(f"cuda-drivers{_driver_suffix(lock.driver_branch)}", lock.driver + _NATIVE_REV)]


def fabric_manager_packages(lock: Lock) -> list[Package]:
    """Fabric manager and NSCQ (NVSwitch systems only), at exactly their lock versions."""
    sfx = f"-{lock.driver_branch}" if lock.driver_branch < 580 else ""
    return [
        (f"nvidia-fabricmanager{sfx}", lock.fabric_manager + _NATIVE_REV),
        (f"libnvidia-nscq{sfx}", lock.nscq + _NATIVE_REV),
    ]


def cuda_packages(lock: Lock) -> list[Package]:
    major, minor = cuda_major_minor(lock.cuda)
    return [(f"cuda-toolkit-{major}-{minor}", lock.cuda + _NATIVE_REV)]


def cudnn_packages(lock: Lock) -> list[Package]:
    major, _ = cuda_major_minor(lock.cuda)
    cudnn_major = lock.cudnn.split(".", 1)[0]
    version = lock.cudnn + _NATIVE_REV
    return [
        (f"libcudnn{cudnn_major}-cuda-{major}", version),
        (f"libcudnn{cudnn_major}-dev-cuda-{major}", version),
    ]


def nccl_packages(lock: Lock) -> list[Package]:
    return [("libnccl2", lock.nccl), ("libnccl-dev", lock.nccl)]


def dcgm_packages(lock: Lock) -> list[Package]:
    version = f"1:{lock.dcgm}{_NATIVE_REV}"
    if vtuple(lock.dcgm)[0] < 4:
        return [("datacenter-gpu-manager", f"1:{lock.dcgm}")]
    major, _ = cuda_major_minor(lock.cuda)
    return [
        ("datacenter-gpu-manager-4-core", version),
        (f"datacenter-gpu-manager-4-cuda{major}", version),
        ("datacenter-gpu-manager-4-proprietary", version),
    ]


def container_toolkit_packages(lock: Lock) -> list[Package]:
    version = lock.container_toolkit + _NATIVE_REV
    return [(n, version) for n in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                   "libnvidia-container-tools", "libnvidia-container1")]


def host_packages(lock: Lock, nvswitch: bool | None = None) -> list[Package]:
    """Every package the host roles install on an Ansible-managed GPU host.

    ``nvswitch`` says whether the host's board needs fabric manager; None uses the stack-wide answer.
    """
    fm = lock.fabric_manager_required if nvswitch is None else nvswitch
    pkgs = driver_packages(lock) + driver_meta_packages(lock)
    if fm:
        pkgs += fabric_manager_packages(lock)
    return (pkgs + cuda_packages(lock) + cudnn_packages(lock) + nccl_packages(lock) + dcgm_packages(lock)
            + container_toolkit_packages(lock))

"""NVIDIA's apt package naming: the only place the project spells it.

Everything that needs a package name gets it from here: the lock's pins (the ``*_packages(lock)`` functions),
the roles (through the generated defaults layer, ``naming_table()``, see gpufleet.lock.layer), the skew
playbook, Molecule's verifiers and the fixture repository's catalogue.

Naming (../shared/fixtures/real/apt/NVIDIA-APT-NAMING-RULES.md):
- driver packages carry the branch in the name up to 580 (``nvidia-utils-570``) and drop it from 590
  (``nvidia-utils``); NVIDIA rebuilds them Ubuntu-style, so their revision is ``-0ubuntu1``;
- fabric manager and NSCQ are branch-suffixed below 580 and unsuffixed from 580 (NVIDIA's
  gpu-driver-container, commit 78fa4ac "add driver 580.65.06"); NVIDIA-native, revision ``-1``;
- ``cuda-drivers-<branch>`` exists up to 580, plain ``cuda-drivers`` from 590 (the repository carries it; no role
  installs it: the roles pin the co-versioned set it would pull in);
- CUDA toolkit ``cuda-toolkit-X-Y``; cuDNN 9 ``libcudnn9-cuda-X``; NCCL ``libnccl2``/``libnccl-dev`` with
  the ``+cudaX.Y`` build in the version; DCGM 4 ``datacenter-gpu-manager-4-*`` with epoch ``1:``.

Not NVIDIA's, named here for the same reason (one place): Whamcloud's Lustre client for Ubuntu 22.04
(downloads.whamcloud.com/public/lustre/lustre-2.15.<n>/ubuntu2204/client/): ``lustre-client-utils`` (mount.lustre,
lctl, lfs, lnetctl) and the kernel modules, either prebuilt for one kernel (``lustre-client-modules-<kernel release>``,
e.g. ``lustre-client-modules-5.15.0-88-generic_2.15.8-1_amd64.deb``) or built by DKMS for whatever kernel runs
(``lustre-client-modules-dkms``, a binary of the ``lustre`` source package's debian/control); revision ``-1``.
"""

from __future__ import annotations

from typing import Any

from gpufleet.lock.model import Lock
from gpufleet.lock.versions import cuda_major_minor, vtuple

Package = tuple[str, str]

#: Debian revisions: NVIDIA's Ubuntu-style rebuilds of the driver, and its own (native) packages.
UBUNTU_REVISION = "-0ubuntu1"
NATIVE_REVISION = "-1"
#: apt epoch of NVIDIA's DCGM packages.
DCGM_EPOCH = "1:"

#: Driver packages that exist in an open-kernel and a proprietary flavour (``-open`` after the branch).
DRIVER_FLAVOURED = ("nvidia-driver", "nvidia-dkms", "nvidia-kernel-source")
#: The other co-versioned driver packages (one flavour).
DRIVER_COMMON = ("nvidia-kernel-common", "nvidia-utils", "nvidia-compute-utils", "libnvidia-compute",
                 "libnvidia-cfg1", "libnvidia-common")
#: The package whose version says which driver userspace is installed (nvidia-smi ships in it).
DRIVER_USERSPACE = "nvidia-utils"
FABRIC_MANAGER = "nvidia-fabricmanager"
NSCQ = "libnvidia-nscq"
CUDA_DRIVERS = "cuda-drivers"
NCCL_RUNTIME, NCCL_DEV = "libnccl2", "libnccl-dev"
DCGM4_PREFIX = "datacenter-gpu-manager-4-"
DCGM3 = "datacenter-gpu-manager"
CONTAINER_TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                     "libnvidia-container1")
#: Debian's own driver packages (the nvidia_driver role's ``distro`` source), with their source package.
DISTRO_DRIVER = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1")
DISTRO_DRIVER_EXTRA = ("nvidia-persistenced",)
DISTRO_DRIVER_SOURCE = ("nvidia-graphics-drivers",)
#: Whamcloud's Lustre client: the utilities, and the kernel modules' name stem (+ a kernel release or "dkms").
LUSTRE_CLIENT_UTILS = "lustre-client-utils"
LUSTRE_CLIENT_MODULES = "lustre-client-modules-"
LUSTRE_CLIENT_DKMS = "dkms"


#: NVIDIA's packages by name, whichever supplier built them (NVIDIA's repository, Ubuntu's or Debian's archive,
#: ../shared/fixtures/real/apt/NVIDIA-APT-NAMING-RULES.md section 1): what `gpufleet audit` asks apt-cache about.
NVIDIA_PACKAGE_PATTERN = (r"^(nvidia-|libnvidia-|cuda-|libcuda|libcudnn|cudnn|libnccl|datacenter-gpu-manager|"
                          r"libxnvctrl|xserver-xorg-video-nvidia)")
#: NVIDIA's names whose version does not follow the driver, so nothing holds them: libxnvctrl0 is nvidia-settings'
#: NV-CONTROL client library, which hwloc's plugins (libhwloc-plugins, pulled by Slurm, PMIx and Open MPI) bring
#: from the distribution's main archive (Debian 12 ships 525.85.05 next to its 535 driver). Audited and listed,
#: never a finding for being unheld: converge does not hold it and must not.
NVIDIA_UNPINNED_PATTERN = r"^libxnvctrl"
#: Component -> the package names whose installed version is the component's, as patterns, first match wins: the
#: lock's names above plus Ubuntu's (``nvidia-driver-<branch>-server``, ``cuda-drivers-fabricmanager-<branch>``) and
#: Debian's (``nvidia-smi``) for a driver gpufleet did not install. `gpufleet audit` reads a host's versions with them.
AUDIT_COMPONENTS: dict[str, tuple[str, ...]] = {
    "driver": (rf"^{DRIVER_USERSPACE}(-\d+)?(-server)?$",
               rf"^{DRIVER_FLAVOURED[0]}(-\d+)?(-open|-server|-server-open)?$",
               rf"^{DISTRO_DRIVER[2]}$", rf"^{DRIVER_COMMON[3]}(-\d+)?$"),
    "fabric_manager": (rf"^{FABRIC_MANAGER}(-\d+)?$", rf"^{CUDA_DRIVERS}-fabricmanager(-\d+)?$"),
    "cuda": (r"^cuda-toolkit-\d+-\d+$", r"^cuda-cudart-\d+-\d+$", r"^cuda-compat-\d+-\d+$"),
    "cudnn": (r"^libcudnn\d+-cuda-\d+$", r"^libcudnn\d+$"),
    "nccl": (rf"^{NCCL_RUNTIME}$",),
    "dcgm": (rf"^{DCGM4_PREFIX}core$", rf"^{DCGM3}$"),
    "container_toolkit": (rf"^{CONTAINER_TOOLKIT[0]}$",),
}


#: DOCA-OFED (DOCA-Host's OFED profile, what MLNX_OFED became) per DOCA release: the kernel driver set and the
#: rdma-core userspace it carries, at the exact versions of NVIDIA's repository for Ubuntu 22.04 x86_64
#: (https://linux.mellanox.com/public/repo/doca/<release>/ubuntu22.04/x86_64/). DOCA 2.9.1 (2024 LTS U1) ships the
#: 24.10-1.1.4 LTS drivers (MLNX_OFED v24.10-1.1.4.0 LTS documentation; DOCA 2.9.2's General Support page lists
#: 24.10.OFED.24.10.2.1.8.1 for its kernel modules, the next LTS update) and rdma-core 2410mlnx54 built 2410068
#: (the build tag of DOCA 2.9.1's userspace, e.g. clusterkit 1.14.462-1.2410068 on its General Support page);
#: the file names (mlnx-ofed-kernel-dkms_24.10.OFED.24.10.1.1.4.1-1_all.deb, rdma-core_2410mlnx54-1.2410068_*.deb)
#: are those of the 24.10-1.1.4.0 DEBS directory. docs/tuning.md has the links.
DOCA_OFED_META = "doca-ofed"
DOCA_KERNEL = ("mlnx-ofed-kernel-dkms", "mlnx-ofed-kernel-utils")
DOCA_USERSPACE = ("rdma-core", "libibverbs1", "ibverbs-providers", "ibverbs-utils", "infiniband-diags")
DOCA_RELEASES: dict[str, dict[str, str]] = {
    "2.9.1": {"kernel": "24.10.OFED.24.10.1.1.4.1-1", "userspace": "2410mlnx54-1.2410068"},
}


def doca_ofed_packages(release: str) -> list[Package]:
    """The pinned DOCA-OFED set of a DOCA release (the ``doca-ofed`` meta package itself is installed with it,
    unpinned: its Depends are these). KeyError for a release the table does not know."""
    r = DOCA_RELEASES[release]
    return [(n, r["kernel"]) for n in DOCA_KERNEL] + [(n, r["userspace"]) for n in DOCA_USERSPACE]


def driver_suffix(branch: int) -> str:
    return f"-{branch}" if branch < 590 else ""


def fabric_manager_suffix(branch: int) -> str:
    return f"-{branch}" if branch < 580 else ""


def flavour(kernel_module: str) -> str:
    return "-open" if kernel_module == "open" else ""


def driver_names(branch: int, kernel_module: str) -> list[str]:
    """The co-versioned driver set (they depend on each other with ``= version``): pin all or none."""
    sfx, fl = driver_suffix(branch), flavour(kernel_module)
    return [f"{n}{sfx}{fl}" for n in DRIVER_FLAVOURED] + [f"{n}{sfx}" for n in DRIVER_COMMON]


def fabric_manager_names(branch: int) -> list[str]:
    sfx = fabric_manager_suffix(branch)
    return [f"{FABRIC_MANAGER}{sfx}", f"{NSCQ}{sfx}"]


def cuda_toolkit_name(major: int, minor: int) -> str:
    return f"cuda-toolkit-{major}-{minor}"


def cudnn_names(cudnn_major: int, cuda_major: int) -> tuple[str, str]:
    """(runtime, dev) package of a cuDNN major built for a CUDA major."""
    return f"libcudnn{cudnn_major}-cuda-{cuda_major}", f"libcudnn{cudnn_major}-dev-cuda-{cuda_major}"


def dcgm4_cuda_name(cuda_major: int) -> str:
    return f"{DCGM4_PREFIX}cuda{cuda_major}"


DCGM4_CORE = f"{DCGM4_PREFIX}core"
DCGM4_PROPRIETARY = f"{DCGM4_PREFIX}proprietary"


def lustre_client_modules_name(kernel: str | None) -> str:
    """Modules prebuilt for the lock's pinned kernel release, else the DKMS build (any kernel)."""
    return f"{LUSTRE_CLIENT_MODULES}{kernel or LUSTRE_CLIENT_DKMS}"


def lustre_client_packages(lock: Lock) -> list[Package]:
    """The Lustre client at exactly the lock's version (Whamcloud's Debian revision ``-1``)."""
    version = lock.lustre_client + NATIVE_REVISION
    return [(LUSTRE_CLIENT_UTILS, version), (lustre_client_modules_name(lock.kernel), version)]


def driver_packages(lock: Lock) -> list[Package]:
    version = lock.driver + UBUNTU_REVISION
    return [(n, version) for n in driver_names(lock.driver_branch, lock.kernel_module)]


def fabric_manager_packages(lock: Lock) -> list[Package]:
    """Fabric manager and NSCQ (NVSwitch systems only), at exactly their lock versions."""
    fm, nscq = fabric_manager_names(lock.driver_branch)
    return [(fm, lock.fabric_manager + NATIVE_REVISION), (nscq, lock.nscq + NATIVE_REVISION)]


def cuda_packages(lock: Lock) -> list[Package]:
    return [(cuda_toolkit_name(*cuda_major_minor(lock.cuda)), lock.cuda + NATIVE_REVISION)]


def cudnn_packages(lock: Lock) -> list[Package]:
    major, _ = cuda_major_minor(lock.cuda)
    version = lock.cudnn + NATIVE_REVISION
    return [(n, version) for n in cudnn_names(vtuple(lock.cudnn)[0], major)]


def nccl_packages(lock: Lock) -> list[Package]:
    return [(NCCL_RUNTIME, lock.nccl), (NCCL_DEV, lock.nccl)]


def dcgm_packages(lock: Lock) -> list[Package]:
    if vtuple(lock.dcgm)[0] < 4:
        return [(DCGM3, f"{DCGM_EPOCH}{lock.dcgm}")]
    version = f"{DCGM_EPOCH}{lock.dcgm}{NATIVE_REVISION}"
    major, _ = cuda_major_minor(lock.cuda)
    return [(n, version) for n in (DCGM4_CORE, dcgm4_cuda_name(major), DCGM4_PROPRIETARY)]


def container_toolkit_packages(lock: Lock) -> list[Package]:
    version = lock.container_toolkit + NATIVE_REVISION
    return [(n, version) for n in CONTAINER_TOOLKIT]


def host_packages(lock: Lock, nvswitch: bool | None = None) -> list[Package]:
    """Every package the host roles pin on an Ansible-managed GPU host (what drift and skew compare with).

    ``nvswitch`` says whether the host's board needs fabric manager; None uses the stack-wide answer.
    """
    fm = lock.fabric_manager_required if nvswitch is None else nvswitch
    pkgs = driver_packages(lock) + (fabric_manager_packages(lock) if fm else [])
    return (pkgs + cuda_packages(lock) + cudnn_packages(lock) + nccl_packages(lock) + dcgm_packages(lock)
            + container_toolkit_packages(lock))


def skew_packages(branches: list[int], cuda_minors: list[tuple[int, int]],
                  cuda_majors: list[int]) -> dict[str, list[str]]:
    """Skew item (gpufleet.drift.skew.ITEMS) -> the packages whose installed version is that item's, sorted."""
    return {
        "driver_installed": sorted({f"{DRIVER_USERSPACE}{driver_suffix(b)}" for b in branches}),
        "fabricmanager": sorted({fabric_manager_names(b)[0] for b in branches}),
        "cuda": sorted(cuda_toolkit_name(ma, mi) for ma, mi in cuda_minors),
        "cudnn": sorted(cudnn_names(9, m)[0] for m in cuda_majors),
        "nccl": [NCCL_RUNTIME],
        "dcgm": [DCGM4_CORE],
    }


def driver_patterns() -> list[str]:
    """dpkg-query patterns that find an installed driver of any branch and source (NVIDIA's and Debian's)."""
    return [f"{DRIVER_FLAVOURED[0]}*", f"{DRIVER_COMMON[3]}*", DISTRO_DRIVER[1]]


def naming_table(branches: list[int], cuda_minors: list[tuple[int, int]], cudnn_majors: list[int]) -> dict[str, Any]:
    """The naming above as data, for the roles (YAML cannot import this module): every name keyed by what selects
    it (driver branch and kernel module, CUDA X.Y or major), plus the version affixes.

    Roles look names up by the versions they are given (so a scenario that sets only a version gets the right
    names); a version outside the table fails the role's preflight with the fix (regenerate the layer).
    """
    cuda_majors = sorted({m for m, _ in cuda_minors})
    return {
        "driver": {str(b): {m: driver_names(b, m) for m in ("open", "proprietary")} for b in branches},
        "driver_userspace": {str(b): f"{DRIVER_USERSPACE}{driver_suffix(b)}" for b in branches},
        "fabric_manager": {str(b): fabric_manager_names(b) for b in branches},
        "cuda_toolkit": {f"{ma}.{mi}": cuda_toolkit_name(ma, mi) for ma, mi in cuda_minors},
        "cudnn": {str(c): {str(m): dict(zip(("runtime", "dev"), cudnn_names(c, m), strict=True))
                           for m in cuda_majors} for c in cudnn_majors},
        "nccl": {"runtime": NCCL_RUNTIME, "dev": NCCL_DEV},
        "dcgm": {"core": DCGM4_CORE, "proprietary": DCGM4_PROPRIETARY,
                 "cuda": {str(m): dcgm4_cuda_name(m) for m in cuda_majors}},
        "container_toolkit": list(CONTAINER_TOOLKIT),
        "lustre_client": {"utils": LUSTRE_CLIENT_UTILS, "modules_prefix": LUSTRE_CLIENT_MODULES,
                          "modules_dkms": lustre_client_modules_name(None)},
        "distro_driver": {"packages": list(DISTRO_DRIVER), "extra": list(DISTRO_DRIVER_EXTRA),
                          "source": list(DISTRO_DRIVER_SOURCE)},
        "driver_patterns": driver_patterns(),
        "doca_ofed": {"meta": DOCA_OFED_META,
                      "releases": {r: [{"name": n, "version": v} for n, v in doca_ofed_packages(r)]
                                   for r in DOCA_RELEASES}},
        "skew": skew_packages(branches, cuda_minors, cuda_majors),
        # version = prefix ~ upstream version ~ suffix
        "version": {"driver": {"prefix": "", "suffix": UBUNTU_REVISION},
                    "native": {"prefix": "", "suffix": NATIVE_REVISION},
                    "dcgm": {"prefix": DCGM_EPOCH, "suffix": NATIVE_REVISION}},
    }

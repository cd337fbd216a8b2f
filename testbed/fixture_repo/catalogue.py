"""The package catalogue of the fixture repository: names, versions and relations.

It carries exactly the versions of the table "Fixture NVIDIA repository" in docs/architecture.md,
named and related as in NVIDIA's CUDA repository. The naming is the lock's (gpufleet.lock.packages, the
one place it lives; sources: ../shared/fixtures/real/apt/NVIDIA-APT-NAMING-RULES.md); this module adds the
versions the repository carries and the relations between the packages:

* Ubuntu-style driver packages NVIDIA rebuilds carry ``<V>-0ubuntu1``; NVIDIA-native ones ``<V>-1``.
* Branches up to 580 keep the branch in driver package names; 590 drops it.
* Fabric manager and NSCQ are branch-suffixed below 580 and unsuffixed from 580 on.
* ``nvidia-driver-<B>[-open]`` depends on every co-versioned package with ``(= exact version)``,
  so apt resolves an older driver only when all of them are pinned.
* DCGM 4 packages carry epoch 1 (``1:4.2.3-1``); the .deb file name omits the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.lock import packages as naming
from gpufleet.lock.compat import KNOWN_NCCL

#: Driver branch -> driver versions, oldest first.
DRIVERS: dict[int, tuple[str, ...]] = {
    550: ("550.144.03", "550.163.01"),
    570: ("570.133.20", "570.172.08"),
    580: ("580.65.06", "580.95.05"),
    590: ("590.44.01", "590.48.01"),
}

#: CUDA toolkit package (``cuda-toolkit-X-Y``) -> releases.
CUDA_TOOLKITS: dict[str, tuple[str, ...]] = {
    "12.4": ("12.4.1",),
    "12.8": ("12.8.0", "12.8.1"),
    "12.9": ("12.9.0", "12.9.1"),
    "13.0": ("13.0.0", "13.0.2"),
}

#: cuDNN 9 CUDA major -> versions (``libcudnn9[-dev]-cuda-<major>``).
CUDNN: dict[int, tuple[str, ...]] = {
    12: ("9.8.0.87", "9.10.2.21"),
    13: ("9.12.0.46", "9.13.0.50"),
}

#: NCCL versions (``libnccl2``/``libnccl-dev``), as ``<nccl>-1+cuda<X.Y>``: every build the lock knows
#: (gpufleet.lock.compat.KNOWN_NCCL, which suggests fixes from them), so each suggestion can be converged here.
NCCL: tuple[str, ...] = KNOWN_NCCL

DCGM: tuple[str, ...] = ("1:4.2.3-1", "1:4.4.1-1")

#: The simulator's own package: the module both daemon stand-ins import. NVIDIA's packages have no such
#: dependency; the stand-ins do, and apt pulls it in, so roles still install only NVIDIA's names.
SIMULATOR_COMMON = "gpusim-common"
SIMULATOR_COMMON_VERSION = "1.0-1"
NVIDIA_MAINTAINER = "NVIDIA CORPORATION <cudatools@nvidia.com>"
CONTAINER_TOOLKIT: tuple[str, ...] = ("1.17.8-1", "1.18.0-1")

#: Lustre client releases as Whamcloud ships them for Ubuntu 22.04 (the 2.15 LTS line; Debian revision -1, e.g.
#: https://downloads.whamcloud.com/public/lustre/lustre-2.15.8/ubuntu2204/client/lustre-client-utils_2.15.8-1_amd64.deb).
#: Two releases, so a scenario can move between them. Names: gpufleet.lock.packages (lustre_client_*).
LUSTRE_CLIENT: tuple[str, ...] = ("2.15.5-1", "2.15.6-1")
#: The Maintainer of the lustre source package's debian/control as Whamcloud's builds carry it.
LUSTRE_MAINTAINER = "Lustre Developers <lustre-devel@lists.lustre.org>"


@dataclass(frozen=True)
class Package:
    """One binary package. ``kind`` selects its payload in ``testbed.fixture_repo.payloads``."""

    name: str
    version: str
    kind: str
    arch: str = "amd64"
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    section: str = "multiverse/libs"
    description: str = ""
    #: Values the payload needs (driver version, branch, CUDA release, ...).
    meta: dict[str, str] = field(default_factory=dict)
    #: NVIDIA for the packages that mirror one of NVIDIA's; gpufleet for the simulator's own.
    maintainer: str = NVIDIA_MAINTAINER

    @property
    def upstream(self) -> str:
        """Version without epoch and Debian revision (``1:4.2.3-1`` -> ``4.2.3``)."""
        return self.version.split(":", 1)[-1].rsplit("-", 1)[0]

    @property
    def filename(self) -> str:
        # NVIDIA's Packages list ./<name>_<version without epoch>_<arch>.deb.
        return f"{self.name}_{self.version.split(':', 1)[-1]}_{self.arch}.deb"


def _driver_packages(branch: int, driver: str) -> list[Package]:
    s = naming.driver_suffix(branch)
    ub = f"{driver}{naming.UBUNTU_REVISION}"
    nv = f"{driver}{naming.NATIVE_REVISION}"
    meta = {"driver": driver, "branch": str(branch)}

    def eq(name: str) -> str:
        return f"{name} (= {ub})"

    def ubuntu(
        name: str,
        kind: str,
        desc: str,
        depends: tuple[str, ...] = (),
        conflicts: tuple[str, ...] = (),
        arch: str = "amd64",
        exclusive: str | None = None,
    ) -> Package:
        # A suffixed package owning files that another branch's package also owns conflicts with
        # the unsuffixed name and provides it, so only one provider is installed at a time.
        excl = (exclusive,) if exclusive and s else ()
        return Package(
            name,
            ub,
            kind,
            arch=arch,
            depends=depends,
            conflicts=conflicts + excl,
            replaces=excl,
            provides=excl,
            meta=meta,
            description=desc,
        )

    common = [
        f"libnvidia-compute{s}",
        f"libnvidia-cfg1{s}",
        f"libnvidia-common{s}",
        f"nvidia-utils{s}",
        f"nvidia-compute-utils{s}",
        f"nvidia-kernel-common{s}",
    ]
    pkgs = [
        ubuntu(f"libnvidia-compute{s}", "empty", "NVIDIA libcompute package"),
        ubuntu(f"libnvidia-cfg1{s}", "empty", "NVIDIA binary OpenGL/GLX configuration library"),
        ubuntu(f"libnvidia-common{s}", "empty", "Shared files used by the NVIDIA libraries", arch="all"),
        ubuntu(
            f"nvidia-utils{s}",
            "nvidia-utils",
            "NVIDIA driver support binaries",
            depends=(eq(f"libnvidia-compute{s}"), "python3"),
            exclusive="nvidia-utils",
        ),
        ubuntu(
            f"nvidia-compute-utils{s}",
            "nvidia-compute-utils",
            "NVIDIA compute utilities",
            depends=(eq(f"libnvidia-compute{s}"), "python3", SIMULATOR_COMMON),
            exclusive="nvidia-compute-utils",
        ),
        ubuntu(f"nvidia-kernel-common{s}", "empty", "Shared files used with the kernel module"),
        ubuntu(
            f"nvidia-dkms{s}",
            "empty",
            "NVIDIA DKMS package",
            depends=(eq(f"nvidia-kernel-common{s}"), eq(f"nvidia-kernel-source{s}")),
            conflicts=(f"nvidia-dkms{s}-open",),
        ),
        ubuntu(
            f"nvidia-dkms{s}-open",
            "empty",
            "NVIDIA DKMS package (open kernel module)",
            depends=(eq(f"nvidia-kernel-common{s}"), eq(f"nvidia-kernel-source{s}-open")),
            conflicts=(f"nvidia-dkms{s}",),
        ),
        ubuntu(
            f"nvidia-kernel-source{s}",
            "empty",
            "NVIDIA kernel source package",
            conflicts=(f"nvidia-kernel-source{s}-open",),
        ),
        ubuntu(
            f"nvidia-kernel-source{s}-open",
            "empty",
            "NVIDIA kernel source package (open kernel module)",
            conflicts=(f"nvidia-kernel-source{s}",),
        ),
        ubuntu(
            f"nvidia-driver{s}",
            "empty",
            "NVIDIA driver metapackage",
            depends=tuple(eq(n) for n in [*common, f"nvidia-dkms{s}", f"nvidia-kernel-source{s}"]),
            conflicts=(f"nvidia-driver{s}-open",),
        ),
        ubuntu(
            f"nvidia-driver{s}-open",
            "empty",
            "NVIDIA driver (open kernel) metapackage",
            depends=tuple(eq(n) for n in [*common, f"nvidia-dkms{s}-open", f"nvidia-kernel-source{s}-open"]),
            conflicts=(f"nvidia-driver{s}",),
        ),
        Package(
            f"cuda-drivers{s}",
            nv,
            "empty",
            meta=meta,
            section="multiverse/devel",
            description="CUDA Driver meta-package, branch-specific",
            depends=(f"nvidia-driver{s}-open (>= {driver}) | nvidia-driver{s} (>= {driver})",),
        ),
    ]
    fm, nscq = naming.fabric_manager_names(branch)
    fm_excl: tuple[str, ...] = (naming.FABRIC_MANAGER,) if naming.fabric_manager_suffix(branch) else ()
    pkgs += [
        Package(
            fm,
            nv,
            "fabricmanager",
            meta=meta,
            section="multiverse/utils",
            depends=("python3", SIMULATOR_COMMON),
            description="Fabric Manager for NVSwitch based systems",
            conflicts=fm_excl,
            replaces=fm_excl,
            provides=fm_excl,
        ),
        Package(nscq, nv, "empty", meta=meta, description="NVSwitch Configuration and Query library"),
    ]
    if branch < 580:
        pkgs.append(
            Package(
                f"cuda-drivers-fabricmanager-{branch}",
                nv,
                "empty",
                meta=meta,
                section="multiverse/devel",
                description="Meta-package for FM and Driver",
                depends=(f"cuda-drivers-{branch} (= {nv})", f"{fm} (= {nv})"),
            )
        )
    else:
        pkgs.append(
            Package(
                f"nvidia-driver-pinning-{branch}",
                nv,
                "pinning",
                arch="all",
                meta=meta,
                section="multiverse/admin",
                description=f"Pins NVIDIA driver packages to the {branch} branch",
            )
        )
    return pkgs


def _cuda_packages() -> list[Package]:
    pkgs = []
    for minor, releases in CUDA_TOOLKITS.items():
        name = naming.cuda_toolkit_name(*(int(x) for x in minor.split(".")))
        for rel in releases:
            pkgs.append(
                Package(
                    name,
                    f"{rel}-1",
                    "cuda-toolkit",
                    section="multiverse/devel",
                    description=f"CUDA Toolkit {minor} meta-package",
                    meta={"release": rel},
                )
            )
    return pkgs


def _cudnn_packages() -> list[Package]:
    pkgs = []
    for major, versions in CUDNN.items():
        other = 13 if major == 12 else 12
        for v in versions:
            lib, dev = naming.cudnn_names(9, major)
            meta = {"cudnn": v, "cuda_major": str(major)}
            pkgs += [
                Package(
                    lib,
                    f"{v}-1",
                    "cudnn",
                    meta=meta,
                    description="cuDNN runtime libraries",
                    conflicts=(naming.cudnn_names(9, other)[0],),
                ),
                Package(
                    dev,
                    f"{v}-1",
                    "cudnn-dev",
                    meta=meta,
                    description="cuDNN development headers",
                    depends=(f"{lib} (= {v}-1)",),
                    conflicts=(naming.cudnn_names(9, other)[1],),
                ),
            ]
    return pkgs


def _nccl_packages() -> list[Package]:
    pkgs = []
    for v in NCCL:
        meta = {"nccl": v.split("-", 1)[0]}
        pkgs += [
            Package(
                "libnccl2",
                v,
                "nccl",
                meta=meta,
                description="NVIDIA Collective Communication Library (NCCL) Runtime",
            ),
            Package(
                "libnccl-dev",
                v,
                "nccl-dev",
                meta=meta,
                section="multiverse/libdevel",
                description="NVIDIA Collective Communication Library (NCCL) Development Files",
                depends=(f"libnccl2 (= {v})",),
            ),
        ]
    return pkgs


def _dcgm_packages() -> list[Package]:
    pkgs = []
    for v in DCGM:
        core = "datacenter-gpu-manager-4-core"
        pkgs.append(
            Package(
                core,
                v,
                "dcgm-core",
                section="multiverse/utils",
                depends=("python3",),
                description="NVIDIA Data Center GPU Manager (DCGM) core",
            )
        )
        for extra in ("cuda12", "cuda13", "proprietary"):
            pkgs.append(
                Package(
                    f"datacenter-gpu-manager-4-{extra}",
                    v,
                    "empty",
                    section="multiverse/utils",
                    description=f"NVIDIA DCGM {extra} components",
                    depends=(f"{core} (= {v})",),
                )
            )
    return pkgs


def _container_toolkit_packages() -> list[Package]:
    pkgs = []
    for v in CONTAINER_TOOLKIT:
        pkgs += [
            Package(
                "libnvidia-container1",
                v,
                "empty",
                section="multiverse/libs",
                description="NVIDIA container runtime library",
            ),
            Package(
                "libnvidia-container-tools",
                v,
                "empty",
                section="multiverse/utils",
                description="NVIDIA container runtime library (command-line tools)",
                depends=(f"libnvidia-container1 (>= {v})",),
            ),
            Package(
                "nvidia-container-toolkit-base",
                v,
                "ctk-base",
                section="multiverse/utils",
                description="NVIDIA Container Toolkit Base",
                depends=("python3",),
            ),
            Package(
                "nvidia-container-toolkit",
                v,
                "empty",
                section="multiverse/utils",
                description="NVIDIA Container toolkit",
                depends=(
                    f"nvidia-container-toolkit-base (= {v})",
                    f"libnvidia-container-tools (>= {v})",
                    "libnvidia-container-tools (<< 2.0.0)",
                ),
            ),
        ]
    return pkgs


def _lustre_client_packages() -> list[Package]:
    """Whamcloud's client packages: the utilities (mount.lustre, lctl, lfs, lnetctl) and the DKMS-built modules,
    which depend on them (debian/control of lustre-release: ``lustre-client-modules-dkms`` Depends
    ``lustre-client-utils``). Real ones also depend on the DKMS toolchain, which a container cannot use."""
    pkgs = []
    for v in LUSTRE_CLIENT:
        pkgs += [
            Package(
                naming.LUSTRE_CLIENT_UTILS,
                v,
                "empty",
                section="admin",
                maintainer=LUSTRE_MAINTAINER,
                description="Userspace utilities for the Lustre filesystem (client)",
            ),
            Package(
                naming.lustre_client_modules_name(None),
                v,
                "empty",
                section="admin",
                maintainer=LUSTRE_MAINTAINER,
                description="Lustre Linux kernel module (DKMS)",
                depends=(naming.LUSTRE_CLIENT_UTILS,),
            ),
        ]
    return pkgs


def _simulator_packages() -> list[Package]:
    return [
        Package(
            SIMULATOR_COMMON,
            SIMULATOR_COMMON_VERSION,
            "gpusim-common",
            arch="all",
            depends=("python3",),
            section="python",
            description="GPU simulator: code shared by the daemon stand-ins",
            maintainer="gpufleet <fixture-repo@gpufleet.invalid>",
        )
    ]


#: DOCA releases the fixture carries (their packages and versions are the lock's, gpufleet.lock.packages).
DOCA: tuple[str, ...] = tuple(naming.DOCA_RELEASES)
DOCA_MAINTAINER = "Mellanox Technologies <support@mellanox.com>"


def _doca_packages() -> list[Package]:
    """DOCA-OFED of each release: the pinned set, and the ``doca-ofed`` meta package depending on it. The meta
    package's own revision in NVIDIA's repository is not known here; the fixture gives it the release number (no
    role pins it: it is installed with the set, which carries the versions that matter)."""
    pkgs = []
    for release in DOCA:
        pinned = naming.doca_ofed_packages(release)
        for name, version in pinned:
            pkgs.append(Package(name, version, "empty", arch="all" if name.endswith("-dkms") else "amd64",
                                section="net", description=f"{name} (DOCA-OFED {release}, gpufleet fixture)",
                                maintainer=DOCA_MAINTAINER))
        pkgs.append(Package(naming.DOCA_OFED_META, release, "empty", section="net",
                            depends=tuple(f"{n} (= {v})" for n, v in pinned),
                            description=f"DOCA-OFED {release} meta package (gpufleet fixture)",
                            maintainer=DOCA_MAINTAINER))
    return pkgs


def catalogue() -> list[Package]:
    """Every package of the fixture repository."""
    pkgs: list[Package] = _simulator_packages()
    for branch, versions in DRIVERS.items():
        for v in versions:
            pkgs += _driver_packages(branch, v)
    pkgs += _cuda_packages() + _cudnn_packages() + _nccl_packages() + _dcgm_packages()
    pkgs += _container_toolkit_packages() + _lustre_client_packages() + _doca_packages()
    return pkgs

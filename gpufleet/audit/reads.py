"""The reads of ``gpufleet audit``: every command the collector runs on a host, and the raw shape of their output.

The playbook (ansible/playbooks/audit.yml) gets this table as data (extra variable ``gpufleet_audit_reads``) and
runs each entry with ``ansible.builtin.command`` (argv, no shell), ``changed_when: false`` and
``check_mode: false``: the audit is read-only by construction, and a reviewer checks one list. Offline, the
same keys name the files of a ``--facts`` folder (``<host>/<key>.txt``), so the tests read what the playbook
would have returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from gpufleet import REPO_ROOT
from gpufleet.lock.packages import NVIDIA_PACKAGE_PATTERN


@dataclass(frozen=True)
class Read:
    argv: tuple[str, ...]
    #: Runs with become (sudo): only reads that need root. None does today; the playbook keeps the path.
    become: bool
    why: str


@dataclass(frozen=True)
class RawRead:
    """One read's outcome: exit status and standard output (127: the command is not on the host)."""

    rc: int
    stdout: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


#: Exit status of a read whose program is missing (the shell's convention, also what --facts assumes for
#: a read without a file).
MISSING = 127

#: Which installed packages apt-cache policy is asked about (the naming lives in gpufleet.lock.packages).
NVIDIA_PACKAGE = NVIDIA_PACKAGE_PATTERN
#: Services whose state the audit reports (Slurm or Kubernetes on the node, NVIDIA's daemons, unattended-upgrades).
SERVICES = ("slurmd.service", "kubelet.service", "nvidia-persistenced.service", "nvidia-fabricmanager.service",
            "unattended-upgrades.service")
#: Files NVIDIA's .run installer leaves (its own uninstaller and log): a driver apt knows nothing about.
RUN_INSTALL_FILES = ("/usr/bin/nvidia-uninstall", "/var/log/nvidia-installer.log")
HOST_TUNING_DEFAULTS = REPO_ROOT / "roles" / "host_tuning" / "defaults" / "main.yml"
NVIDIA_REPO_DEFAULTS = REPO_ROOT / "roles" / "nvidia_repo" / "defaults" / "main.yml"
#: systemd reads a unit's drop-ins from ``/etc/systemd/system/<unit>.d/*.conf`` (systemd.unit(5)): those of NVIDIA's
#: daemons among SERVICES, where another tool changes how the driver's daemons run (NVIDIA's Ansible role writes
#: ``nvidia-persistenced.service.d/override.conf``).
DROPIN_DIRS = tuple(f"/etc/systemd/system/{u}.d" for u in SERVICES if u.startswith("nvidia-"))
#: gpufleet names the apt sources, keyrings and drop-ins it writes with this prefix (gpufleet-lustre.list,
#: gpufleet-nvidia-distro.sources, gpufleet-doca.asc); the CUDA repository's keyring is the one exception (below).
GPUFLEET_PREFIX = "gpufleet-"
#: The sysctl host_tuning merges into its list (roles/host_tuning/tasks/main.yml).
NUMA_BALANCING = "kernel.numa_balancing"


@cache
def managed_sysctls() -> tuple[str, ...]:
    """The sysctls gpufleet manages: host_tuning's defaults (the one place they are listed) + NUMA balancing."""
    data: Any = yaml.safe_load(HOST_TUNING_DEFAULTS.read_text(encoding="utf-8"))
    return (NUMA_BALANCING, *sorted(str(k) for k in data["host_tuning_sysctls"]))


@cache
def gpufleet_keyrings() -> frozenset[str]:
    """The keyring paths of the apt sources gpufleet writes without its prefix: the CUDA repository's
    (``nvidia_repo_keyring`` in roles/nvidia_repo/defaults/main.yml, the one place it is set)."""
    data: Any = yaml.safe_load(NVIDIA_REPO_DEFAULTS.read_text(encoding="utf-8"))
    return frozenset({str(data["nvidia_repo_keyring"])})


@cache
def reads() -> dict[str, Read]:
    """Key -> read, in the order the report lists them."""
    return {
        "os_release": Read(("cat", "/etc/os-release"), False, "distribution and release"),
        "kernel": Read(("uname", "-r"), False, "running kernel"),
        # dpkg-query prints every package it knows; parsed by gpufleet.drift.dpkg.parse_dpkg_query.
        "dpkg": Read(("dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"), False,
                     "installed packages, versions, dpkg state"),
        "holds": Read(("apt-mark", "showhold"), False, "held packages"),
        # Lines "path:line" of every source file (one-line .list and deb822 .sources), empty lines kept.
        "apt_sources": Read(("grep", "-r", "-H", "-s", "--include=*.list", "--include=*.sources", "",
                             "/etc/apt/sources.list", "/etc/apt/sources.list.d"), False, "apt sources"),
        "apt_config": Read(("apt-config", "dump"), False, "unattended-upgrades settings"),
        "run_install": Read(("stat", "-c", "%n", *RUN_INSTALL_FILES), False, "files of a .run driver install"),
        "smi_xml": Read(("nvidia-smi", "-q", "-x"), False, "GPUs, driver, persistence, power, clocks, ECC, MIG"),
        "topo": Read(("nvidia-smi", "topo", "-m"), False, "NUMA, NVLink and NIC affinity"),
        "ibdev2netdev": Read(("ibdev2netdev",), False, "RDMA devices and their net devices"),
        "ibstat": Read(("ibstat",), False, "RDMA ports"),
        "ib_sysfs": Read(("ls", "-1", "/sys/class/infiniband"), False, "RDMA devices (without infiniband-diags)"),
        "modules": Read(("cat", "/proc/modules"), False, "loaded kernel modules (nvidia_peermem, lustre)"),
        "mounts": Read(("cat", "/proc/mounts"), False, "Lustre and NVMe mounts"),
        "sysctl": Read(("sysctl", *managed_sysctls()), False, "sysctls gpufleet manages"),
        # Lines "path:line" of pam_limits' files: the memlock limit host_tuning manages (limits.conf(5)).
        "limits": Read(("grep", "-r", "-H", "-s", "", "/etc/security/limits.conf", "/etc/security/limits.d"), False,
                       "locked-memory limits"),
        "services": Read(("systemctl", "is-active", *SERVICES), False, "Slurm, kubelet, NVIDIA daemons"),
        # Lines "path:line" of the drop-ins of NVIDIA's daemons (another tool's overrides).
        "unit_dropins": Read(("grep", "-r", "-H", "-s", "--include=*.conf", "", *DROPIN_DIRS), False,
                             "drop-ins of NVIDIA's daemons"),
    }


#: Filled by the playbook after ``dpkg``: ``apt-cache policy`` of the NVIDIA packages found (origin, pins).
APT_POLICY = "apt_policy"
#: apt-cache run as root rewrites /var/cache/apt/*.bin when they are older than the lists; empty cache file names
#: keep its cache in memory (the setting Debian's container images ship in apt.conf.d/docker-clean), so the
#: read writes nothing.
APT_POLICY_ARGV = ("apt-cache", "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=", "policy")
#: Keys a --facts folder may hold, in report order.
KEYS = (*reads(), APT_POLICY)


def playbook_vars() -> dict[str, Any]:
    """The extra variables audit.yml runs with: the reads as data (lists, never templates)."""
    return {
        "gpufleet_audit_reads": [{"key": k, "argv": list(r.argv), "become": r.become} for k, r in reads().items()],
        "gpufleet_audit_nvidia_package": NVIDIA_PACKAGE,
        "gpufleet_audit_apt_policy_argv": list(APT_POLICY_ARGV),
    }

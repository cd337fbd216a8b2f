"""Raw reads of one host -> typed facts, through the project's existing parsers (nvidia-smi XML, topo -m, ibstat,
dpkg-query, apt sources). The few outputs no parser read yet (``apt-cache policy``, ``apt-config dump``,
``/proc/mounts``, ``sysctl``) have their grammar here, once.

A read that failed or is absent becomes an empty fact and, where it matters, a line in ``HostFacts.problems``
(a host without nvidia-smi is still audited for its packages and sources).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.audit.reads import APT_POLICY, MISSING, NUMA_BALANCING, NVIDIA_PACKAGE, SERVICES, RawRead, reads
from gpufleet.catalog import GPUS
from gpufleet.drift.dpkg import parse_dpkg_query
from gpufleet.drift.security import parse_sources
from gpufleet.lock.packages import AUDIT_COMPONENTS
from gpufleet.parsers.errors import ParseError
from gpufleet.parsers.smi_xml import SmiReport, parse_smi_xml
from gpufleet.topology import Topology, parse_topo_m
from gpufleet.validation.ibstat import IbPort, parse_ibstat

_NVIDIA = re.compile(NVIDIA_PACKAGE)
_EPOCH = re.compile(r"^\d+:")
_POLICY_PACKAGE = re.compile(r"^(\S+):\s*$")
_POLICY_VERSION = re.compile(r"^\s+(\*\*\*)?\s*(\S+)\s+(-?\d+)\s*$")
_POLICY_ORIGIN = re.compile(r"^\s+(-?\d+)\s+(\S+)(?:\s+(\S+))?")
_APT_CONFIG = re.compile(r'^(\S+?)(::)?\s+"(.*)";\s*$')


@dataclass(frozen=True)
class Package:
    name: str
    #: dpkg's version string as installed (epoch and revision kept).
    version: str
    held: bool
    #: Where apt says the installed version comes from (a repository URL), "local" when only dpkg's status
    #: file has it (a .deb installed by hand), None when apt-cache policy was not read.
    origin: str | None = None


@dataclass(frozen=True)
class AptEntry:
    """One repository entry of one source file."""

    file: str
    uri: str
    suite: str
    signed_by: str | None
    #: Options that lower apt's signature checks, set to yes (trusted, allow-insecure, ...).
    insecure: tuple[str, ...]

    @property
    def repository(self) -> str:
        return f"{self.uri.rstrip('/')} {self.suite}"


@dataclass(frozen=True)
class Mount:
    source: str
    path: str
    fstype: str

    @property
    def filesystem(self) -> str:
        """What identifies the file system behind the mount: a Lustre source without its sub-directory
        (``nids:/fsname/datasets`` and ``nids:/fsname/checkpoints`` are one file system), else the device."""
        if self.fstype == "lustre" and ":/" in self.source:
            nids, _, rest = self.source.partition(":/")
            return f"{nids}:/{rest.split('/', 1)[0]}"
        return self.source


@dataclass
class HostFacts:
    host: str
    pool: str | None = None
    os: str | None = None
    kernel: str | None = None
    packages: dict[str, Package] = field(default_factory=dict)
    apt_sources: list[AptEntry] = field(default_factory=list)
    run_install: list[str] = field(default_factory=list)
    smi: SmiReport | None = None
    topology: Topology | None = None
    ib_ports: list[IbPort] = field(default_factory=list)
    rdma_devices: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    #: limits.conf(5) memlock entries: "<domain> <soft|hard|->" -> value, later files win as pam_limits reads them.
    memlock: dict[str, str] = field(default_factory=dict)
    #: unattended-upgrades: installed and enabled (APT::Periodic::Unattended-Upgrade not "0").
    unattended_upgrades: bool = False
    #: Unattended-Upgrade::Package-Blacklist entries (regular expressions matched at the start of a name).
    unattended_blacklist: list[str] = field(default_factory=list)
    services: dict[str, str] = field(default_factory=dict)
    #: Drop-in file of an NVIDIA daemon's unit -> its lines (systemd.unit(5) ``<unit>.d/*.conf``).
    unit_dropins: dict[str, list[str]] = field(default_factory=dict)
    #: Reads that failed in a way that limits the audit of this host ("no nvidia-smi", a parse error).
    problems: list[str] = field(default_factory=list)

    @property
    def nvidia_packages(self) -> dict[str, Package]:
        return {n: p for n, p in self.packages.items() if _NVIDIA.match(n)}

    @property
    def gpu_name(self) -> str | None:
        names = {g.name for g in self.smi.gpus if g.name} if self.smi else set()
        return ", ".join(sorted(names)) or None

    @property
    def gpu_model(self) -> str | None:
        """The catalog key of the host's GPUs (gpufleet/catalog/gpus.yaml), None when not in the catalog."""
        return next((k for k, m in GPUS.items() if m.name == self.gpu_name), None)

    @property
    def gpu_count(self) -> int:
        return len(self.smi.gpus) if self.smi else 0

    @property
    def fabric(self) -> str:
        layers = {p.link_layer for p in self.ib_ports}
        if "InfiniBand" in layers:
            return "infiniband"
        if "Ethernet" in layers:
            return "roce"
        return "infiniband" if self.rdma_devices else "none"

    def versions(self) -> dict[str, str]:
        """Component -> version in the lock's format (driver from nvidia-smi when it answered)."""
        out: dict[str, str] = {}
        for component, patterns in AUDIT_COMPONENTS.items():
            for pattern in patterns:
                hit = sorted((p for n, p in self.packages.items() if re.match(pattern, n)), key=lambda p: p.name)
                if hit:
                    out[component] = lock_version(component, hit[-1].version)
                    break
        if self.smi and self.smi.driver_version:
            out["driver"] = self.smi.driver_version
        return out

    def keyring(self, p: Package) -> str | None:
        """The keyring apt checks the package's repository with (signed-by of the source it comes from)."""
        if not p.origin or p.origin == "local":
            return None
        keys = {e.signed_by for e in self.apt_sources if same_uri(e.uri, p.origin)}
        return ", ".join(sorted(k or "(any trusted key)" for k in keys)) or None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "pool": self.pool, "os": self.os, "kernel": self.kernel,
            "gpu": {"name": self.gpu_name, "model": self.gpu_model, "count": self.gpu_count},
            "versions": self.versions(),
            "packages": [p.__dict__ | {"keyring": self.keyring(p)} for p in self.nvidia_packages.values()],
            "apt_sources": [e.__dict__ | {"insecure": list(e.insecure)} for e in self.apt_sources],
            "run_install": self.run_install,
            "gpus": [{"index": g.index, "persistence_mode": g.persistence_mode, "power_limit_w": g.power_limit_w,
                      "app_clocks_graphics_mhz": g.app_clocks_graphics_mhz,
                      "app_clocks_memory_mhz": g.app_clocks_memory_mhz, "ecc_mode": g.ecc_mode,
                      "mig_mode": g.mig_mode} for g in (self.smi.gpus if self.smi else [])],
            "topology": self.topology.to_dict() if self.topology else None,
            "rdma": {"devices": self.rdma_devices, "ports": [p.__dict__ for p in self.ib_ports],
                     "peer_memory": "nvidia_peermem" in self.modules},
            "mounts": [m.__dict__ for m in self.mounts],
            "sysctls": self.sysctls,
            "memlock": self.memlock,
            "unattended_upgrades": {"enabled": self.unattended_upgrades, "blacklist": self.unattended_blacklist},
            "services": self.services,
            "unit_dropins": self.unit_dropins,
            "problems": self.problems,
        }


def same_uri(a: str, b: str) -> bool:
    """Whether a source's URI and an ``apt-cache policy`` origin name one repository: apt prints ``file:///srv/x/``
    as ``file:/srv/x`` and drops the trailing slash."""

    def norm(u: str) -> str:
        u = u.rstrip("/")
        return "file:/" + u[len("file:"):].lstrip("/") if u.startswith("file:") else u

    return norm(a) == norm(b)


def lock_version(component: str, dpkg_version: str) -> str:
    """dpkg's version as the lock writes it: without epoch and Debian revision, except NCCL, whose lock entry
    keeps the revision and the ``+cudaX.Y`` build (gpufleet/lock/versions.py FORMATS)."""
    v = _EPOCH.sub("", dpkg_version)
    if component == "nccl":
        return v
    return v.rsplit("-", 1)[0] if "-" in v else v


def parse_apt_policy(text: str) -> dict[str, str]:
    """``apt-cache policy NAME...`` -> {package: origin of the installed version}; "local" when only
    /var/lib/dpkg/status lists it (no configured source carries that version)."""
    out: dict[str, str] = {}
    package: str | None = None
    installed = False
    for line in text.splitlines():
        if m := _POLICY_PACKAGE.match(line):
            package, installed = m.group(1), False
        elif m := _POLICY_VERSION.match(line):
            installed = bool(m.group(1))
        elif package and installed and (m := _POLICY_ORIGIN.match(line)):
            where = m.group(2)
            if where == "/var/lib/dpkg/status":
                out.setdefault(package, "local")
            elif out.get(package) in (None, "local"):
                out[package] = where
    return out


def parse_apt_sources(text: str) -> list[AptEntry]:
    """``grep -rH '' <source files>`` (``path:line``) -> entries, each file read with gpufleet.drift.security's
    source grammar (one-line and deb822)."""
    files: dict[str, list[str]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if sep:
            files.setdefault(path, []).append(rest)
    out = []
    for path, lines in files.items():
        for s in parse_sources("\n".join(lines)):
            insecure = tuple(sorted(k for k in ("trusted", "allow-insecure", "allow-weak",
                                                "allow-downgrade-to-insecure")
                                    if s.options.get(k, "").lower() in ("yes", "true", "1")))
            out.append(AptEntry(path, s.uri, s.suite, s.options.get("signed-by") or None, insecure))
    return out


def parse_apt_config(text: str) -> tuple[bool, list[str]]:
    """``apt-config dump`` -> (unattended upgrades switched on, the package blacklist)."""
    enabled = False
    blacklist: list[str] = []
    for line in text.splitlines():
        m = _APT_CONFIG.match(line.strip())
        if not m:
            continue
        key, value = m.group(1), m.group(3)
        if key == "APT::Periodic::Unattended-Upgrade":
            enabled = value.strip() not in ("", "0")
        elif key == "Unattended-Upgrade::Package-Blacklist" and m.group(2) and value:
            blacklist.append(value)
    return enabled, blacklist


def parse_mounts(text: str) -> list[Mount]:
    """``/proc/mounts`` (fstab(5) fields; octal escapes as the kernel writes them)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(Mount(parts[0], parts[1].replace("\\040", " "), parts[2]))
    return out


def parse_sysctl(text: str) -> dict[str, str]:
    """``sysctl NAME...`` -> {name: value}; names the kernel lacks are printed to stderr and left out."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_memlock(text: str) -> dict[str, str]:
    """``grep -rH '' <limits files>`` -> memlock entries (``* hard`` -> ``unlimited``); comments skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        _, sep, rest = line.partition(":")
        fields = rest.split("#", 1)[0].split() if sep else []
        if len(fields) == 4 and fields[2] == "memlock":
            out[f"{fields[0]} {fields[1]}"] = fields[3]
    return out


def parse_dropins(text: str) -> dict[str, list[str]]:
    """``grep -rH '' <drop-in dirs>`` -> {file: lines}, comments and empty lines left out."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if sep and rest.strip() and not rest.lstrip().startswith(("#", ";")):
            out.setdefault(path, []).append(rest.strip())
    return out


def _os(text: str) -> str | None:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    value = fields.get("PRETTY_NAME") or fields.get("NAME")
    return value.strip().strip('"') if value else None


def build_facts(host: str, raw: Mapping[str, RawRead], *, pool: str | None = None) -> HostFacts:
    """Facts of one host from its raw reads (keys of gpufleet.audit.reads)."""
    f = HostFacts(host, pool)

    def ok(key: str) -> str | None:
        r = raw.get(key)
        return r.stdout if r is not None and r.ok else None

    def parsed(key: str, what: str, parse: Any) -> Any:
        text = ok(key)
        if text is None:
            return None
        try:
            return parse(text)
        except ParseError as e:
            f.problems.append(f"{what}: {str(e).splitlines()[0]}")
            return None

    if (text := ok("os_release")) is not None:
        f.os = _os(text)
    if (text := ok("kernel")) is not None:
        f.kernel = text.strip() or None
    holds = set((ok("holds") or "").split())
    origins = parse_apt_policy(ok(APT_POLICY) or "")
    dpkg = raw.get("dpkg")
    if dpkg is not None and dpkg.ok:
        for st in parse_dpkg_query(list(reads()["dpkg"].argv), dpkg.stdout):
            if st.installed and st.version:
                f.packages[st.name] = Package(st.name, st.version, st.name in holds or st.selection == "hold",
                                              origins.get(st.name) if raw.get(APT_POLICY) else None)
    else:
        f.problems.append("dpkg-query did not answer: packages not audited (not a Debian/Ubuntu host?)")
    # grep exits 2 when one of its paths is missing (Debian 12 has no /etc/apt/sources.list); the rest still counts.
    sources = raw.get("apt_sources")
    f.apt_sources = parse_apt_sources(sources.stdout if sources is not None else "")
    run = raw.get("run_install")
    f.run_install = [line.strip() for line in (run.stdout if run else "").splitlines() if line.strip()]
    f.smi = parsed("smi_xml", "nvidia-smi -q -x", parse_smi_xml)
    if f.smi is None and not any(p.startswith("nvidia-smi") for p in f.problems):
        smi = raw.get("smi_xml")
        f.problems.append("no nvidia-smi on the host (GPUs not audited)" if smi is None or smi.rc == MISSING
                          else f"nvidia-smi failed (rc {smi.rc}): {smi.stdout.strip()[:120]}")
    f.topology = parsed("topo", "nvidia-smi topo -m", parse_topo_m)
    report = parsed("ibstat", "ibstat", parse_ibstat)
    f.ib_ports = list(report.ports) if report else []
    devices = {line.split()[0] for line in (ok("ib_sysfs") or "").splitlines() if line.strip()}
    devices |= {line.split()[0] for line in (ok("ibdev2netdev") or "").splitlines() if line.strip()}
    devices |= {p.ca for p in f.ib_ports}
    f.rdma_devices = sorted(devices)
    f.modules = [line.split()[0] for line in (ok("modules") or "").splitlines() if line.strip()]
    f.mounts = [m for m in parse_mounts(ok("mounts") or "") if m.fstype in ("lustre", "nfs", "nfs4", "xfs", "ext4")]
    # sysctl exits non-zero when one name is unknown; the ones it printed still count.
    sysctl = raw.get("sysctl")
    f.sysctls = parse_sysctl(sysctl.stdout) if sysctl is not None else {}
    limits = raw.get("limits")
    f.memlock = parse_memlock(limits.stdout if limits is not None else "")
    installed_uu = "unattended-upgrades" in f.packages
    enabled, f.unattended_blacklist = parse_apt_config(ok("apt_config") or "")
    f.unattended_upgrades = installed_uu and enabled
    services = raw.get("services")
    # systemctl is-active prints one state per unit, in order; it exits non-zero when one is not active.
    states = (services.stdout.split() if services is not None else [])
    f.services = dict(zip((s.removesuffix(".service") for s in SERVICES), states, strict=False))
    dropins = raw.get("unit_dropins")
    f.unit_dropins = parse_dropins(dropins.stdout if dropins is not None else "")
    if NUMA_BALANCING not in f.sysctls and sysctl is not None and sysctl.rc != MISSING:
        f.problems.append(f"{NUMA_BALANCING} not readable")
    return f

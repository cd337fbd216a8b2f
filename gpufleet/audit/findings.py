"""Findings: the audited facts against a sound configuration, each with a severity and the fix in gpufleet terms.

Severities: ``security`` (apt would accept packages nobody signed), ``error`` (apt or the lock refuses the
state, or it breaks GPU work), ``warning`` (works today, drifts or slows tomorrow). docs/audit.md explains each
finding id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

from gpufleet.audit.facts import AptEntry, HostFacts, lock_version, same_uri
from gpufleet.audit.pools import by_pool, hardware, pool_of
from gpufleet.audit.propose import COMPARED, majority, nearest_profile
from gpufleet.audit.reads import GPUFLEET_PREFIX, NUMA_BALANCING, gpufleet_keyrings
from gpufleet.errors import ConfigError
from gpufleet.lock.packages import NVIDIA_UNPINNED_PATTERN
from gpufleet.lock.resolve import resolve_lock
from gpufleet.lock.versions import matches_format
from gpufleet.spec import ClusterSpec

Severity = Literal["security", "error", "warning"]
SEVERITY_ORDER: dict[str, int] = {"security": 0, "error": 1, "warning": 2}
#: Packages that carry the driver's version (NVIDIA's, Ubuntu's and Debian's names; cuda-compat is left out: it is
#: meant to differ from the driver).
#: Listed, never a finding for being unheld (their version does not follow the driver; the lock's note).
_UNPINNED = re.compile(NVIDIA_UNPINNED_PATTERN)
_DRIVER_FAMILY = re.compile(r"^(nvidia-|libnvidia-|cuda-driver(?:s)|libcuda|firmware-nvidia)")
#: Words in the mount points of datasets / checkpoints (the example stacks mount /lustre/datasets, /lustre/checkpoints).
DATASETS, CHECKPOINTS = "dataset", "checkpoint"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    hosts: tuple[str, ...]
    pool: str | None
    message: str
    fix: str

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {"hosts": list(self.hosts)}


def _hosts(fs: Iterable[HostFacts]) -> tuple[str, ...]:
    return tuple(sorted(f.host for f in fs))


def skew(pool: str, hosts: list[HostFacts]) -> list[Finding]:
    out = []
    for comp in ("kernel", *COMPARED, "fabric_manager"):
        seen: dict[str, list[str]] = {}
        for h in hosts:
            v = h.kernel if comp == "kernel" else h.versions().get(comp)
            seen.setdefault(v or "(none)", []).append(h.host)
        if len(seen) > 1:
            detail = "; ".join(f"{v} on {', '.join(sorted(hs))}" for v, hs in sorted(seen.items()))
            out.append(Finding("version-skew", "warning", _hosts(hosts), pool,
                               f"{comp} differs within pool {pool}: {detail}",
                               "adopt the pool with one stack (--write-stack): its lock pins one version for every "
                               "host, and `gpufleet converge` moves the others to it through the drain rules"))
    return out


def lock_refusals(pool: str, hosts: list[HostFacts]) -> list[Finding]:
    """What the lock's rules (gpufleet.lock.rules, unchanged) say about the versions this pool runs, taken as
    overrides of the nearest profile."""
    model = hardware(hosts[0])[0]
    if model not in _catalog():
        # The rules are per GPU model; a GPU gpufleet has no catalog entry for cannot be locked (the proposal lists
        # such hosts under left_out).
        return []
    versions = {c: v for c in COMPARED if (v := majority([h.versions()[c] for h in hosts if c in h.versions()]))}
    valid = {k: v for k, v in versions.items() if matches_format(k, v)}
    if not valid.get("driver"):
        return []
    profile = nearest_profile({model}, valid)
    pool_cfg: dict[str, object] = {"name": "audit", "role": "gpu", "gpu": model, "count": len(hosts),
                                   "host_management": "ansible",
                                   "hosts": [{"name": f"h{i}", "address": f"h{i}"} for i in range(len(hosts))]}
    spec = ClusterSpec.model_validate({"stack": "audit", "backend": "existing", "cluster_name": "audit",
                                       "lock": {"profile": profile.name, "versions": valid}, "pools": [pool_cfg]})
    try:
        resolve_lock(spec, None)
    except ConfigError as e:
        return [Finding("lock-refused", "error", _hosts(hosts), pool,
                        f"{p.rule} ({', '.join(f'{k} {v}' for k, v in sorted(valid.items()))})",
                        f"the lock cannot pin what runs; a stack on profile {profile.name} replaces it "
                        "(--write-stack lists the version changes)")
                for p in e.problems]
    return []


def _catalog() -> set[str]:
    from gpufleet.catalog import GPUS

    return set(GPUS)


def power_skew(pool: str, hosts: list[HostFacts]) -> list[Finding]:
    limits: dict[float, list[str]] = {}
    for h in hosts:
        for g in h.smi.gpus if h.smi else []:
            if g.power_limit_w is not None:
                limits.setdefault(g.power_limit_w, []).append(f"{h.host} GPU{g.index}")
    if len(limits) <= 1:
        return []
    detail = "; ".join(f"{w:g} W on {', '.join(gs)}" for w, gs in sorted(limits.items()))
    return [Finding("power-limit-skew", "warning", _hosts(hosts), pool,
                    f"power limits differ within pool {pool}: {detail}",
                    "set gpufleet:pools[].power_limit for the pool; converge (role gpu_settings) applies it to "
                    "every GPU")]


def host_findings(h: HostFacts) -> list[Finding]:
    out: list[Finding] = []
    pool = pool_of(h)
    one = (h.host,)
    nvidia = h.nvidia_packages
    unheld = sorted(n for n, p in nvidia.items() if not p.held and not _UNPINNED.match(n))
    if unheld:
        out.append(Finding("unheld-packages", "warning", one, pool,
                           f"{len(unheld)} NVIDIA package(s) not held: {', '.join(unheld[:8])}"
                           + (" ..." if len(unheld) > 8 else ""),
                           "converge with the proposed stack: role pinned_packages pins and holds every package the "
                           "lock installs (taken over in place at the locked version)"))
    if h.unattended_upgrades:
        free = [n for n in unheld if not any(re.match(b, n) for b in h.unattended_blacklist)]
        if free:
            out.append(Finding("unattended-upgrades", "warning", one, pool,
                               f"unattended-upgrades is on and may replace {', '.join(free[:8])}"
                               + (" ..." if len(free) > 8 else "") + " (not held, not in its Package-Blacklist)",
                               "hold the packages (converge does, role pinned_packages) or add them to "
                               "Unattended-Upgrade::Package-Blacklist; a driver replaced under running jobs "
                               "breaks them until reboot"))
    if h.run_install:
        out.append(Finding("run-installer", "warning", one, pool,
                           f"driver installed by NVIDIA's .run installer ({', '.join(h.run_install)}): apt does not "
                           "know it",
                           "remove it with nvidia-uninstall during a drain, then converge installs the locked "
                           "packages"))
    off = [g.index for g in (h.smi.gpus if h.smi else []) if g.persistence_mode is False]
    if off:
        out.append(Finding("persistence-off", "warning", one, pool,
                           f"persistence mode off on GPU {', '.join(map(str, off))}: the driver tears down and "
                           "re-initialises the GPU between jobs (slow starts, settings lost)",
                           "converge: role gpu_settings turns persistence mode on (gpu_settings_persistence_mode)"))
    if h.sysctls.get(NUMA_BALANCING, "0") not in ("0", ""):
        out.append(Finding("numa-balancing", "warning", one, pool,
                           f"{NUMA_BALANCING} = {h.sysctls[NUMA_BALANCING]}: the kernel migrates pages under "
                           "pinned GPU/RDMA buffers",
                           "converge: role host_tuning sets it to 0 (host_tuning_numa_balancing: false)"))
    data = [m for m in h.mounts if DATASETS in m.path.lower()]
    ckpt = [m for m in h.mounts if CHECKPOINTS in m.path.lower()]
    shared = sorted({(d.path, c.path, d.filesystem) for d in data for c in ckpt if d.filesystem == c.filesystem})
    for d_path, c_path, fs in shared:
        out.append(Finding("shared-filesystem", "warning", one, pool,
                           f"datasets ({d_path}) and checkpoints ({c_path}) are on one file system ({fs}): "
                           "checkpoint bursts stall the data loaders",
                           "give checkpoints their own file system or pool (gpufleet:storage.lustre.checkpoints)"))
    if h.rdma_devices and h.gpu_count and "nvidia_peermem" not in h.modules:
        out.append(Finding("rdma-without-peermem", "warning", one, pool,
                           f"RDMA devices {', '.join(h.rdma_devices[:4])} but nvidia_peermem is not loaded: NCCL "
                           "copies through host memory instead of GPUDirect RDMA",
                           "converge: role rdma loads it (rdma_peermem_module)"))
    out += source_findings(h)
    out += origin_findings(h)
    out += driver_package_skew(h)
    out += unit_override_findings(h)
    return out


def gpufleet_source(e: AptEntry) -> bool:
    """Whether gpufleet wrote this source: its file or keyring carries gpufleet's prefix, or its keyring is the CUDA
    repository's as roles/nvidia_repo installs it (the file name alone says nothing: NVIDIA's cuda-keyring package
    writes the same ``cuda-<distro>-<arch>.list``)."""
    def own(path: str) -> bool:
        return path.rsplit("/", 1)[-1].startswith(GPUFLEET_PREFIX)

    return own(e.file) or (e.signed_by is not None and (own(e.signed_by) or e.signed_by in gpufleet_keyrings()))


def origin_findings(h: HostFacts) -> list[Finding]:
    """NVIDIA packages whose installed version comes from a repository no gpufleet source names (NVIDIA's
    cuda-keyring source, the distribution's archive, another tool's file)."""
    ours = [e for e in h.apt_sources if gpufleet_source(e)]
    by_origin: dict[str, list[str]] = {}
    for name, p in sorted(h.nvidia_packages.items()):
        if p.origin and p.origin != "local" and not any(same_uri(e.uri, p.origin) for e in ours):
            by_origin.setdefault(p.origin, []).append(name)
    out = []
    for origin, names in sorted(by_origin.items()):
        where = "; ".join(f"{e.file} ({e.suite}, {'signed-by ' + e.signed_by if e.signed_by else 'no signed-by'})"
                          for e in h.apt_sources if same_uri(e.uri, origin)) or "no source file"
        out.append(Finding("foreign-source", "warning", (h.host,), pool_of(h),
                           f"{len(names)} NVIDIA package(s) installed from {origin}, a source gpufleet did not "
                           f"write ({where}): {', '.join(names[:8])}" + (" ..." if len(names) > 8 else ""),
                           "adopt with the proposed stack: converge's repository role replaces the source with its "
                           "own source and keyring (issue 28 point 4) and role nvidia_driver takes the packages "
                           "over at the locked version (pinned and held) or replaces them through the drain rules"))
    return out


def driver_package_skew(h: HostFacts) -> list[Finding]:
    """Driver packages of one host at different driver versions: what an install asked for by version (NVIDIA's
    Ansible role installs one package, ``cuda-drivers-<branch>=<version>``) is not what apt pulled in with it."""
    seen: dict[str, list[str]] = {}
    for name, p in sorted(h.nvidia_packages.items()):
        v = lock_version("driver", p.version)
        if _DRIVER_FAMILY.match(name) and matches_format("driver", v):
            seen.setdefault(v, []).append(name)
    if len(seen) <= 1:
        return []
    detail = "; ".join(f"{v}: {', '.join(ns[:4])}" + (" ..." if len(ns) > 4 else "")
                       for v, ns in sorted(seen.items()))
    return [Finding("driver-package-skew", "warning", (h.host,), pool_of(h),
                    f"driver packages at {len(seen)} versions ({detail}): a package installed at a version "
                    "(name=version) does not hold the driver packages it depends on with >=",
                    "converge with the proposed stack: role nvidia_driver installs, pins and holds every "
                    "co-versioned driver package at the lock's one version")]


def unit_override_findings(h: HostFacts) -> list[Finding]:
    out = []
    for path, lines in sorted(h.unit_dropins.items()):
        if path.rsplit("/", 1)[-1].startswith(GPUFLEET_PREFIX):
            continue
        unit = path.rsplit("/", 2)[-2].removesuffix(".d")
        settings = [line for line in lines if not line.startswith("[")]
        out.append(Finding("unit-override", "warning", (h.host,), pool_of(h),
                           f"{unit} runs with a drop-in gpufleet does not write: {path} "
                           f"({'; '.join(settings[:4]) or 'empty'})",
                           f"converge runs {unit} as the driver package ships it (role nvidia_driver) and leaves "
                           "this file in place: move what it sets into the stack (gpu_settings for persistence, "
                           "power and clocks) and remove it, or keep it knowingly"))
    return out


def source_findings(h: HostFacts) -> list[Finding]:
    out: list[Finding] = []
    repos: dict[str, list[tuple[str, str | None, bool]]] = {}
    for e in h.apt_sources:
        repos.setdefault(e.repository, []).append((e.file, e.signed_by, "trusted" in e.insecure))
        if e.insecure:
            out.append(Finding("source-unsigned", "security", (h.host,), pool_of(h),
                               f"{e.file}: {', '.join(e.insecure)}=yes on {e.uri}: apt accepts its packages "
                               "without a valid signature",
                               "remove the option; converge's repository role installs the repository with its "
                               "signing key (signed-by)"))
    for repo, entries in sorted(repos.items()):
        keys = {k for _, k, _ in entries}
        trusted = {t for _, _, t in entries}
        if len(entries) > 1 and (len(keys) > 1 or len(trusted) > 1):
            what = "Signed-By" if len(keys) > 1 else "Trusted"
            files = ", ".join(f"{f} ({k or 'no signed-by'}{', trusted' if t else ''})" for f, k, t in entries)
            out.append(Finding("source-conflict", "error", (h.host,), pool_of(h),
                               f"{repo} is configured {len(entries)} times with different {what} "
                               f"({files}): apt stops with \"Conflicting values set for option {what}\"",
                               "keep one source per repository; converge's repository role will replace them "
                               "with its own (issue 28 point 4), until then remove all but one"))
    return out


def find_all(facts: list[HostFacts]) -> list[Finding]:
    """Every finding, most severe first."""
    out: list[Finding] = []
    for pool, hosts in sorted(by_pool(facts).items()):
        hosts = [h for h in hosts if h.smi is not None or h.packages]
        if len(hosts) > 1:
            out += skew(pool, hosts)
            out += power_skew(pool, hosts)
        if hosts:
            out += lock_refusals(pool, hosts)
    for h in facts:
        out += host_findings(h)
    return sorted(out, key=lambda f: (SEVERITY_ORDER[f.severity], f.id, f.hosts))

"""The lock rules over an Ansible inventory, for plain ``ansible-playbook`` runs.

The action plugin ``gpufleet_lock_check`` (ansible/action_plugins/) reads, for every host, the variables
``render_ansible_vars`` writes (``nvidia_driver_version``, ``cuda_toolkit_version``, ...) together with where
each one was set, and hands them here. This module rebuilds the Lock from them and runs the same rules as
``gpufleet lock check`` (gpufleet.lock.rules), naming the inventory file and the variable instead of the
stack key. On top of those it reports skew: hosts of one inventory that resolve a version differently.

A variable the inventory does not set is taken from the profile named by ``gpufleet_lock_profile``
(default h100-cuda12.8), which is what the role defaults hold (tests/test_lock_ansible.py keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpufleet.catalog import GPUS
from gpufleet.errors import ConfigProblem
from gpufleet.lock.model import FOLLOW_DRIVER, Lock
from gpufleet.lock.profiles import PROFILES
from gpufleet.lock.render import (
    CUDA_COMPAT_VAR,
    DRIVER_MANAGER_VAR,
    ENTRY_VARS,
    FABRIC_MANAGER_REQUIRED_VAR,
    PROFILE_VAR,
    TOOLKIT_MANAGER_VAR,
)
from gpufleet.lock.rules import RuleContext, run_rules
from gpufleet.lock.versions import FORMATS, driver_branch, matches_format
from gpufleet.spec import ClusterSpec, LockConfig, NodePool

#: The profile the role defaults match; used for variables an inventory leaves unset.
DEFAULT_PROFILE = "h100-cuda12.8"
#: The host's pool (written by gpufleet.inventory) and the pools' settings (group_vars/all/cluster.yml).
POOL_VAR = "gpufleet_pool"
POOLS_VAR = "gpufleet_pools"
#: What the gpu_settings role applies; checked against the catalog's range for the pool's GPU.
POWER_VAR = "gpu_settings_power_limit"

#: Every variable the plugin reads from each host.
HOST_VARS: tuple[str, ...] = (
    *ENTRY_VARS.values(),
    PROFILE_VAR,
    CUDA_COMPAT_VAR,
    DRIVER_MANAGER_VAR,
    TOOLKIT_MANAGER_VAR,
    FABRIC_MANAGER_REQUIRED_VAR,
    POOL_VAR,
    POOLS_VAR,
    POWER_VAR,
)

_MANAGERS = ("host", "operator")
_COMPAT = ("strict", "minor-version")
_MAX_HOSTS_NAMED = 3


@dataclass(frozen=True)
class HostSettings:
    """One host's lock variables (only those it defines) and where each was set (``path:line``)."""

    name: str
    values: Mapping[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)

    def text(self, var: str) -> str | None:
        return _text(self.values[var]) if var in self.values else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _hosts_text(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_HOSTS_NAMED])
    more = len(names) - _MAX_HOSTS_NAMED
    return f"{shown} and {more} more" if more > 0 else shown


class AnsibleRuleContext(RuleContext):
    """Names inventory files and Ansible variables where the stack context names stack keys."""

    def __init__(self, spec: ClusterSpec, lock: Lock, host: HostSettings, overridden: set[str],
                 pool_hosts: Mapping[str, HostSettings]) -> None:
        super().__init__(spec, lock, "", overridden)
        self.host = host
        self.pool_hosts = pool_hosts

    def _where(self, host: HostSettings, var: str) -> str:
        if var in host.origins:
            return host.origins[var]
        if var in host.values:
            return var
        return f"profile {self.lock.profile} ({var} not set in the inventory)"

    def file_of(self, entry: str) -> str:
        return self._where(self.host, ENTRY_VARS[entry])

    def key(self, entry: str) -> str:
        return ENTRY_VARS[entry]

    def setting(self, entry: str) -> str:
        return ENTRY_VARS[entry]

    def compat_setting(self) -> str:
        return CUDA_COMPAT_VAR

    def pool_setting(self, field: str) -> str:
        return POWER_VAR if field == "power_limit" else f"{POOLS_VAR}.<pool>.{field}"

    def pool_problem(self, index: int, pool: NodePool, field: str, value: Any, rule: str,
                     fix: str) -> ConfigProblem:
        host = self.pool_hosts[pool.name]
        if field == "power_limit":
            return ConfigProblem(self._where(host, POWER_VAR), POWER_VAR, value, rule, fix)
        return ConfigProblem(self._where(host, POOLS_VAR), f"{POOLS_VAR}.{pool.name}.{field}", value, rule, fix)


@dataclass
class _Resolved:
    host: HostSettings
    profile: str
    entries: dict[str, str | None]
    overridden: set[str]
    compat: str
    driver_manager: str
    toolkit_manager: str

    def signature(self) -> tuple[Any, ...]:
        return (self.profile, self.compat, self.driver_manager, self.toolkit_manager,
                tuple(sorted(self.entries.items(), key=lambda kv: kv[0])))


def _resolve_host(host: HostSettings, problems: list[ConfigProblem]) -> _Resolved | None:
    profile_name = host.text(PROFILE_VAR) or DEFAULT_PROFILE
    profile = PROFILES.get(profile_name)
    if profile is None:
        problems.append(ConfigProblem(host.origins.get(PROFILE_VAR, PROFILE_VAR), PROFILE_VAR, profile_name,
                                      "unknown profile", f"use one of: {', '.join(sorted(PROFILES))}"))
        return None
    base = profile.versions()
    entries: dict[str, str | None] = {}
    overridden: set[str] = set()
    for entry, var in ENTRY_VARS.items():
        if var in host.values:
            entries[entry] = host.text(var)
    driver = entries.get("driver") or base["driver"]
    for entry in ENTRY_VARS:
        if entry not in entries:
            entries[entry] = driver if entry in FOLLOW_DRIVER else base[entry]
        elif entries[entry] != (driver if entry in FOLLOW_DRIVER else base[entry]):
            overridden.add(entry)
    if entries["kernel"] == "":
        entries["kernel"] = None
    return _Resolved(host, profile.name, entries, overridden,
                     host.text(CUDA_COMPAT_VAR) or "strict",
                     host.text(DRIVER_MANAGER_VAR) or "host",
                     host.text(TOOLKIT_MANAGER_VAR) or "host")


def _skew(resolved: Sequence[_Resolved]) -> list[ConfigProblem]:
    """One problem per variable that hosts resolve differently (each pool must use the one lock)."""
    out = []
    for entry, var in ENTRY_VARS.items():
        by_value: dict[str | None, list[_Resolved]] = {}
        for r in resolved:
            by_value.setdefault(r.entries[entry], []).append(r)
        if len(by_value) < 2:
            continue
        # The value most hosts hold is taken as the lock; the others are blamed.
        ranked = sorted(by_value.items(), key=lambda kv: -len(kv[1]))
        majority = ranked[0][0]
        parts = []
        for value, rs in ranked:
            where = rs[0].host.origins.get(var, "not set: profile " + rs[0].profile)
            parts.append(f"{value} on {_hosts_text([r.host.name for r in rs])} ({where})")
        for value, rs in ranked[1:]:
            blamed = rs[0].host.origins.get(var)
            fix = (f"remove {var} from {blamed} so these hosts use {majority}, or set {var} once for every "
                   "host (group_vars/all)" if blamed else
                   f"set {var} to {majority} for {_hosts_text([r.host.name for r in rs])}, or once for every "
                   "host (group_vars/all)")
            out.append(ConfigProblem(
                blamed or var, var, value,
                f"hosts resolve {var} differently: {'; '.join(parts)}. A stack has one version lock shared "
                "by every pool",
                fix))
    return out


def _format_problems(r: _Resolved) -> list[ConfigProblem]:
    out = []
    host = r.host
    for entry, var in ENTRY_VARS.items():
        value = r.entries[entry]
        if var not in host.values or matches_format(entry, value or ""):
            continue
        example = FORMATS[entry][1]
        out.append(ConfigProblem(host.origins.get(var, var), var, host.values[var],
                                 f"not a valid {entry} version (expected e.g. {example})",
                                 f"correct {var}, quoting it as a string in YAML"))
    for var, value, allowed in ((CUDA_COMPAT_VAR, r.compat, _COMPAT),
                                (DRIVER_MANAGER_VAR, r.driver_manager, _MANAGERS),
                                (TOOLKIT_MANAGER_VAR, r.toolkit_manager, _MANAGERS)):
        if value not in allowed:
            out.append(ConfigProblem(host.origins.get(var, var), var, value, "not an allowed value",
                                     f"set {var} to one of: {', '.join(allowed)}"))
    return out


def _pools(group: Sequence[_Resolved]) -> tuple[list[NodePool], dict[str, HostSettings]]:
    """The pools of a group of hosts, as far as the inventory tells (pool name, GPU model, power limit)."""
    pools: dict[tuple[str, str | None, str | None], list[HostSettings]] = {}
    for r in group:
        h = r.host
        pool_name = h.text(POOL_VAR)
        settings = h.values.get(POOLS_VAR)
        pool_cfg = settings.get(pool_name) if isinstance(settings, Mapping) and pool_name else None
        gpu = _text(pool_cfg.get("gpu")) if isinstance(pool_cfg, Mapping) else None
        if pool_name is None or gpu is None:
            continue
        power = h.text(POWER_VAR) or None
        pools.setdefault((pool_name, gpu, power), []).append(h)
    out: list[NodePool] = []
    first: dict[str, HostSettings] = {}
    for (name, gpu, power), hosts in pools.items():
        # Hosts of one pool with different power limits (host_vars) become pools of their own.
        label = name if name not in first else f"{name} ({_hosts_text([h.name for h in hosts])})"
        first[label] = hosts[0]
        out.append(NodePool.model_construct(name=label, role="gpu", gpu=gpu, count=len(hosts),
                                            power_limit=power))
    return out, first


def _check_group(group: Sequence[_Resolved]) -> list[ConfigProblem]:
    r = group[0]
    problems = _format_problems(r)
    if problems:
        return problems
    pools, pool_hosts = _pools(group)
    fm_required = (any(p.gpu in GPUS and GPUS[p.gpu].nvswitch for p in pools)
                   or _truthy(r.host.values.get(FABRIC_MANAGER_REQUIRED_VAR, False)))
    try:
        lock = Lock.model_validate({
            **r.entries,
            "stack": "",
            "profile": r.profile,
            "driver_branch": driver_branch(str(r.entries["driver"])),
            "driver_managed_by": r.driver_manager,
            "toolkit_managed_by": r.toolkit_manager,
            "cuda_compat": r.compat,
            "fabric_manager_required": fm_required,
        })
    except ValidationError as e:  # pragma: no cover - formats are checked above
        return [ConfigProblem(r.host.name, "-", None, f"invalid lock variables: {e}", "correct them")]
    # Not validated: pool names come from the inventory, and only what the rules read is filled in.
    spec = ClusterSpec.model_construct(
        stack="", backend="existing", cluster_name="", pools=pools, extra={},
        lock=LockConfig.model_construct(profile=r.profile, versions={}, cuda_compat=lock.cuda_compat))
    return run_rules(AnsibleRuleContext(spec, lock, r.host, r.overridden, pool_hosts))


def check_hosts(hosts: Sequence[HostSettings]) -> list[ConfigProblem]:
    """Every problem of the lock the hosts' variables describe; empty when valid and without skew."""
    problems: list[ConfigProblem] = []
    resolved = [r for h in hosts if (r := _resolve_host(h, problems)) is not None]
    problems.extend(_skew(resolved))
    groups: dict[tuple[Any, ...], list[_Resolved]] = {}
    for r in resolved:
        groups.setdefault(r.signature(), []).append(r)
    for group in groups.values():
        problems.extend(_check_group(group))
    unique: dict[str, ConfigProblem] = {}
    for p in problems:
        unique.setdefault(str(p), p)
    return list(unique.values())


def report(problems: Sequence[ConfigProblem], hosts: Sequence[HostSettings]) -> str:
    """The message the plugin fails with (or, when valid, its one-line summary)."""
    names = _hosts_text([h.name for h in hosts])
    if problems:
        lines = [f"{len(problems)} problem(s) in the version lock of the inventory (hosts {names}):"]
        lines += [f"- {p}" for p in problems]
        return "\n".join(lines)
    if not hosts:
        return "no hosts to check"
    r = _resolve_host(hosts[0], [])
    if r is None:
        return f"unknown profile on {hosts[0].name}"
    return (f"version lock valid on {len(hosts)} host(s) ({names}): profile {r.profile}, "
            f"driver {r.entries['driver']}, CUDA {r.entries['cuda']}")

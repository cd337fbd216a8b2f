"""Profile + stack overrides -> Lock, checked by every rule before anything is touched."""

from __future__ import annotations

from pathlib import Path

from gpufleet.catalog import GPUS
from gpufleet.errors import ConfigError, ConfigProblem
from gpufleet.lock.model import FOLLOW_DRIVER, VERSION_KEYS, Lock, Manager
from gpufleet.lock.profiles import PROFILES
from gpufleet.lock.rules import check_lock
from gpufleet.lock.versions import FORMATS, driver_branch, matches_format
from gpufleet.spec import ClusterSpec, load_spec
from gpufleet.spec import stack_file as spec_stack_file


def _manager(spec: ClusterSpec) -> Manager:
    # The operator's driver and toolkit components are cluster-wide switches: on as soon as one pool needs
    # them. Per-pool scoping is the platform layer's job (one NVIDIADriver per operator-managed pool).
    if any(p.host_management == "operator" for p in spec.gpu_pools):
        return "operator"
    # Google's COS driver installer (rule gke-driver keeps it apart from operator pools).
    if any(p.host_management == "gke" for p in spec.gpu_pools):
        return "gke"
    return "host"


def resolve_lock(spec: ClusterSpec, stack_file: Path | None = None) -> Lock:
    """The stack's lock: its profile with its overrides applied, valid under every rule.

    Raises ConfigError listing every problem (unknown profile or entry, malformed version, broken rule).
    """
    file = str(stack_file or spec_stack_file(spec.stack))
    problems: list[ConfigProblem] = []
    profile = PROFILES.get(spec.lock.profile)
    if profile is None:
        problems.append(ConfigProblem(file, "gpufleet:lock.profile", spec.lock.profile, "unknown profile",
                                      f"use one of: {', '.join(sorted(PROFILES))}"))
    values: dict[str, str | None] = profile.versions() if profile else {}
    applied: dict[str, str] = {}
    for key, value in spec.lock.versions.items():
        if key not in VERSION_KEYS:
            problems.append(ConfigProblem(file, f"gpufleet:lock.versions.{key}", value, "unknown lock entry",
                                          f"use one of: {', '.join(VERSION_KEYS)}"))
        elif not matches_format(key, str(value)):
            example = FORMATS[key][1]
            fallback = f" to use the profile's {values[key]}" if values.get(key) else ""
            rule = f"not a valid {key} version (expected e.g. {example})"
            fix = f"correct gpufleet:lock.versions.{key} or remove the override{fallback}"
            problems.append(ConfigProblem(file, f"gpufleet:lock.versions.{key}", value, rule, fix))
        else:
            applied[key] = str(value)
    if profile is None:
        raise ConfigError(problems, kind="version lock problem")
    values.update(applied)
    for key in FOLLOW_DRIVER:
        if key not in applied:
            values[key] = values["driver"]
    if values.get("kernel") == "":
        values["kernel"] = None
    manager = _manager(spec)
    lock = Lock.model_validate({
        **values,
        "stack": spec.stack,
        "profile": profile.name,
        "driver_branch": driver_branch(str(values["driver"])),
        "driver_managed_by": manager,
        # Next to Google's driver the GPU Operator installs the toolkit (NVIDIA's "Google driver installer" mode).
        "toolkit_managed_by": "operator" if manager == "gke" else manager,
        "cuda_compat": spec.lock.cuda_compat,
        "fabric_manager_required": any(p.gpu in GPUS and GPUS[p.gpu].nvswitch for p in spec.gpu_pools),
    })
    problems.extend(check_lock(spec, lock, file))
    if problems:
        raise ConfigError(problems, kind="version lock problem")
    return lock


def load_lock(stack: str) -> tuple[ClusterSpec, Lock]:
    """Load a stack (name under stacks/ or a path), resolve and check its lock; ConfigError on any problem."""
    spec = load_spec(stack)
    return spec, resolve_lock(spec, spec_stack_file(stack))

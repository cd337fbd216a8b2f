"""The version lock: profiles, stack overrides, compatibility rules, rendering.

One lock per stack (``gpufleet:lock`` in ``stacks/Pulumi.<stack>.yaml``) pins the whole NVIDIA stack;
every pool uses it, so pools cannot skew. See docs/version-lock.md.
"""

from __future__ import annotations

from gpufleet.lock.model import VERSION_KEYS, Lock
from gpufleet.lock.packages import (
    container_toolkit_packages,
    cuda_packages,
    cudnn_packages,
    dcgm_packages,
    driver_packages,
    fabric_manager_packages,
    host_packages,
    nccl_packages,
)
from gpufleet.lock.profiles import PROFILES, Profile
from gpufleet.lock.render import (
    pool_driver,
    render_ansible_vars,
    render_gpu_operator_release,
    render_gpu_operator_values,
    write_group_vars,
)
from gpufleet.lock.resolve import load_lock, resolve_lock
from gpufleet.lock.rules import RULES, check_lock, check_operator_values

__all__ = [
    "PROFILES",
    "RULES",
    "VERSION_KEYS",
    "Lock",
    "Profile",
    "check_lock",
    "check_operator_values",
    "container_toolkit_packages",
    "cuda_packages",
    "cudnn_packages",
    "dcgm_packages",
    "driver_packages",
    "fabric_manager_packages",
    "host_packages",
    "load_lock",
    "nccl_packages",
    "pool_driver",
    "render_ansible_vars",
    "render_gpu_operator_release",
    "render_gpu_operator_values",
    "resolve_lock",
    "write_group_vars",
]

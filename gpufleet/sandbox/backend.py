"""The local sandbox as a backend: how many nodes it runs, their inventory hosts, the variables its nodes need.

What Pulumi's stack outputs are to the other backends, the sandbox's containers are to the local stack: ``gpufleet
up`` sizes the sandbox from the stack file (and ``--gpu-nodes``), every other command reads the size of the sandbox
that runs. Either way the command resolves its stack once (``gpufleet.workflow.resolve_stack``) and passes it down.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gpufleet import REPO_ROOT
from gpufleet.errors import ConfigError, ConfigProblem
from gpufleet.spec import ClusterSpec, Host

#: The one file holding the settings that point roles at a sandbox node's stand-ins (fixture repository,
#: simulator paths, what an unprivileged container cannot do): Molecule's shared config, whose
#: ``provisioner.inventory.group_vars.all`` every scenario gets. The sandbox reads the same mapping.
NODE_VARS_FILE = REPO_ROOT / "molecule" / "shared" / "base.yml"

#: Choices of the sandbox cluster itself, not facts of its nodes (Molecule scenarios choose for themselves).
CLUSTER_VARS: dict[str, Any] = {
    # Real Slurm runs in the sandbox.
    "gpufleet_scheduler": "slurm",
    # An HGX node's CPU count (config_overrides lets a container declare it): one nccl-tests task per GPU fits.
    "slurm_node_cpus": 16,
}

#: Memory budget per node. A converged GPU node (systemd, slurmd, the simulator's daemons) holds about 31 MiB
#: (docker stats after `gpufleet up --gpu-nodes 3`); the budget leaves room for a converge's apt and modules.
NODE_MEMORY_MIB = 256


def node_vars(path: Path = NODE_VARS_FILE) -> dict[str, Any]:
    """The group_vars ``all`` that Molecule's shared config gives every scenario's nodes."""
    data = yaml.safe_load(path.read_text())
    found = data.get("provisioner", {}).get("inventory", {}).get("group_vars", {}).get("all")
    if not isinstance(found, dict) or not found:
        raise ValueError(f"{path}: provisioner.inventory.group_vars.all is missing; the sandbox's node "
                         "variables live there")
    return found


def sandbox_vars() -> dict[str, Any]:
    """``group_vars/all/sandbox.yml`` of the local stack's inventory."""
    return {**node_vars(), **CLUSTER_VARS, **fixture_repo_key_vars()}


def fixture_repo_key_vars() -> dict[str, str]:
    """The fixture repository's signing key fingerprint (a throwaway key per cold build) as its builder recorded it:
    the sandbox's nvidia_repo role checks the served key against it instead of NVIDIA's. (Molecule reads the same
    record through the lookup in molecule/shared/base.yml; here the value itself is written.)"""
    from gpufleet.sandbox.cluster import FIXTURE_REPO_DIR

    try:
        stamp = json.loads((FIXTURE_REPO_DIR / ".stamp").read_text())
    except (OSError, ValueError):
        return {}
    fingerprint = stamp.get("fingerprint") if isinstance(stamp, dict) else None
    return {"nvidia_repo_key_fingerprint": fingerprint} if isinstance(fingerprint, str) else {}


def machine_capacity(meminfo: Path = Path("/proc/meminfo")) -> int:
    """How many sandbox nodes this machine holds: its memory over a node's budget."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 // NODE_MEMORY_MIB
    return os.cpu_count() or 1


def size_pools(spec: ClusterSpec, file: Path, *, gpu_nodes: int | None = None,
               running: Mapping[str, int] | None = None, capacity: int | None = None) -> ClusterSpec:
    """``spec`` with the sandbox's pool sizes: ``gpu_nodes`` for its (first) GPU pool when ``gpufleet up`` was
    given one, else the node counts of the ``running`` sandbox (pool -> containers) where it runs."""
    sizes = dict(running or {})
    if gpu_nodes is not None:
        if not spec.gpu_pools:
            raise ConfigError([ConfigProblem(str(file), "--gpu-nodes", gpu_nodes, "the stack has no GPU pool",
                                             "add a pool with role: gpu, or drop --gpu-nodes")])
        gpu_pool = spec.gpu_pools[0]
        others = sum(p.size for p in spec.pools if p is not gpu_pool)
        limit = (machine_capacity() if capacity is None else capacity) - others
        if not 1 <= gpu_nodes <= limit:
            raise ConfigError([ConfigProblem(
                str(file), "--gpu-nodes", gpu_nodes,
                f"the sandbox runs 1 to {limit} GPU nodes on this machine ({NODE_MEMORY_MIB} MiB per node, "
                f"{others} other node{'s' if others != 1 else ''})",
                f"pass --gpu-nodes between 1 and {limit}")])
        sizes = {gpu_pool.name: gpu_nodes}
    if not sizes:
        return spec
    pools = [p.model_copy(update={"count": sizes[p.name], "min": None, "max": None}) if p.name in sizes else p
             for p in spec.pools]
    return spec.model_copy(update={"pools": pools})


def running_pool_sizes(stack: str) -> dict[str, int]:
    """Pool -> number of the stack's sandbox containers (stopped ones count: ``up`` starts them again)."""
    from gpufleet.sandbox.cluster import existing_pools

    sizes: dict[str, int] = {}
    for pool in existing_pools(stack):
        sizes[pool] = sizes.get(pool, 0) + 1
    return sizes


def sandbox_hosts(spec: ClusterSpec) -> dict[str, list[Host]]:
    """The inventory hosts of the sandbox's nodes: pool -> hostnames reached through ``docker exec``."""
    from gpufleet.sandbox.cluster import planned_nodes

    hosts: dict[str, list[Host]] = {p.name: [] for p in spec.pools}
    for node in planned_nodes(spec):
        hosts[node.pool].append(Host(name=node.hostname, address=node.container, connection="docker"))
    return hosts


def write_sandbox_inventory(spec: ClusterSpec, lock: Any, out: Path) -> Path:
    """The local stack's inventory under ``out``: the sandbox's hosts, the lock, the sandbox's variables."""
    from gpufleet.inventory import write_inventory

    path = write_inventory(spec, lock, sandbox_hosts(spec), out)
    vars_file = out / "group_vars" / "all" / "sandbox.yml"
    vars_file.parent.mkdir(parents=True, exist_ok=True)
    source = NODE_VARS_FILE.relative_to(REPO_ROOT)
    vars_file.write_text(f"---\n# Generated by gpufleet for the local sandbox from {source} (node variables, shared "
                         "with Molecule) and gpufleet.sandbox.backend (cluster choices): do not edit.\n"
                         + yaml.safe_dump(sandbox_vars(), sort_keys=True))
    return path

"""The user-level workflows behind ``gpufleet up | down | status | converge``.

Each one checks the stack's lock first, so a bad setting stops the run before any host is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import RunResult, run_playbook
from gpufleet.errors import ConfigError, ConfigProblem, InputError
from gpufleet.inventory import inventory_dir
from gpufleet.lock import Lock, resolve_lock
from gpufleet.spec import ClusterSpec, load_spec, stack_file

SITE = REPO_ROOT / "ansible" / "site.yml"


@dataclass(frozen=True)
class ResolvedStack:
    """One stack as a command sees it, resolved once (:func:`resolve_stack`) and passed down: the spec with the
    command's overrides, its checked lock, and the inventory those two give."""

    spec: ClusterSpec
    lock: Lock
    #: The stack file, named by every problem.
    file: Path

    @property
    def name(self) -> str:
        return self.spec.stack

    @cached_property
    def inventory(self) -> Path:
        """``inventories/<stack>/hosts.yml``: the sandbox's is written (once per command) from this spec and lock,
        another backend's must have been written by ``gpufleet up`` from the stack's outputs."""
        out = inventory_dir(self.spec.stack)
        if self.spec.backend == "local":
            from gpufleet.sandbox.backend import write_sandbox_inventory

            return write_sandbox_inventory(self.spec, self.lock, out)
        hosts = out / "hosts.yml"
        if not hosts.exists():
            raise InputError.one(str(hosts), "the stack's inventory does not exist",
                                 f"run `gpufleet up --stack {self.spec.stack}` first (it writes the inventory from "
                                 "the stack's outputs)", kind="missing inventory")
        # The hosts are the stack's outputs (written by `gpufleet up`); the vars are this command's spec and lock,
        # re-rendered now: a lock or stack file edited since `up` reaches the hosts, and the lock digest the first
        # play checks is the current lock's.
        from gpufleet.inventory.writer import write_inventory_vars

        write_inventory_vars(self.spec, self.lock, out)
        return hosts


def resolve_stack(stack: str, *, up: bool = False, gpu_nodes: int | None = None) -> ResolvedStack:
    """Load ``stack`` (a name under stacks/ or a path), size it and resolve and check its lock: once per command.

    ``up``: the command creates the cluster, so the stack file (and ``gpu_nodes``) decide the sandbox's size;
    otherwise the sandbox that runs does. ConfigError, before anything is touched, on any problem.
    """
    file = stack_file(stack)
    spec = load_spec(stack)
    if spec.backend == "local":
        from gpufleet.sandbox.backend import running_pool_sizes, size_pools

        spec = size_pools(spec, file, gpu_nodes=gpu_nodes, running=None if up else running_pool_sizes(spec.stack))
    elif gpu_nodes is not None:
        raise ConfigError([ConfigProblem(str(file), "--gpu-nodes", gpu_nodes,
                                         f"only the local sandbox takes it (this stack's backend is {spec.backend})",
                                         "set the GPU pool's count in the stack file and run `gpufleet up`")])
    return ResolvedStack(spec, resolve_lock(spec, file), file)


def converge(stack: ResolvedStack, *, limit: str | None = None, check: bool = False, diff: bool = False,
             console: Console | None = None, live: bool = True) -> RunResult:
    return run_playbook(SITE, stack.inventory, limit=limit, check=check, diff=diff, console=console, live=live)


@dataclass
class NodeReport:
    host: str
    pool: str
    running: bool
    gpus: int | None = None
    driver: str | None = None
    persistence: list[bool] = field(default_factory=list)
    power_limits_w: list[float | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "running": self.running, "gpus": self.gpus,
                "driver": self.driver, "persistence": self.persistence, "power_limits_w": self.power_limits_w,
                "problems": self.problems, "ok": not self.problems}


def sandbox_report(stack: ResolvedStack) -> list[NodeReport]:
    """Read each node's GPUs through the simulator's ``nvidia-smi -q -x`` and compare with the lock."""
    from gpufleet.catalog import get_gpu
    from gpufleet.parsers.smi_xml import parse_smi_xml
    from gpufleet.sandbox.cluster import node_exec, planned_nodes, status

    spec, lock = stack.spec, stack.lock
    states = {s.node.container: s for s in status(spec)}
    pools = {p.name: p for p in spec.pools}
    reports = []
    for node in planned_nodes(spec):
        rep = NodeReport(node.hostname, node.pool, states[node.container].running)
        reports.append(rep)
        if not rep.running:
            rep.problems.append("container not running")
            continue
        pool = pools[node.pool]
        if pool.role != "gpu" or pool.gpu is None:
            continue
        r = node_exec(node.container, "nvidia-smi", "-q", "-x")
        if r.returncode != 0:
            rep.problems.append(f"nvidia-smi failed ({r.returncode}): {(r.stdout + r.stderr).strip()[:200]}")
            continue
        smi = parse_smi_xml(r.stdout)
        model = get_gpu(pool.gpu)
        rep.gpus = len(smi.gpus)
        rep.driver = smi.driver_version
        rep.persistence = [bool(g.persistence_mode) for g in smi.gpus]
        rep.power_limits_w = [g.power_limit_w for g in smi.gpus]
        if rep.gpus != model.gpus_per_node:
            rep.problems.append(f"{rep.gpus} GPUs, expected {model.gpus_per_node}")
        if rep.driver != lock.driver:
            rep.problems.append(f"driver {rep.driver}, locked {lock.driver}")
        if not all(rep.persistence):
            rep.problems.append("persistence mode off on some GPUs")
    return reports

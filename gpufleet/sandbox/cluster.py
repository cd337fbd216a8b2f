"""The local sandbox cluster: systemd containers standing in for one control node and N simulated GPU nodes.

Nodes run on Docker's default bridge. There is no name lookup between containers there, so every node's
``/etc/hosts`` lists all nodes, rewritten after each start (Slurm needs it). The fixture NVIDIA repository is
bind-mounted read-only at ``/srv/gpufleet-repo``; the GPU simulator reaches a node only through its packages.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet import REPO_ROOT
from gpufleet.sandbox.engine import docker_bin
from gpufleet.spec import ClusterSpec

FIXTURE_REPO_DIR = REPO_ROOT / ".cache" / "fixture-repo"
REPO_MOUNT = "/srv/gpufleet-repo"
LABEL = "gpufleet.stack"


@dataclass(frozen=True)
class Node:
    container: str
    hostname: str
    pool: str
    role: str  # system | gpu


@dataclass(frozen=True)
class NodeState:
    node: Node
    running: bool
    address: str | None


def planned_nodes(spec: ClusterSpec) -> list[Node]:
    """Containers the sandbox runs: the system pool(s) as control nodes, GPU pools as simulated GPU nodes."""
    nodes: list[Node] = []
    for pool in spec.pools:
        count = pool.size
        prefix = "control" if pool.role == "system" else pool.name
        for i in range(count):
            host = f"{prefix}-{i}"
            nodes.append(Node(f"gpufleet-{spec.stack}-{host}", host, pool.name, pool.role))
    return nodes


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([docker_bin(), *args], check=check, capture_output=True, text=True)


def inspect(node: Node) -> NodeState:
    r = _docker("inspect", node.container, check=False)
    if r.returncode != 0:
        return NodeState(node, False, None)
    info = json.loads(r.stdout)[0]
    running = bool(info["State"]["Running"])
    address = info["NetworkSettings"].get("IPAddress") or None
    return NodeState(node, running, address)


def start_node(spec: ClusterSpec, node: Node, image: str) -> bool:
    """Create or start one node. Returns True when something changed."""
    if inspect(node).running:
        return False
    if _docker("inspect", node.container, check=False).returncode != 0:
        _docker(
            "run", "-d", "--name", node.container, "--hostname", node.hostname,
            "--label", f"{LABEL}={spec.stack}", "--label", f"gpufleet.pool={node.pool}",
            "--label", f"gpufleet.role={node.role}",
            "--tmpfs", "/run", "--tmpfs", "/run/lock",
            "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "-v", f"{FIXTURE_REPO_DIR}:{REPO_MOUNT}:ro",
            image, "/lib/systemd/systemd",
        )
    else:
        _docker("start", node.container)
    return True


def wait_for_systemd(node: Node, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = _docker("exec", node.container, "systemctl", "is-system-running", check=False)
        if r.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{node.container}: systemd did not come up within {timeout:.0f}s")


def prepare_node(spec: ClusterSpec, node: Node, hosts_lines: str) -> None:
    """Per-start plumbing that a restart resets: /etc/hosts, board selection, GPU device nodes."""
    script = f"cat > /etc/hosts <<'EOF'\n127.0.0.1 localhost\n{hosts_lines}EOF\n"
    if node.role == "gpu":
        script += f"mkdir -p /etc/gpusim && echo {spec.sandbox.board} > /etc/gpusim/board\n"
    _docker("exec", node.container, "sh", "-c", script)


def up(spec: ClusterSpec, image: str) -> list[NodeState]:
    """Make the stack's containers the planned ones: start what is missing, remove what the plan no longer
    has (``gpufleet up --gpu-nodes 2`` after 3), then rewrite every node's /etc/hosts."""
    nodes = planned_nodes(spec)
    planned = {n.container for n in nodes}
    extra = [name for name in existing_containers(spec.stack) if name not in planned]
    if extra:
        _docker("rm", "-f", *extra)
    for node in nodes:
        if start_node(spec, node, image):
            wait_for_systemd(node)
    states = [inspect(n) for n in nodes]
    hosts_lines = "".join(f"{s.address} {s.node.hostname}\n" for s in states if s.address)
    for s in states:
        prepare_node(spec, s.node, hosts_lines)
    return states


def existing_containers(stack: str) -> list[str]:
    r = _docker("ps", "-a", "--filter", f"label={LABEL}={stack}", "--format", "{{.Names}}", check=False)
    return sorted(line for line in r.stdout.split() if line)


def existing_pools(stack: str) -> list[str]:
    """The pool of each of the stack's containers (running or not); none when Docker does not answer."""
    try:
        r = _docker("ps", "-a", "--filter", f"label={LABEL}={stack}", "--format", '{{.Label "gpufleet.pool"}}',
                    check=False)
    except FileNotFoundError:
        return []
    return [line for line in r.stdout.split() if line] if r.returncode == 0 else []


def down(stack: str) -> list[str]:
    names = existing_containers(stack)
    if names:
        _docker("rm", "-f", *names)
    return names


def status(spec: ClusterSpec) -> list[NodeState]:
    return [inspect(n) for n in planned_nodes(spec)]


def node_exec(container: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return _docker("exec", container, *cmd, check=False)


def repo_dir() -> Path:
    return FIXTURE_REPO_DIR

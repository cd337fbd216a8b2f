"""One resolved stack per command: the spec the CLI sized is the one the inventory, converge and report use.

``gpufleet up --stack local --gpu-nodes N`` used to start N GPU containers and then write the stack file's count
into the inventory (converge re-read the stack by name). These tests run the real CLI with the parts that touch
Docker or hosts replaced, and read the inventory the playbook was given.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import RunResult
from gpufleet.cli import app
from gpufleet.inputs import load_yaml
from gpufleet.sandbox import backend
from gpufleet.sandbox.cluster import NodeState, planned_nodes
from gpufleet.spec import ClusterSpec

runner = CliRunner()
LOCAL = REPO_ROOT / "stacks" / "Pulumi.local.yaml"


class Sandbox:
    """Stands in for Docker and Ansible; records what each command resolved and ran against."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.started: list[str] = []
        self.inventories: list[dict[str, Any]] = []
        self.resolutions = 0

    def cluster_up(self, spec: ClusterSpec, image: str) -> list[NodeState]:
        nodes = planned_nodes(spec)
        self.started = [n.container for n in nodes]
        self.running = {}
        for n in nodes:
            self.running[n.pool] = self.running.get(n.pool, 0) + 1
        return [NodeState(n, True, None) for n in nodes]

    def run_playbook(self, playbook: Path, inventory: Path, **_: Any) -> RunResult:
        # Inventories tag stack values !unsafe: read them as Ansible does, with gpufleet's loader.
        self.inventories.append(load_yaml(inventory))
        return RunResult(rc=0)


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Sandbox:
    import gpufleet.inventory.writer
    import gpufleet.sandbox.platform
    import gpufleet.workflow
    from gpufleet.sandbox import cluster
    from gpufleet.sandbox.platform import Platform

    s = Sandbox()
    real_resolve = gpufleet.workflow.resolve_lock

    def counting_resolve(*args: Any, **kwargs: Any) -> Any:
        s.resolutions += 1
        return real_resolve(*args, **kwargs)

    monkeypatch.setattr(gpufleet.inventory.writer, "INVENTORIES_DIR", tmp_path / "inventories")
    monkeypatch.setattr(gpufleet.workflow, "resolve_lock", counting_resolve)
    monkeypatch.setattr(gpufleet.workflow, "run_playbook", s.run_playbook)
    monkeypatch.setattr(gpufleet.sandbox.platform, "prepare", lambda log=True: Platform(False, "node:test"))
    monkeypatch.setattr(cluster, "up", s.cluster_up)
    monkeypatch.setattr(backend, "running_pool_sizes", lambda stack: dict(s.running))
    monkeypatch.setattr(backend, "machine_capacity", lambda meminfo=None: 64)
    monkeypatch.setattr("gpufleet.cli.cluster.sandbox_report", lambda resolved: [])
    return s


def gpu_hosts(inventory: dict[str, Any]) -> list[str]:
    return list(inventory["all"]["children"]["gpu"]["hosts"])


@pytest.mark.parametrize("n", [3, 16])
def test_up_with_gpu_nodes_converges_the_nodes_it_started(sandbox: Sandbox, n: int) -> None:
    r = runner.invoke(app, ["up", "--stack", "local", "--gpu-nodes", str(n)])
    assert r.exit_code == 0, r.output
    assert [c for c in sandbox.started if "-gpu-" in c] == [f"gpufleet-local-gpu-{i}" for i in range(n)]
    (inventory,) = sandbox.inventories
    assert gpu_hosts(inventory) == [f"gpu-{i}" for i in range(n)]
    assert list(inventory["all"]["children"]["pool_gpu"]["hosts"]) == [f"gpu-{i}" for i in range(n)]
    assert sandbox.resolutions == 1


def test_later_commands_see_the_sandbox_that_runs(sandbox: Sandbox) -> None:
    assert runner.invoke(app, ["up", "--stack", "local", "--gpu-nodes", "3"]).exit_code == 0
    r = runner.invoke(app, ["converge", "--stack", "local"])
    assert r.exit_code == 0, r.output
    assert gpu_hosts(sandbox.inventories[-1]) == ["gpu-0", "gpu-1", "gpu-2"]
    # A plain `up` sizes it from the stack file again (cluster.up removes the third container).
    assert runner.invoke(app, ["up", "--stack", "local"]).exit_code == 0
    assert gpu_hosts(sandbox.inventories[-1]) == ["gpu-0", "gpu-1"]
    assert sandbox.resolutions == 3


@pytest.mark.parametrize(("n", "rule"), [
    (0, "the sandbox runs 1 to 63 GPU nodes on this machine (256 MiB per node, 1 other node)"),
    (64, "the sandbox runs 1 to 63 GPU nodes on this machine (256 MiB per node, 1 other node)"),
])
def test_gpu_nodes_beyond_the_machine_is_a_config_error(sandbox: Sandbox, n: int, rule: str) -> None:
    r = runner.invoke(app, ["up", "--stack", "local", "--gpu-nodes", str(n)])
    assert r.exit_code == 1
    assert f"- {LOCAL}: --gpu-nodes = {n}: {rule}. Fix: pass --gpu-nodes between 1 and 63" in r.output
    assert sandbox.started == [] and sandbox.inventories == []


def test_gpu_nodes_is_for_the_sandbox_only(sandbox: Sandbox) -> None:
    r = runner.invoke(app, ["up", "--stack", "onprem-h100", "--gpu-nodes", "3"])
    assert r.exit_code == 1
    assert "--gpu-nodes = 3: only the local sandbox takes it (this stack's backend is existing)" in r.output


def test_machine_capacity_reads_total_memory(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684000 kB\nMemFree:         1000000 kB\n")
    assert backend.machine_capacity(meminfo) == 24684000 // 1024 // backend.NODE_MEMORY_MIB


# --- one copy of each sandbox fact ------------------------------------------------------------------

def test_the_sandbox_reads_molecules_node_vars(sandbox: Sandbox, tmp_path: Path) -> None:
    assert runner.invoke(app, ["converge", "--stack", "local"]).exit_code == 0
    written = yaml.safe_load((tmp_path / "inventories/local/group_vars/all/sandbox.yml").read_text())
    base = yaml.safe_load((REPO_ROOT / "molecule" / "shared" / "base.yml").read_text())
    node_vars = base["provisioner"]["inventory"]["group_vars"]["all"]
    # The fixture repository's key fingerprint is the value its builder recorded (molecule reads it by lookup).
    assert written == {**node_vars, **backend.CLUSTER_VARS, **backend.fixture_repo_key_vars()}
    assert {"nvidia_repo_base_url", "node_validation_kernel_log_file", "slurm_task_plugin"} <= set(node_vars)


def test_no_scenario_repeats_a_node_var() -> None:
    node_vars = backend.node_vars()
    repeats = []
    for path in sorted((REPO_ROOT / "molecule").glob("*/molecule.yml")):
        groups = (yaml.safe_load(path.read_text()).get("provisioner") or {}).get("inventory", {}).get("group_vars", {})
        for group, values in groups.items():
            repeats += [f"{path.parent.name}: {group}.{k}" for k, v in (values or {}).items()
                        if node_vars.get(k) == v]
    assert repeats == []


def test_inventory_dir_is_defined_once() -> None:
    defs = [f"{p.relative_to(REPO_ROOT)}" for p in sorted((REPO_ROOT / "gpufleet").rglob("*.py"))
            for node in ast.walk(ast.parse(p.read_bytes()))
            if isinstance(node, ast.FunctionDef) and node.name == "inventory_dir"]
    assert defs == ["gpufleet/inventory/writer.py"]

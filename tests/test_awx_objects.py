"""The AWX/AAP objects as code and the execution environment, checked offline.

* ``ansible/awx/gpufleet_awx.yml``: every ``awx.awx`` task's arguments exist in the pinned collection's argument
  specs (each module's DOCUMENTATION and its doc fragments), choices are among the documented ones, and nested
  options (``workflow_nodes``) too; ``ansible-playbook --syntax-check`` accepts the playbook.
* ``ansible/execution-environment.yml``: ``ansible-builder create`` writes its build context; the pins in it are the
  lock files' (one home for each version).
* ``ansible/awx/sizing.yml`` is what the scale model writes for 1,000 nodes.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.bench import scale_model as sm
from gpufleet.cli import app

AWX = REPO_ROOT / ".collections" / "ansible_collections" / "awx" / "awx"
PLAYBOOK = REPO_ROOT / "ansible" / "awx" / "gpufleet_awx.yml"
EE = REPO_ROOT / "ansible" / "execution-environment.yml"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(not AWX.is_dir(), reason="collections not extracted (make test does it)")


def _doc(path: Path) -> dict[str, Any]:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return dict(yaml.safe_load(ast.literal_eval(node.value)))
    raise AssertionError(f"{path} has no DOCUMENTATION")


def _fragment_options(name: str) -> dict[str, Any]:
    # "awx.awx.auth" -> plugins/doc_fragments/auth.py, class ModuleDocFragment, DOCUMENTATION
    module = name.split(".")[-1]
    tree = ast.parse((AWX / "plugins" / "doc_fragments" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return dict(yaml.safe_load(ast.literal_eval(node.value)).get("options", {}))
    raise AssertionError(f"fragment {name} has no DOCUMENTATION")


def argument_spec(module: str) -> dict[str, Any]:
    doc = _doc(AWX / "plugins" / "modules" / f"{module}.py")
    options = dict(doc.get("options", {}))
    fragments = doc.get("extends_documentation_fragment") or []
    for frag in [fragments] if isinstance(fragments, str) else fragments:
        options.update(_fragment_options(frag))
    return options


def _aliases(spec: dict[str, Any]) -> dict[str, str]:
    out = {k: k for k in spec}
    for k, v in spec.items():
        for a in (v or {}).get("aliases", []) or []:
            out[a] = k
    return out


def check_args(args: dict[str, Any], spec: dict[str, Any], where: str) -> list[str]:
    """Problems of ``args`` against an argument spec: unknown keys, values outside choices, bad nested options."""
    problems: list[str] = []
    names = _aliases(spec)
    for key, value in args.items():
        if key not in names:
            problems.append(f"{where}: unknown option {key!r}")
            continue
        opt = spec[names[key]] or {}
        choices = opt.get("choices")
        templated = isinstance(value, str) and "{{" in value
        if choices and not templated and value not in choices:
            problems.append(f"{where}.{key}: {value!r} not in {choices}")
        sub = opt.get("suboptions")
        if sub:
            items = value if opt.get("type") == "list" and isinstance(value, list) else [value]
            for n, item in enumerate(items):
                if isinstance(item, dict):
                    problems += check_args(item, sub, f"{where}.{key}[{n}]")
    return problems


def awx_tasks() -> list[tuple[str, str, dict[str, Any]]]:
    plays = yaml.safe_load(PLAYBOOK.read_text())
    out = []
    for play in plays:
        for task in play["tasks"]:
            module = next(k for k in task if k.startswith("awx.awx."))
            out.append((task["name"], module.removeprefix("awx.awx."), task[module]))
    return out


def test_every_awx_task_matches_the_collections_argument_specs() -> None:
    tasks = awx_tasks()
    assert {m for _, m, _ in tasks} >= {"execution_environment", "project", "inventory", "inventory_source",
                                        "job_template", "schedule", "workflow_job_template"}
    problems: list[str] = []
    for name, module, args in tasks:
        problems += check_args(args, argument_spec(module), f"{name} ({module})")
    assert not problems, "\n".join(problems)


def test_job_templates_loop_items_are_valid_job_types() -> None:
    plays = yaml.safe_load(PLAYBOOK.read_text())
    task = next(t for t in plays[0]["tasks"] if "awx.awx.job_template" in t)
    choices = argument_spec("job_template")["job_type"]["choices"]
    kinds = {i["name"]: i["job_type"] for i in task["loop"]}
    assert kinds == {"gpufleet converge": "run", "gpufleet drift": "check", "gpufleet remediate batch": "run",
                     "gpufleet validate": "run"}
    assert set(kinds.values()) <= set(choices)
    # No job template is sliced by AWX: a slice's inventory holds only its hosts, and site.yml reads the cluster.
    assert task["awx.awx.job_template"]["job_slice_count"] == 1
    assert all("slices" not in i for i in task["loop"])
    for item in task["loop"]:
        assert (REPO_ROOT / item["playbook"]).is_file(), item["playbook"]


def test_a_typo_in_an_awx_task_is_caught() -> None:
    name, module, args = next(t for t in awx_tasks() if t[1] == "job_template")
    assert check_args({**args, "job_slice_cont": 3}, argument_spec(module), name) == [
        f"{name}: unknown option 'job_slice_cont'"]
    assert check_args({**args, "job_type": "dry"}, argument_spec(module), name)
    wf_name, wf_module, wf = next(t for t in awx_tasks()
                                  if t[1] == "workflow_job_template" and "workflow_nodes" in t[2])
    bad = {**wf, "workflow_nodes": [{**wf["workflow_nodes"][0], "sucess_nodes": []}]}
    assert check_args(bad, argument_spec(wf_module), wf_name)


def test_awx_playbook_passes_syntax_check(tmp_path: Path) -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "ANSIBLE_LOCAL_TEMP": str(tmp_path)}
    out = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-e", f"@{PLAYBOOK.parent / 'sizing.yml'}",
                          str(PLAYBOOK)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip()):
            pins[m[1].lower()] = m[2]
    return pins


@pytest.mark.skipif(shutil.which("ansible-builder", path=str(BIN)) is None,
                    reason="ansible-builder is in requirements-awx.lock (make test)")
def test_ansible_builder_creates_the_build_context(tmp_path: Path) -> None:
    ctx = tmp_path / "context"
    out = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(EE), "-c", str(ctx)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    containerfile = next(p for p in (ctx / "Containerfile", ctx / "Dockerfile") if p.exists()).read_text()
    lock, awx = _pins(REPO_ROOT / "requirements.lock"), _pins(REPO_ROOT / "requirements-awx.lock")
    # The image installs the lock's set, ansible-core and ansible-runner at the locks' versions.
    assert (ctx / "_build" / "requirements.txt").read_text() == (REPO_ROOT / "requirements.lock").read_text()
    assert f'ARG ANSIBLE_INSTALL_REFS="ansible-core=={lock["ansible-core"]} ansible-runner=={awx["ansible-runner"]}"' \
        in containerfile
    assert yaml.safe_load((ctx / "_build" / "requirements.yml").read_text()) == \
        yaml.safe_load((REPO_ROOT / "ansible" / "requirements.yml").read_text())
    assert (ctx / "_build" / "configs" / "requirements-awx.lock").read_text() == \
        (REPO_ROOT / "requirements-awx.lock").read_text()
    # The constraint is set in the base stage (before ansible-runner's install) and dropped in the final image.
    assert containerfile.index("ENV PIP_CONSTRAINT=/tmp/gpufleet-constraints.txt") < \
        containerfile.index("pip install --no-cache-dir $ANSIBLE_INSTALL_REFS")
    for line in ("ENV ANSIBLE_CONFIG=/runner/project/ansible/ansible.cfg",
                 "ENV ANSIBLE_COLLECTIONS_PATH=/usr/share/ansible/collections"):
        assert line in containerfile
    assert "openssh-clients [platform:rpm]" in (ctx / "_build" / "bindep.txt").read_text()


def test_pyproject_awx_extra_matches_the_lock() -> None:
    import tomllib

    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["awx"]
    awx = _pins(REPO_ROOT / "requirements-awx.lock")
    assert {e.split("==")[0].lower(): e.split("==")[1] for e in extra} == {
        k: awx[k] for k in ("ansible-runner", "ansible-builder")}
    ee = yaml.safe_load(EE.read_text())["dependencies"]
    assert ee["ansible_runner"]["package_pip"] == f"ansible-runner=={awx['ansible-runner']}"
    core = _pins(REPO_ROOT / "requirements.lock")["ansible-core"]
    assert ee["ansible_core"]["package_pip"] == f"ansible-core=={core}"


def test_committed_sizing_is_the_models(tmp_path: Path) -> None:
    out = tmp_path / "sizing.yml"
    res = CliRunner().invoke(app, ["bench", "scale-model", "--nodes", "1000", "--awx-vars", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert out.read_text() == (PLAYBOOK.parent / "sizing.yml").read_text()
    # Never overwritten.
    again = CliRunner().invoke(app, ["bench", "scale-model", "--nodes", "1000", "--awx-vars", str(out), "--json"])
    assert again.exit_code == 1 and "exists already" in again.stdout


def test_awx_slices_is_the_fewest_that_meets_the_target() -> None:
    op = sm.OpCost("drift", tasks_per_host=25, module_runs_per_host=2, controller_fixed_cpu_s=2.0,
                   controller_cpu_per_host_task_s=0.05, node_cpu_per_host_task_s=0.03)
    fleet = sm.Fleet(nodes=1000, forks=50, controller_cores=8)
    k, p = sm.awx_slices(op, fleet, 60.0)
    assert p.wall_s <= 60.0
    assert k == 1 or sm.predict(op, sm.Fleet(nodes=1000, forks=50, slices=k - 1, controller_cores=8)).wall_s > 60.0
    # Unreachable target: the best count, not a failure.
    k2, p2 = sm.awx_slices(op, fleet, 1.0)
    assert p2.wall_s > 1.0 and 1 <= k2 <= sm.MAX_AWX_SLICES


def _hosts_of(patterns: list[str], hosts: int, tmp_path: Path) -> list[list[str]]:
    """Each pattern's hosts as ansible resolves it over an inventory of ``hosts`` hosts (in-process, no run)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inv_file = tmp_path / f"inv{hosts}.yml"
    inv_file.write_text(yaml.safe_dump({"all": {"children": {
        "control": {"hosts": {"control-0": None}},
        "gpu": {"hosts": {f"gpu-{i}": None for i in range(hosts - 1)}}}}}))
    inv = InventoryManager(loader=DataLoader(), sources=[str(inv_file)])
    return [[h.name for h in inv.get_hosts(p)] for p in patterns]


@pytest.mark.parametrize(("hosts", "k"), [(1, 1), (2, 4), (5, 4), (17, 1), (17, 2), (17, 4), (1000, 5), (1001, 64)])
def test_drift_limits_split_the_inventory_into_k_nonempty_disjoint_parts(hosts: int, k: int, tmp_path: Path) -> None:
    patterns = sm.drift_limits(hosts, k)
    assert len(patterns) == min(hosts, k)
    parts = _hosts_of(patterns, hosts, tmp_path)
    everyone = [h for part in parts for h in part]
    assert all(parts), f"an empty job: {patterns}"
    assert len(everyone) == len(set(everyone)) == hosts
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_drift_limits_last_range_takes_hosts_added_after_sizing(tmp_path: Path) -> None:
    patterns = sm.drift_limits(1000, 5)
    parts = _hosts_of(patterns, 1010, tmp_path)
    assert sum(map(len, parts)) == 1010 and len(parts[-1]) == 210


def test_the_scheduled_drift_is_the_parallel_workflow_of_the_sizings_limits() -> None:
    plays = yaml.safe_load(PLAYBOOK.read_text())
    tasks = plays[0]["tasks"]
    wf = next(t["awx.awx.workflow_job_template"] for t in tasks
              if t.get("awx.awx.workflow_job_template", {}).get("name") == "gpufleet drift (parallel)")
    node_task = next(t for t in tasks if "awx.awx.workflow_job_template_node" in t)
    node = node_task["awx.awx.workflow_job_template_node"]
    assert node["workflow_job_template"] == wf["name"]
    assert node["unified_job_template"] == "gpufleet drift" and node["limit"] == "{{ item }}"
    assert node_task["loop"] == "{{ gpufleet_awx_drift_limits }}"
    schedule = next(t["awx.awx.schedule"] for t in tasks if "awx.awx.schedule" in t)
    assert schedule["unified_job_template"] == wf["name"]
    # The committed sizing's limits are the model's split of its node count.
    sizing = yaml.safe_load((PLAYBOOK.parent / "sizing.yml").read_text())
    header = (PLAYBOOK.parent / "sizing.yml").read_text().splitlines()[1]
    nodes = int(re.search(r"(\d+) nodes", header).group(1))  # type: ignore[union-attr]
    limits = sizing["gpufleet_awx_drift_limits"]
    assert limits == sm.drift_limits(nodes, len(limits)) and len(limits) >= 1
    # The playbook's own default: one job over everything.
    assert plays[0]["vars"]["gpufleet_awx_drift_limits"] == ["all"]

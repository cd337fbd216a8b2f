"""Slices, measured (issue 33 point 4): the AWX drift job over K job slices of the sandbox, against the scale model.

    python -m benchmarks.slices --slices 1,2,4 [--stack local] [--out PATH]

Runs against a sandbox that is already up (``gpufleet up --stack local --gpu-nodes 16``: its inventory
``inventories/<stack>/hosts.yml`` in this checkout); it creates, converges and removes nothing.

For each K (K = 1 always, first): the inventory is cut into K slices as AWX cuts a sliced job's inventory, each slice
gets an ansible-runner private data dir laid out as AWX lays out a job's, and K ``ansible-runner run`` processes run
the ``gpufleet drift`` job template (ansible/awx/gpufleet_awx.yml: its playbook, job type ``check``, diff mode, extra
vars and forks, read from that file) at once. Measured, with benchmarks/scale.py's helpers: wall (first start to last
end) and each slice's wall, controller CPU (rusage of the waited children, cross-checked by a cgroup), node CPU (all
sandbox containers' cgroups, idle background beside it), the container engine's CPU, load. Each slice's job events
must give a drift report (``gpufleet drift --events``'s fold) naming that slice's hosts; the slices' hosts together
must be the K = 1 report's, and their drift items are compared with it too (a playbook that reads other hosts'
variables, e.g. slurm.conf's node list from ``groups``, sees only its slice's hosts in a sliced job).

Before K = 1, one ``ansible-runner run`` of the same job over an inventory with no hosts measures the fixed
controller CPU of a run (start-up, playbook and role parsing). With the K = 1 run it gives the scale model
(gpufleet/bench/scale_model.py) its inputs: controller CPU per host-task = (K = 1 controller CPU - fixed) / host-tasks,
node and engine CPU per host-task, tasks and module runs per GPU node. The model then predicts each K's wall time on
this machine (``Fleet(slices=K, shared_cores=True)``; the K slices share this machine's cores, so each slice's
"execution node" is cores / K, and a slice starts with no execution-environment pod: slice start 0) and, as
``gpufleet bench scale-model`` would, a drift check of 1,000 nodes on one 8-core controller and over 4 slices
(issue 33's goals: 60 s and 20 s).

AWX's rules this relies on (ansible/awx at the versions read, https://github.com/ansible/awx):

* slicing: ``Inventory.get_script_data`` (awx/main/models/inventory.py) takes the inventory's enabled hosts
  ``order_by('name')`` and slice ``n`` of ``K`` as ``hosts[n - 1::K]``: host i of the name order goes to slice
  i mod K (``--order inventory`` keeps the inventory's own order instead); ``JobTemplate.get_effective_slice_ct``
  (awx/main/models/jobs.py) runs ``min(job_slice_count, hosts)`` slices. A slice's inventory keeps every group and
  its variables, with only that slice's hosts. The user guide:
  https://docs.ansible.com/automation-controller/latest/html/userguide/job_slices.html ("Job slicing ... for jobs
  that do not require cross-host orchestration"; each slice job gets "a reduced version of the original
  inventory" with only its hosts).
* the private data dir (awx/main/tasks/jobs.py): ``project/`` (the project checkout; a link to this checkout
  here), ``inventory/hosts`` (an executable script printing the slice's inventory as JSON: ``build_inventory``),
  ``env/extravars`` (the template's extra vars: ``build_extra_vars_file``; AWX adds its ``awx_*`` meta variables,
  which gpufleet's playbooks do not read), ``env/settings`` (``job_timeout``, ``suppress_ansible_output``,
  ``suppress_output_file``), ``env/cmdline`` (``RunJob.build_args``: ``--check`` for a check job, ``-u root``
  without a machine credential, ``--diff`` in diff mode, ``--forks=N``), and ``env/envvars`` for what the
  execution environment's image sets (ansible/execution-environment.yml: ``ANSIBLE_CONFIG`` at the project's
  ansible/ansible.cfg, ``ANSIBLE_COLLECTIONS_PATH``; here the checkout's ``.collections``).

Options: ``--order inventory`` (slices cut from the inventory's host order instead of AWX's name order),
``--project-callbacks`` (ansible-runner puts its own callback folder in ``ANSIBLE_CALLBACK_PLUGINS``, which wins over
ansible.cfg's ``callback_plugins``: gpufleet's ansiballz cache and preload callbacks do not load in a runner job, as in
an AWX job; this gives them to the jobs), ``--keep`` (keep the jobs' private data dirs), ``--job-timeout``.

Results: ``benchmarks/results/<UTC stamp>-slices.{json,md}`` (``--out`` to choose), saved after every step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from benchmarks.scale import (
    RESULTS,
    STACK,
    Bench,
    Checkout,
    Measurement,
    TaskCount,
    _children_cpu,
    count_events,
    engine_cpu_s,
    node_cpu_s,
    render_markdown,
)
from gpufleet.ansible_run.job_events import read_job_events
from gpufleet.bench import scale_model as sm
from gpufleet.drift.runner import report_from_events
from gpufleet.errors import InputError

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
AWX_OBJECTS = CHECKOUT / "ansible" / "awx" / "gpufleet_awx.yml"
AWX_SIZING = CHECKOUT / "ansible" / "awx" / "sizing.yml"
#: The job template whose job the bench runs (ansible/awx/gpufleet_awx.yml).
DRIFT_TEMPLATE = "gpufleet drift"
#: AWX's user without a machine credential (RunJob.build_args: "Always specify the normal SSH user as root").
AWX_DEFAULT_USER = "root"
#: The inventory script AWX writes (BaseTask.build_inventory), byte for byte but for the JSON.
INVENTORY_SCRIPT = "#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n"
#: Issue 33's goals for the model's prediction from measured inputs: (nodes, slices, target wall s).
GOALS: tuple[tuple[int, int, float], ...] = ((1000, 1, 60.0), (1000, 4, 20.0))

Order = Literal["name", "inventory"]
Mode = Literal["limit", "slice"]


# --------------------------------------------------------------------------------------------- AWX's rules


def order_hosts(hosts: Sequence[str], order: Order) -> list[str]:
    """The host order slices are cut from: AWX's ``order_by('name')``, or the inventory's own."""
    return sorted(hosts) if order == "name" else list(hosts)


def slice_hosts(hosts: Sequence[str], k: int) -> list[list[str]]:
    """AWX's job slicing: host i goes to slice i mod K, each slice in the given order; at most one slice per host
    (``get_effective_slice_ct``: ``min(job_slice_count, hosts)``)."""
    if k < 1:
        raise ValueError(f"{k} slices: a job has 1 slice or more")
    if not hosts:
        raise ValueError("no hosts to slice")
    effective = min(k, len(hosts))
    return [list(hosts[i::effective]) for i in range(effective)]


def inventory_hosts(export: Mapping[str, Any]) -> list[str]:
    """The hosts of an ``ansible-inventory --list --export`` document in the inventory's order (``all`` first, a
    group's hosts before its children's, each host where it first appears)."""
    seen: dict[str, None] = {}

    def walk(group: str, path: frozenset[str]) -> None:
        if group in path:
            return
        data = export.get(group) or {}
        for h in data.get("hosts", []):
            seen.setdefault(str(h), None)
        for child in data.get("children", []):
            walk(str(child), path | {group})

    walk("all", frozenset())
    for h in (export.get("_meta") or {}).get("hostvars", {}):
        seen.setdefault(str(h), None)
    return list(seen)


def slice_inventory(export: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, Any]:
    """A slice's inventory in AWX's inventory-script shape: every group with its variables and children, only the
    slice's hosts in it, and the slice's hosts' variables under ``_meta``."""
    keep = set(hosts)
    out: dict[str, Any] = {}
    for name, data in export.items():
        if name == "_meta" or not isinstance(data, Mapping):
            continue
        group: dict[str, Any] = {}
        if "hosts" in data:
            group["hosts"] = [h for h in data["hosts"] if h in keep]
        for key in ("children", "vars"):
            if key in data:
                group[key] = data[key]
        out[name] = group
    meta = dict(export.get("_meta") or {})
    hostvars = meta.pop("hostvars", {})
    # The rest of _meta (ansible-core's "profile": how tagged values such as !unsafe ones are encoded) as it is.
    out["_meta"] = {**meta, "hostvars": {h: hostvars.get(h, {}) for h in hosts}}
    return out


@dataclass(frozen=True)
class JobTemplate:
    """What the bench takes from an AWX job template: what ``RunJob`` turns into the job's command line."""

    name: str
    playbook: str
    job_type: str
    diff_mode: bool
    extra_vars: dict[str, Any]
    forks: int

    def cmdline(self) -> list[str]:
        """``RunJob.build_args`` for this template without credentials, tags or limit."""
        args = ["--check"] if self.job_type == "check" else []
        args += ["-u", AWX_DEFAULT_USER]
        if self.diff_mode:
            args.append("--diff")
        if self.forks:
            args.append(f"--forks={self.forks}")
        return args


_VAR = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_ITEM = re.compile(r"^\{\{\s*item\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def _resolve(value: Any, variables: Mapping[str, Any]) -> Any:
    """A template argument that is one expression, ``"{{ name }}"`` or ``"{{ item.key }}"``, is that value (itself
    resolved); any other value is taken as it is."""
    if not isinstance(value, str):
        return value
    if m := _ITEM.match(value):
        item = variables.get("item") or {}
        if m.group(1) not in item:
            raise ValueError(f"{value!r}: the loop item has no {m.group(1)}")
        return _resolve(item[m.group(1)], variables)
    if m := _VAR.match(value):
        if m.group(1) not in variables:
            raise ValueError(f"{value!r}: {m.group(1)} is not set")
        return _resolve(variables[m.group(1)], variables)
    return value


def drift_job_template(objects: Path = AWX_OBJECTS, sizing: Path | None = AWX_SIZING,
                       name: str = DRIFT_TEMPLATE) -> JobTemplate:
    """Job template ``name`` as gpufleet's AWX objects define it; forks (and any ``{{ var }}``) from the play's
    variables, overridden by the sizing file as ``-e @sizing.yml`` does."""
    plays = yaml.safe_load(objects.read_text(encoding="utf-8"))
    sized = (yaml.safe_load(sizing.read_text(encoding="utf-8")) or {}) if sizing is not None else {}
    for play in plays:
        variables = {**(play.get("vars") or {}), **sized}
        for task in play.get("tasks") or []:
            args = task.get("awx.awx.job_template")
            if args is None:
                continue
            for item in task.get("loop") or [{}]:
                scope = {**variables, "item": item}
                if _resolve(args.get("name"), scope) != name:
                    continue
                return JobTemplate(
                    name=name, playbook=str(_resolve(args.get("playbook"), scope)),
                    job_type=str(_resolve(args.get("job_type", "run"), scope)),
                    diff_mode=bool(_resolve(args.get("diff_mode", False), scope)),
                    extra_vars=dict(_resolve(args.get("extra_vars"), scope) or {}),
                    forks=int(_resolve(args.get("forks", 0), scope) or 0))
    raise ValueError(f"{objects}: no awx.awx.job_template named {name!r}")


def awx_settings(job_timeout: int) -> dict[str, Any]:
    """``env/settings`` as AWX writes it (BaseTask.run's ``runner_settings``)."""
    return {"job_timeout": job_timeout, "suppress_ansible_output": True, "suppress_output_file": True}


def write_inventory_script(script: Path, inventory: Mapping[str, Any]) -> None:
    """AWX's executable inventory script (``build_inventory``) printing ``inventory`` as JSON."""
    script.write_text(INVENTORY_SCRIPT % json.dumps(inventory), encoding="utf-8")
    script.chmod(0o700)


def write_private_data_dir(pdd: Path, *, project: Path, inventory: Mapping[str, Any], template: JobTemplate,
                           envvars: Mapping[str, str], job_timeout: int, limit: str | None = None) -> Path:
    """An ansible-runner private data dir laid out as AWX lays out a job's (see the module's docstring)."""
    pdd.mkdir(parents=True)
    (pdd / "project").symlink_to(project.resolve(), target_is_directory=True)
    (pdd / "inventory").mkdir()
    write_inventory_script(pdd / "inventory" / "hosts", inventory)
    env = pdd / "env"
    env.mkdir()
    (env / "extravars").write_text(json.dumps(template.extra_vars), encoding="utf-8")
    (env / "settings").write_text(json.dumps(awx_settings(job_timeout)), encoding="utf-8")
    (env / "envvars").write_text(json.dumps(dict(envvars)), encoding="utf-8")
    # A workflow node's limit reaches the job as RunJob.build_args' ``--limit``.
    args = template.cmdline() + (["--limit", limit] if limit else [])
    (env / "cmdline").write_text(shlex.join(args), encoding="utf-8")
    return pdd


def ee_envvars(pdd: Path, checkout: Path, *, project_callbacks: bool = False) -> dict[str, str]:
    """What ansible/execution-environment.yml's image sets, for a job whose project is ``pdd/project``.

    ansible-runner sets ``ANSIBLE_CALLBACK_PLUGINS`` to its own folder (after any the environment gives), and the
    environment wins over ansible.cfg: ansible.cfg's ``callback_plugins`` (gpufleet's ansiballz cache and preload
    callbacks) is not read in a runner job. ``project_callbacks`` puts gpufleet's folder in the environment, as
    gpufleet's own runner does, to measure what they save on this path."""
    env = {"ANSIBLE_CONFIG": str(pdd / "project" / "ansible" / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(checkout / ".collections")}
    if project_callbacks:
        env["ANSIBLE_CALLBACK_PLUGINS"] = str(pdd / "project" / "gpufleet" / "ansible_run" / "callback_plugins")
    return env


def runner_command(runner: Path, pdd: Path, template: JobTemplate, ident: str) -> list[str]:
    return [str(runner), "run", str(pdd), "-p", template.playbook, "--ident", ident]


# ------------------------------------------------------------------------------------------ the model


def op_cost_from_k1(m: Mapping[str, Any], *, fixed_cpu_s: float, gpu_hosts: Sequence[str]) -> sm.OpCost:
    """The scale model's inputs from the K = 1 run (a :class:`Measurement` as JSON) and the empty run's CPU: per
    host-task costs over every host-task of the run; tasks and module runs per GPU node."""
    counts = m["counts"]
    host_tasks = sum(c["tasks"] for c in counts.values())
    gpu = [counts[h] for h in gpu_hosts if h in counts]
    if not host_tasks or not gpu:
        raise ValueError("the K = 1 run has no per-host task counts")
    node = (m["node_cpu_s"] - (m["node_idle_cpu_s"] or 0.0)) if m["node_cpu_s"] is not None else 0.0
    engine = (m.get("engine_shim_cpu_s") or 0.0) + (m.get("engine_daemon_cpu_s") or 0.0)
    return sm.OpCost(
        name="drift (ansible-runner, AWX job)",
        tasks_per_host=sum(c["tasks"] for c in gpu) / len(gpu),
        module_runs_per_host=sum(c["module_runs"] for c in gpu) / len(gpu),
        controller_fixed_cpu_s=fixed_cpu_s,
        controller_cpu_per_host_task_s=max(0.0, m["controller_cpu_s"] - fixed_cpu_s) / host_tasks,
        node_cpu_per_host_task_s=max(0.0, node) / host_tasks,
        engine_cpu_per_host_task_s=max(0.0, engine) / host_tasks)


def sandbox_fleet(hosts: int, k: int, *, forks: int, cores: float) -> sm.Fleet:
    """This machine running K slices at once: every slice's controller, node and engine CPU on the same cores (a
    slice's share: cores / K), nodes reached by ``docker exec`` (no connection wall), no execution-environment pod
    to start."""
    k = min(k, hosts)
    return sm.Fleet(nodes=hosts, forks=forks, slices=k, controller_cores=cores / k, shared_cores=True,
                    connection_s=0.0, slice_start_s=0.0)


def compare(op: sm.OpCost, measured: Sequence[Mapping[str, Any]], *, hosts: int, forks: int,
            cores: float) -> list[dict[str, Any]]:
    """Per measured K (``{"k", "wall_s"}``): the model's wall on this machine and measured / predicted."""
    rows = []
    for r in measured:
        p = sm.predict(op, sandbox_fleet(hosts, int(r["k"]), forks=forks, cores=cores))
        rows.append({"k": int(r["k"]), "measured_wall_s": float(r["wall_s"]), "predicted_wall_s": p.wall_s,
                     "ratio": float(r["wall_s"]) / p.wall_s if p.wall_s else None, "bound": p.bound,
                     "hosts_per_slice": p.hosts_per_slice})
    return rows


def goal_predictions(op: sm.OpCost, *, forks: int) -> list[dict[str, Any]]:
    """Issue 33's goals as ``gpufleet bench scale-model`` predicts them (SSH ControlPersist, 8-core controllers,
    the model's assumed slice start)."""
    rows = []
    for nodes, k, target in GOALS:
        fleet = sm.Fleet(nodes=nodes, forks=forks, slices=k, controller_cores=sm.CONTROLLER_CORES,
                         connection_s=sm.SSH_CHANNEL_S)
        p = sm.predict(op, fleet)
        rows.append({"nodes": nodes, "slices": k, "controller_cores": fleet.controller_cores,
                     "slice_start_s": fleet.slice_start_s if k > 1 else 0.0, "predicted_wall_s": p.wall_s,
                     "bound": p.bound, "step_s": p.step_s, "target_s": target, "met": p.wall_s <= target})
    return rows


# ------------------------------------------------------------------------------------------ rendering


def _f(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def render_slices(doc: Mapping[str, Any]) -> str:
    """The slice runs, the model's inputs, its 1,000-node goals and, last, measured against predicted per K."""
    lines: list[str] = []
    runs = doc.get("slices") or []
    template = doc.get("template") or {}
    if runs:
        lines += ["", "## Slices", "",
                  f"Slice order: {doc.get('order', 'name')} (host i of that order in slice i mod K). Job template "
                  f"`{template.get('name', DRIFT_TEMPLATE)}`: `{template.get('playbook')}`, "
                  f"`{' '.join(template.get('cmdline', []))}`; ansible.cfg's callback_plugins "
                  + ("given in the environment (--project-callbacks)." if doc.get("project_callbacks") else
                     "not read, as in an AWX job (ansible-runner's own folder in ANSIBLE_CALLBACK_PLUGINS)."), "",
                  "| K | hosts per slice | wall s per slice | wall s (first start to last end) | drift reports "
                  "| union = K=1 hosts | items = K=1 items |", "|---:|---|---|---:|---|---|---|"]
        for r in runs:
            sl = r["slices"]
            lines.append(
                f"| {r['k']} | {', '.join(str(len(s['hosts'])) for s in sl)} "
                f"| {', '.join(_f(s['wall_s']) for s in sl)} | {r['wall_s']:.1f} "
                f"| {sum(1 for s in sl if s.get('report_ok'))}/{len(sl)} ok "
                f"| {_f(r.get('union_equals_k1'), '')} | {_f(r.get('items_equal_k1'), '')} |")
        notes = [f"K={r['k']}: {n}" for r in runs for n in r.get("problems", [])]
        if notes:
            lines += ["", *[f"- {n}" for n in notes]]
    model = doc.get("model") or {}
    if model.get("inputs"):
        i = model["inputs"]
        lines += ["", "## The model's inputs, measured here", "",
                  f"- fixed controller CPU per run: {i['controller_fixed_cpu_s']:.2f} s ({model.get('fixed_source')})",
                  f"- controller CPU per host-task: {1000 * i['controller_cpu_per_host_task_s']:.1f} ms "
                  f"(K = 1: controller CPU less the fixed CPU, over its host-tasks)",
                  f"- node CPU per host-task: {1000 * i['node_cpu_per_host_task_s']:.1f} ms; engine CPU per "
                  f"host-task: {1000 * i['engine_cpu_per_host_task_s']:.1f} ms",
                  f"- tasks per GPU node: {i['tasks_per_host']:.0f}; module runs per GPU node: "
                  f"{i['module_runs_per_host']:.0f}"]
        if model.get("fixed_from_k_slope_s") is not None:
            per_task = "controller_cpu_per_host_task_s"
            lines.append(f"- controller CPU over K grows {model['fixed_from_k_slope_s']:.2f} s per extra job (the "
                         "fixed CPU each slice pays again, with what a job pays only once it has hosts)"
                         + (f"; with it as the fixed CPU, {1000 * model['inputs_k_slope'][per_task]:.1f} ms per "
                            "host-task" if model.get("inputs_k_slope") else ""))
    if model.get("goals"):
        lines += ["", "## 1,000 nodes, predicted from these inputs", "",
                  "| fleet | fixed CPU from | predicted wall s | bound | target s | met |",
                  "|---|---|---:|---|---:|---|"]
        for g in model["goals"]:
            where = (f"{g['nodes']} nodes, one {g['controller_cores']:g}-core controller" if g["slices"] == 1 else
                     f"{g['nodes']} nodes, {g['slices']} slices of {g['controller_cores']:g} cores "
                     f"(slice start {g['slice_start_s']:g} s, assumed)")
            lines.append(f"| {where} | {g.get('fixed', 'empty run')} | {g['predicted_wall_s']:.0f} | {g['bound']} "
                         f"| {g['target_s']:g} "
                         f"| {'yes' if g['met'] else 'no'} |")
    if model.get("comparison"):
        alt = {c["k"]: c for c in model.get("comparison_k_slope") or []}
        lines += ["", "## Measured against the model (this machine, K slices sharing its cores)", "",
                  "Predicted from the K = 1 run's per-host-task costs, with the fixed CPU per job of the job without "
                  "hosts, and (last columns) of the K runs' slope.", "",
                  "| K | measured wall s | predicted wall s | measured / predicted | bound "
                  "| predicted wall s, K runs' slope | measured / predicted |",
                  "|---:|---:|---:|---:|---|---:|---:|"]
        lines += [f"| {c['k']} | {c['measured_wall_s']:.1f} | {c['predicted_wall_s']:.1f} | {_f(c['ratio'], '.2f')} "
                  f"| {c['bound']} | {_f(alt.get(c['k'], {}).get('predicted_wall_s'))} "
                  f"| {_f(alt.get(c['k'], {}).get('ratio'), '.2f')} |" for c in model["comparison"]]
    return "\n".join(lines) + "\n"


def render(doc: Mapping[str, Any]) -> str:
    return render_markdown(doc, title="Slices bench", harness="benchmarks.slices").rstrip("\n") + "\n" + \
        render_slices(doc)


# ------------------------------------------------------------------------------------------ the bench


@dataclass
class SliceResult:
    index: int
    hosts: list[str]
    wall_s: float
    rc: int
    status: str = ""
    report_ok: bool = False
    report_hosts: list[str] | None = None
    drifted_hosts: list[str] | None = None
    items: list[list[str]] | None = None
    error: str = ""


def _item_keys(report: Any) -> list[list[str]]:
    return sorted([i.host, i.component, i.kind, i.task, i.message] for i in report.items)


class SlicesBench(Bench):
    """benchmarks/scale.py's bench (machine facts, controller cgroup, idle node CPU, saving) for slice runs."""

    def __init__(self, out: Path, *, stack: str, order: Order, job_timeout: int, keep: bool,
                 project_callbacks: bool = False, mode: Mode = "limit") -> None:
        super().__init__(out, out.with_suffix(".log"))
        self.mode = mode
        self.stack = stack
        self.order = order
        self.job_timeout = job_timeout
        self.keep = keep
        self.project_callbacks = project_callbacks
        self.co = Checkout(CHECKOUT, "current", [])
        self.runner = self.co.bin / "ansible-runner"
        self.inventory = CHECKOUT / "inventories" / stack / "hosts.yml"
        self.template = drift_job_template()
        self.doc.update({"stack": stack, "order": order, "mode": mode, "slices": [], "model": {},
                         "project_callbacks": project_callbacks,
                         "template": asdict(self.template) | {"cmdline": self.template.cmdline()}})
        # Every job's private data dir, events included (thousands of files a job): outside the checkout.
        self.workdir = Path(tempfile.mkdtemp(prefix="gpufleet-slices-"))
        self.export: dict[str, Any] = {}
        self.hosts: list[str] = []
        self.gpu_hosts: list[str] = []
        self.k1: SliceRunDoc | None = None
        #: Per-host task counts of the job being read, per private data dir.
        self._counts: dict[Path, dict[str, TaskCount]] = {}

    def save(self) -> None:
        self.out.with_suffix(".json").write_text(json.dumps(self.doc, indent=2, sort_keys=True, default=str) + "\n")
        self.out.with_suffix(".md").write_text(render(self.doc))

    def env(self) -> dict[str, str]:
        # As in an execution environment: no ANSIBLE_* of the caller's shell, the checkout's venv on PATH.
        return {k: v for k, v in self.co.env().items() if not k.startswith("ANSIBLE_")}

    def load_inventory(self) -> None:
        env = self.env() | {"ANSIBLE_CONFIG": str(CHECKOUT / "ansible" / "ansible.cfg")}
        r = subprocess.run([str(self.co.bin / "ansible-inventory"), "-i", str(self.inventory), "--list", "--export"],
                           capture_output=True, text=True, env=env, cwd=CHECKOUT, check=False)
        if r.returncode != 0:
            raise SystemExit(f"ansible-inventory failed on {self.inventory}: {r.stderr.strip()[-1500:]}")
        self.export = json.loads(r.stdout)
        self.hosts = order_hosts(inventory_hosts(self.export), self.order)
        gpu = set((self.export.get("gpu") or {}).get("hosts", []))
        self.gpu_hosts = [h for h in self.hosts if h in gpu]
        self.co.sizes = [len(self.gpu_hosts)]
        self.doc["checkouts"].append(self.co.facts())
        self.doc["hosts"] = self.hosts
        self.say(f"{self.inventory}: {len(self.hosts)} hosts ({len(self.gpu_hosts)} GPU nodes), order {self.order}; "
                 f"job template {self.template.name!r}: {self.template.playbook} {shlex.join(self.template.cmdline())}")
        self.save()

    def limit_hosts(self, patterns: Sequence[str]) -> list[list[str]]:
        """Each ``--limit`` pattern's hosts, as ansible resolves it over the jobs' inventory script."""
        base = self.workdir / "patterns"
        base.mkdir(exist_ok=True)
        script = base / "hosts"
        write_inventory_script(script, self.export)
        out = []
        for p in patterns:
            r = subprocess.run([str(self.co.bin / "ansible"), "all", "-i", str(script), "--list-hosts", "--limit", p],
                               capture_output=True, text=True, env=self.env(), cwd=CHECKOUT, check=False)
            if r.returncode != 0:
                raise SystemExit(f"--limit {p!r} over the inventory: {r.stderr.strip()[-800:]}")
            out.append([ln.strip() for ln in r.stdout.splitlines()[1:] if ln.strip()])
        return out

    def run_job(self, name: str, slices: Sequence[Sequence[str]], op: str,
                limits: Sequence[str | None] | None = None) -> tuple[Measurement, list[SliceResult]]:
        """One ``ansible-runner run`` process per slice, all at once; measured as one command. With ``limits``,
        every process gets the whole inventory and its slice's ``--limit`` (the parallel drift workflow)."""
        k = len(slices)
        limits = list(limits) if limits is not None else [None] * k
        self._counts = {}
        base = self.workdir / name
        if base.exists():
            shutil.rmtree(base)
        cmds = []
        for i, hosts in enumerate(slices):
            pdd = base / f"slice{i}"
            inventory = self.export if limits[i] is not None else slice_inventory(self.export, hosts)
            write_private_data_dir(pdd, project=CHECKOUT, inventory=inventory,
                                   template=self.template,
                                   envvars=ee_envvars(pdd, CHECKOUT, project_callbacks=self.project_callbacks),
                                   job_timeout=self.job_timeout, limit=limits[i])
            cmds.append(runner_command(self.runner, pdd, self.template, f"slice{i}"))
        self.say(f"[K={k}] {op}: {len(cmds)} x {shlex.join(cmds[0][:2])} <pdd> "
                 f"{shlex.join(cmds[0][3:])} (hosts per slice: {', '.join(str(len(s)) for s in slices)}"
                 + (f"; limits {', '.join(str(x) for x in limits)})" if any(limits) else ")"))
        env = self.env()
        load0, node0, eng0, cg0 = os.getloadavg()[0], node_cpu_s(), engine_cpu_s(), self.cgroup.cpu_s()
        ru0 = _children_cpu()
        starts: list[float] = []
        ends: list[float] = [0.0] * len(cmds)
        rcs: list[int] = [0] * len(cmds)
        threads = []
        logs = []
        for i, cmd in enumerate(cmds):
            log = (base / f"slice{i}" / "runner.out").open("wb")
            logs.append(log)
            starts.append(time.monotonic())
            proc = subprocess.Popen(cmd, cwd=CHECKOUT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, preexec_fn=self.cgroup.join)

            def wait(i: int = i, proc: subprocess.Popen[bytes] = proc) -> None:
                rcs[i] = proc.wait()
                ends[i] = time.monotonic()

            t = threading.Thread(target=wait)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        for log in logs:
            log.close()
        wall = max(ends) - min(starts)
        ru1, cg1, node1, eng1 = _children_cpu(), self.cgroup.cpu_s(), node_cpu_s(), engine_cpu_s()
        load1 = os.getloadavg()[0]
        self.say(f"  {wall:.1f} s wall (slices: {', '.join(f'{e - s:.1f}' for s, e in zip(starts, ends, strict=True))}"
                 f"), controller {ru1 - ru0:.1f} s CPU, rc {rcs}")
        stack_nodes = self.stack == STACK
        m = Measurement(
            checkout=self.co.label, n=len(self.gpu_hosts), op=op, wall_s=round(wall, 2), rc=max(rcs),
            controller_cpu_s=round(ru1 - ru0, 2),
            controller_cpu_cgroup_s=None if cg0 is None or cg1 is None else round(cg1 - cg0, 2),
            node_cpu_s=None if node0 is None or node1 is None or not stack_nodes else round(node1 - node0, 2),
            node_idle_cpu_s=round(self.idle_rate * wall, 2), engine_shim_cpu_s=round(eng1[0] - eng0[0], 2),
            engine_daemon_cpu_s=round(eng1[1] - eng0[1], 2), hosts=sum(len(s) for s in slices),
            gpu_nodes=len(self.gpu_hosts), load_start=load0, load_end=load1)
        self.doc["measurements"].append(m)  # Bench.record replaces it with its JSON
        results = [self.read_slice(base / f"slice{i}", i, list(hosts), ends[i] - starts[i], rcs[i])
                   for i, hosts in enumerate(slices)]
        return m, results

    def read_slice(self, pdd: Path, index: int, hosts: list[str], wall: float, rc: int) -> SliceResult:
        r = SliceResult(index=index, hosts=hosts, wall_s=round(wall, 2), rc=rc)
        try:
            job = read_job_events(pdd)
            r.status = job.status
            report, _ = report_from_events(job)
        except InputError as e:
            r.error = str(e)
            return r
        r.report_hosts = sorted(report.hosts)
        r.drifted_hosts = report.drifted_hosts
        r.items = _item_keys(report)
        r.report_ok = set(report.hosts) == set(hosts) and not report.errors and job.check is True
        if not r.report_ok:
            r.error = (f"report hosts {sorted(report.hosts)} vs slice {sorted(hosts)}; errors: "
                       f"{report.errors[:3]}; check mode: {job.check}")
        self._counts[pdd] = count_events(job.events)
        return r

    def fixed(self) -> None:
        """One job over an inventory without hosts: the fixed controller CPU of a run."""
        m, results = self.run_job("fixed", [[]], "fixed: ansible-runner, inventory without hosts")
        self.record(m, note=f"status {results[0].status or results[0].error[:120]}")
        self.doc["model"]["fixed_cpu_s"] = m.controller_cpu_s
        self.doc["model"]["fixed_source"] = "ansible-runner over an inventory without hosts, measured"

    def slices(self, k: int) -> None:
        if self.mode == "limit":
            patterns = sm.drift_limits(len(self.hosts), k)
            parts, limits = self.limit_hosts(patterns), list[str | None](patterns)
            what = "whole inventory, --limit per job"
        else:
            parts, limits, what = slice_hosts(self.hosts, k), [None] * k, "AWX job slicing"
        m, results = self.run_job(f"k{len(parts)}", parts, f"drift, ansible-runner, {len(parts)} job(s), {what}",
                                  limits=limits)
        counts: dict[str, TaskCount] = {}
        for c in self._counts.values():
            counts.update(c)
        items = sorted(i for r in results for i in (r.items or []))
        ok = sum(1 for r in results if r.report_ok)
        self.record(m, counts=counts, changed=len(items), note=f"{ok}/{len(results)} slice reports ok")
        row: dict[str, Any] = {"k": len(parts), "requested_k": k, "mode": self.mode, "limits": limits,
                               "wall_s": m.wall_s,
                               "controller_cpu_s": m.controller_cpu_s,
                               "slices": [asdict(r) for r in results], "problems": []}
        union = sorted({h for r in results for h in (r.report_hosts or [])})
        if self.k1 is None:
            self.k1 = SliceRunDoc(union, items)
            self.doc["model"]["k1"] = self.doc["measurements"][-1]
        else:
            row["union_equals_k1"] = union == self.k1.hosts
            row["items_equal_k1"] = items == self.k1.items
            if not row["union_equals_k1"]:
                row["problems"].append(f"slices' report hosts differ from K=1's: only in slices "
                                       f"{sorted(set(union) - set(self.k1.hosts))}, only at K=1 "
                                       f"{sorted(set(self.k1.hosts) - set(union))}")
            if not row["items_equal_k1"]:
                extra = [i for i in items if i not in self.k1.items]
                missing = [i for i in self.k1.items if i not in items]
                row["problems"].append(f"drift items differ from K=1's: {len(extra)} only in slices "
                                       f"(e.g. {extra[:2]}), {len(missing)} only at K=1 (e.g. {missing[:2]})")
        row["problems"] += [f"slice {r.index}: {r.error}" for r in results if r.error]
        for p in row["problems"]:
            self.say(f"  ! {p}")
        self.doc["slices"].append(row)
        self.save()

    def model(self) -> None:
        k1 = self.doc["model"].get("k1")
        fixed = self.doc["model"].get("fixed_cpu_s")
        if k1 is None or fixed is None:
            self.doc["notes"].append("no model comparison: the K = 1 run or the fixed run is missing")
            return
        try:
            op = op_cost_from_k1(k1, fixed_cpu_s=fixed, gpu_hosts=self.gpu_hosts)
        except ValueError as e:
            self.doc["notes"].append(f"no model comparison: {e}")
            return
        forks = self.template.forks or 5
        cores = float(self.doc["machine"]["cores"] or 1)
        measured = [{"k": r["k"], "wall_s": r["wall_s"]} for r in self.doc["slices"]]
        slope = None
        if len(measured) >= 2:
            # What one more process costs: the slope of controller CPU over K (the slices' host-tasks are the
            # same hosts' at every K). It holds what a job pays once it has hosts (plugin loading, each module's
            # payload built once per process), which a job without hosts never pays.
            points = [(float(r["k"]), float(r["controller_cpu_s"])) for r in self.doc["slices"]]
            slope = sm.line_fit(points)[1]
        inputs = {"empty run": op}
        if slope is not None and 0 < slope < float(k1["controller_cpu_s"]):
            inputs["K runs' slope"] = op_cost_from_k1(k1, fixed_cpu_s=slope, gpu_hosts=self.gpu_hosts)
        self.doc["model"].update({
            "inputs": asdict(op), "forks": forks, "cores": cores, "fixed_from_k_slope_s": slope,
            "inputs_k_slope": asdict(inputs["K runs' slope"]) if "K runs' slope" in inputs else None,
            "comparison": compare(op, measured, hosts=len(self.hosts), forks=forks, cores=cores),
            "comparison_k_slope": (compare(inputs["K runs' slope"], measured, hosts=len(self.hosts), forks=forks,
                                           cores=cores) if "K runs' slope" in inputs else None),
            "goals": [g | {"fixed": name} for name, o in inputs.items() for g in goal_predictions(o, forks=forks)]})
        for c in self.doc["model"]["comparison"]:
            self.say(f"  K={c['k']}: measured {c['measured_wall_s']:.1f} s, predicted {c['predicted_wall_s']:.1f} s "
                     f"({c['bound']}), ratio {_f(c['ratio'], '.2f')}")
        for g in self.doc["model"]["goals"]:
            self.say(f"  {g['nodes']} nodes, {g['slices']} slice(s), fixed CPU from the {g['fixed']}: predicted "
                     f"{g['predicted_wall_s']:.0f} s ({g['bound']}), goal {g['target_s']:g} s: "
                     f"{'met' if g['met'] else 'not met'}")
        self.save()

    def cleanup(self) -> None:
        if self.keep:
            self.say(f"the jobs' private data dirs (events, runner output) are kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class SliceRunDoc:
    """The K = 1 run's report: what the slices' reports together must equal."""

    hosts: list[str]
    items: list[list[str]]


def parse_slices(text: str) -> list[int]:
    """``1,2,4`` -> [1, 2, 4]: K = 1 first (the model's inputs and the union check come from it), no repeats."""
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--slices {text!r}: give slice counts such as 1,2,4") from None
    if not ks or min(ks) < 1:
        raise SystemExit(f"--slices {text!r}: every slice count is 1 or more")
    return [1, *sorted(set(ks) - {1})]


def preflight(stack: str) -> None:
    """What the bench needs before it writes anything: the running stack's inventory and ansible-runner."""
    inventory = CHECKOUT / "inventories" / stack / "hosts.yml"
    if not inventory.is_file():
        raise SystemExit(f"{inventory}: no inventory; run `gpufleet up --stack {stack} --gpu-nodes 16` first (this "
                         "bench measures a running sandbox)")
    runner = CHECKOUT / ".venv" / "bin" / "ansible-runner"
    if not runner.is_file():
        raise SystemExit(f"{runner}: not installed; run `.venv/bin/pip install --no-deps -r requirements-awx.lock` "
                         "(the AWX path's ansible-runner)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.slices", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--slices", default="1,2,4", help="slice counts K to measure (K = 1 is always measured first)")
    ap.add_argument("--stack", default=STACK, help="the running stack whose inventory is sliced (node CPU is "
                    f"measured for the {STACK!r} stack's containers only)")
    ap.add_argument("--mode", choices=("limit", "slice"), default="limit",
                    help="limit: K jobs over the whole inventory, a --limit each (ansible/awx's parallel drift "
                    "workflow); slice: AWX's job slicing (each job's inventory holds only its hosts)")
    ap.add_argument("--order", choices=("name", "inventory"), default="name",
                    help="host order slices are cut from: AWX's (by name) or the inventory's")
    ap.add_argument("--job-timeout", type=int, default=1800, help="env/settings job_timeout of each job, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the jobs' private data dirs (a temp folder, printed)")
    ap.add_argument("--project-callbacks", action="store_true",
                    help="give the jobs gpufleet's callback folder in ANSIBLE_CALLBACK_PLUGINS (ansiballz cache, "
                    "preload); without it, as an AWX job runs, ansible.cfg's callback_plugins is not read")
    ap.add_argument("--out", type=Path, default=None, help="results path without suffix")
    args = ap.parse_args(argv)
    ks = parse_slices(args.slices)
    preflight(args.stack)
    out = args.out or RESULTS / f"{datetime.now(UTC):%Y%m%d-%H%M}-slices"
    out.parent.mkdir(parents=True, exist_ok=True)
    bench = SlicesBench(out, stack=args.stack, order=args.order, job_timeout=args.job_timeout, keep=args.keep,
                        project_callbacks=args.project_callbacks, mode=args.mode)
    try:
        bench.load_inventory()
        if args.stack != STACK:
            bench.doc["notes"].append(f"node CPU not measured: the {args.stack!r} stack's containers are not "
                                      f"benchmarks/scale.py's ({STACK!r})")
        bench.measure_idle(len(bench.gpu_hosts))
        bench.fixed()
        for k in ks:
            bench.slices(k)
        bench.model()
    finally:
        bench.finish()
        bench.cleanup()
    print(render(bench.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

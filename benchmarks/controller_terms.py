"""The controller's costs that grow with the cluster per host, measured (issue 33 point 4).

    python -m benchmarks.controller_terms [--sizes 16,64,256] [--after-sizes 16,64,256,1000] [--before REV]
                                          [--stack local] [--out PATH]

The scale model (gpufleet/bench/scale_model.py) takes the controller's CPU per host-task from the sandbox at N = 1..16
and scales it linearly. Two things a drift check did per host read every host of the inventory, so their cost per
host grows with N and the sandbox's N cannot show it:

* **cluster**: each host's first probe computed the cluster digest (roles/host_footprint, ``cluster_digest``: the
  group map and, because slurm reads ``hostvars``, every host's role inputs): N hosts x N hosts' variables;
* **lock**: the version-lock play (ansible/playbooks/lock_check.yml) compared, on each host, the lock digests of
  every host of the inventory: N x N ``hostvars`` lookups.

Since issue 33 point 4 both run once per run (site.yml's first play computes the cluster digest with ``run_once``
and every probe of the run takes it; the lock play compares every host's digest in one ``run_once`` task). This
bench runs each term both ways through ``ansible-playbook`` on a synthetic inventory of N GPU nodes plus a control
node, every host carrying the stack's rendered group variables (``inventories/<stack>/group_vars``; no facts, no
host is contacted: the cluster term is the action plugin's, answered on the controller, and the lock play is
asserts only). Measured: wall and the controller's CPU (rusage of the waited ansible-playbook), per host.

* ``cluster-each`` / ``cluster-once``: the host_footprint action with ``state: cluster`` on every host, without and
  with ``run_once`` (per host: what each host's first probe computed before; once: what site.yml computes now);
* ``lock-before`` / ``lock-after``: lock_check.yml at ``--before`` (default ac5102e, the tree before this change) and
  as it is now.

A term that reads every host on each host costs CPU quadratic in the hosts; the table fits fixed + linear +
quadratic through the three largest sizes and gives what each term costs at 1,000 nodes (measured where it ran
there, else from the fit).
Results: ``benchmarks/results/<UTC stamp>-controller-terms.{json,md}`` (``--out`` to choose).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale import RESULTS, machine_facts
from gpufleet import REPO_ROOT

ANSIBLE_CFG = REPO_ROOT / "ansible" / "ansible.cfg"
LOCK_PLAY = REPO_ROOT / "ansible" / "playbooks" / "lock_check.yml"
FOOTPRINT_DEFAULTS = REPO_ROOT / "roles" / "host_footprint" / "defaults" / "main.yml"
#: The tree before issue 33 point 4's once-per-run terms.
BEFORE = "ac5102e"
TARGET_NODES = 1000


def cluster_play(once: bool) -> list[dict[str, Any]]:
    """The cluster digest on every host of the play (each), or once for all (site.yml's way)."""
    task: dict[str, Any] = {
        "name": "Digest of the cluster",
        "host_footprint": {"state": "cluster", "scopes": ["site"],
                           "inputs_exclude": "{{ host_footprint_inputs_exclude }}"},
    }
    if once:
        task["run_once"] = True
    return [{"name": "Cluster term", "hosts": "all", "gather_facts": False, "tasks": [task]}]


def write_inventory(out: Path, group_vars: Path, gpu_nodes: int) -> Path:
    """N GPU nodes and one control node, the stack's group variables, no connection ever made."""
    gpu = {f"gpu-{i}": None for i in range(gpu_nodes)}
    inventory = {"all": {"children": {
        "gpu": {"hosts": dict(gpu)}, "system": {"hosts": {"control-0": None}},
        "pool_gpu": {"hosts": {h: {"gpufleet_pool": "gpu"} for h in gpu}},
        "pool_system": {"hosts": {"control-0": {"gpufleet_pool": "system"}}},
    }, "vars": {"ansible_connection": "local"}}}
    out.mkdir(parents=True, exist_ok=True)
    if (out / "group_vars").exists():
        shutil.rmtree(out / "group_vars")
    shutil.copytree(group_vars, out / "group_vars")
    hosts = out / "hosts.yml"
    hosts.write_text(yaml.safe_dump(inventory, sort_keys=True))
    return hosts


def run_play(playbook: Path, inventory: Path) -> dict[str, float]:
    """One ansible-playbook run, its wall time."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_CFG), "ANSIBLE_CACHE_PLUGIN": "memory",
           "ANSIBLE_ACTION_PLUGINS": str(REPO_ROOT / "roles" / "host_footprint" / "action_plugins"),
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_HOST_KEY_CHECKING": "false"}
    defaults = yaml.safe_load(FOOTPRINT_DEFAULTS.read_text())
    extra = json.dumps({"host_footprint_inputs_exclude": defaults["host_footprint_inputs_exclude"]})
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-e", extra, str(playbook)]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{playbook.name} on {inventory}: rc {proc.returncode}\n{proc.stdout[-3000:]}")
    return {"wall_s": wall}


def measure(playbook: Path, inventory: Path) -> dict[str, float]:
    """run_play with the controller's CPU: what the waited ansible-playbook and its workers used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run_play(playbook, inventory)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def fit(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float, float] | None:
    """CPU(h) = fixed + linear x h + quadratic x h^2 through the three largest h measured (a run's start-up, a cost
    per host, a cost per host and per host it reads); None with fewer than three sizes."""
    pts = sorted((float(r["hosts"]), float(r["cpu_s"])) for r in rows)[-3:]
    if len(pts) < 3 or len({h for h, _ in pts}) < 3:
        return None
    (x1, y1), (x2, y2), (x3, y3) = pts
    # Divided differences: exact through three points.
    d12, d23 = (y2 - y1) / (x2 - x1), (y3 - y2) / (x3 - x2)
    quad = (d23 - d12) / (x3 - x1)
    lin = d12 - quad * (x1 + x2)
    return y1 - lin * x1 - quad * x1 * x1, lin, quad


def at_target(rows: Sequence[Mapping[str, Any]], hosts: int = TARGET_NODES + 1) -> tuple[float | None, str]:
    """The term's controller CPU for ``hosts`` hosts, and how it is known: measured there, else the fit."""
    for r in rows:
        if r["hosts"] == hosts:
            return float(r["cpu_s"]), "measured"
    f = fit(rows)
    if f is None:
        return None, "too few sizes"
    return f[0] + f[1] * hosts + f[2] * hosts * hosts, "fit through the three largest sizes"


def render(doc: Mapping[str, Any]) -> str:
    lines = [f"# Controller terms that grow with the cluster ({doc['stamp']})", "",
             f"Machine: {doc['machine']['cores']} cores, {doc['machine']['memory_gib']:.0f} GiB, load "
             f"{doc['load_before']} before, {doc['load_after']} after. Before = {doc['before']}. Command: "
             f"`{doc['command']}`.", "",
             "| term | hosts | wall s | controller CPU s | CPU per host ms |", "|---|---:|---:|---:|---:|"]
    for term, rows in doc["terms"].items():
        for r in rows:
            lines.append(f"| {term} | {r['hosts']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{r['cpu_per_host_s'] * 1000:.1f} |")
    lines += ["", f"Fit CPU = fixed + linear x hosts + quadratic x hosts^2 (three largest sizes), and the term at "
              f"{TARGET_NODES + 1} hosts ({TARGET_NODES} GPU nodes and the control node):", "",
              "| term | fixed s | linear ms/host | quadratic µs/host² | CPU s at 1,001 hosts | how |",
              "|---|---:|---:|---:|---:|---|"]
    for term, s in doc["summary"].items():
        f = s["fit"]
        cells = ["", "", ""] if f is None else [f"{f[0]:.2f}", f"{f[1] * 1e3:.2f}", f"{f[2] * 1e6:.3f}"]
        cpu = "" if s["cpu_s"] is None else f"{s['cpu_s']:.0f}"
        lines.append(f"| {term} | {' | '.join(cells)} | {cpu} | {s['how']} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--sizes", default="16,64,256", help="GPU nodes for the per-host (before) variants")
    ap.add_argument("--after-sizes", default="16,64,256,1000", help="GPU nodes for the once-per-run variants")
    ap.add_argument("--before", default=BEFORE, help="git revision of the lock play before (default %(default)s)")
    ap.add_argument("--stack", default="local", help="stack whose rendered group_vars the hosts carry")
    ap.add_argument("--out", type=Path, help="results file stem (default benchmarks/results/<stamp>-controller-terms)")
    a = ap.parse_args(argv)
    group_vars = REPO_ROOT / "inventories" / a.stack / "group_vars"
    if not (group_vars / "all" / "lock_digest.yml").is_file():
        print(f"{group_vars}: no rendered lock (run `gpufleet lock render --stack {a.stack}` or `gpufleet up`)",
              file=sys.stderr)
        return 1
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M")
    out = a.out or RESULTS / f"{stamp}-controller-terms"
    sizes = [int(x) for x in a.sizes.split(",") if x]
    after_sizes = [int(x) for x in a.after_sizes.split(",") if x]
    doc: dict[str, Any] = {"stamp": stamp, "machine": machine_facts(), "before": a.before,
                           "command": " ".join(["python -m benchmarks.controller_terms", *(argv or sys.argv[1:])]),
                           "load_before": round(os.getloadavg()[0], 2), "terms": {}}
    with tempfile.TemporaryDirectory(prefix="gpufleet-terms-") as tmp:
        work = Path(tmp)
        old_lock = work / "lock_check_before.yml"
        old_lock.write_text(subprocess.run(["git", "show", f"{a.before}:ansible/playbooks/lock_check.yml"],
                                           cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout)
        plays = {"cluster-each": (work / "cluster_each.yml", sizes), "cluster-once": (work / "cluster_once.yml",
                                                                                      after_sizes),
                 "lock-before": (old_lock, sizes), "lock-after": (LOCK_PLAY, after_sizes)}
        (work / "cluster_each.yml").write_text(yaml.safe_dump(cluster_play(False), sort_keys=False))
        (work / "cluster_once.yml").write_text(yaml.safe_dump(cluster_play(True), sort_keys=False))
        for term, (playbook, ns) in plays.items():
            rows = doc["terms"].setdefault(term, [])
            for n in ns:
                inv = write_inventory(work / f"inv-{n}", group_vars, n)
                m = measure(playbook, inv)
                hosts = n + 1
                rows.append({"hosts": hosts, "wall_s": round(m["wall_s"], 2), "cpu_s": round(m["cpu_s"], 2),
                             "cpu_per_host_s": round(m["cpu_s"] / hosts, 5)})
                print(f"{term:13} {hosts:5} hosts: wall {m['wall_s']:7.1f} s, controller CPU {m['cpu_s']:7.1f} s, "
                      f"{m['cpu_s'] / hosts * 1000:7.1f} ms per host", flush=True)
                out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    doc["load_after"] = round(os.getloadavg()[0], 2)
    doc["summary"] = {}
    for term, rows in doc["terms"].items():
        cpu, how = at_target(rows)
        doc["summary"][term] = {"fit": fit(rows), "cpu_s": None if cpu is None else round(cpu, 1), "how": how}
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(doc))
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

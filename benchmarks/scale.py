"""The scale bench (issue 17): controller and node cost per host, from 1 to 16 sandbox GPU nodes.

    python -m benchmarks.scale run --checkout /work/wt/before=before:1,4 --checkout .=after:1,4,8,16
    python -m benchmarks.scale noop-up --checkout /old=before --checkout .=after

``run`` measures each checkout the same way, one after the other, on the ``local`` sandbox stack (its
containers are removed first: each checkout creates and converges its own nodes). For each checkout: the fresh
converge of one GPU node against its no-op rerun and the ``nvidia_driver`` role's no-op rerun alone
(benchmarks/playbooks/nvidia_driver.yml); then, for each N, ``gpufleet up --gpu-nodes N`` and, measured:

* a no-op ``site.yml`` converge (``gpufleet converge``), all hosts;
* ``gpufleet drift`` (site.yml in check mode), all hosts;
* a one-setting remediation: every GPU's power limit set to 500 W through the simulator's ``nvidia-smi -pl``,
  then ``gpufleet remediate --batch 25%``; afterwards every GPU must be back at the stack's limit.

Per measured command: wall time; controller CPU, i.e. the ``gpufleet`` process and everything it starts
(ansible-runner, ansible-playbook, its forks, the ``docker exec`` clients): ``getrusage(RUSAGE_CHILDREN)``
deltas around a subprocess that waits for all its children, cross-checked by a cpuacct cgroup the command runs
in (which also counts a child nobody waited for); node CPU, i.e. every sandbox container's cgroup CPU time,
summed (each node's idle background, measured before, is reported beside it); task results and module runs
per host (from the run's JSON); the 1-minute load average at start and end. Docker's own daemons are in
neither figure (on a real fleet they are the SSH client and server).

``noop-up`` re-measures issue 11's "no-op ``make up``": per checkout one ``make up`` (converge) and three timed
no-op ``make up`` runs, back to back.

Results: ``benchmarks/results/<UTC stamp>-scale.{json,md}`` (``--out`` to choose), written after every
measurement so a stopped run keeps what it measured. Never runs ``make bench``'s cold step (no image is removed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DRIVER_PLAYBOOK = HERE / "playbooks" / "nvidia_driver.yml"
STACK = "local"
LABEL = f"gpufleet.stack={STACK}"
#: Power limit the remediation restores (stacks/Pulumi.local.yaml's gpu pool) and the one the bench sets first.
DRIFTED_POWER_W = 500
#: Actions that run on the controller only: they start no module on the host.
CONTROLLER_ACTIONS = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("set_fact", "debug", "assert", "fail", "meta", "include_tasks", "import_tasks",
                 "include_role", "import_role", "include_vars", "add_host", "group_by", "set_stats",
                 "pause", "validate_argument_spec", "end_play", "end_host")
)
#: The QUIET window of the session protocol: others start no long CPU-heavy command while this file exists.
QUIET_MAX_S = 25 * 60


# --------------------------------------------------------------------------------------------- pure helpers


@dataclass(frozen=True)
class TaskCount:
    """Task results and module runs of one host in one run."""

    tasks: int = 0
    skipped: int = 0
    module_runs: int = 0


def count_tasks(tasks: Iterable[Mapping[str, Any]]) -> dict[str, TaskCount]:
    """Per host, from ``RunResult.to_json()["tasks"]``: every task result, the skipped ones, and module runs.

    A module run is a task result that was not skipped and whose action starts a module on the host (not
    ``set_fact``, ``assert``..., nor a ``host_footprint`` probe its action plugin answered without the host); a
    loop counts one per item it ran. Action plugins that start two modules (``template``: stat, then copy) count
    once: a lower bound.
    """
    acc: dict[str, Counter[str]] = {}
    for t in tasks:
        c = acc.setdefault(str(t["host"]), Counter())
        c["tasks"] += 1
        if t["status"] == "skipped":
            c["skipped"] += 1
            continue
        if t["action"] in CONTROLLER_ACTIONS or (t.get("res") or {}).get("reread") is False:
            continue  # reread false: roles/host_footprint answered from this run's earlier reading
        items = [i for i in t.get("items") or [] if i.get("status") != "skipped"]
        c["module_runs"] += len(items) if t.get("items") else 1
    return {h: TaskCount(c["tasks"], c["skipped"], c["module_runs"]) for h, c in acc.items()}


def count_events(events: Iterable[Mapping[str, Any]]) -> dict[str, TaskCount]:
    """:func:`count_tasks` for raw ansible-runner events (``gpufleet drift --record``)."""
    tasks: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        kind, data = e.get("event", ""), e.get("event_data") or {}
        if kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            key = (str(data.get("host")), str(data.get("task_uuid")))
            status = kind.removeprefix("runner_on_")
            t = tasks.setdefault(key, {"host": data.get("host"), "action": data.get("task_action"), "items": []})
            t["status"] = status
            if isinstance(data.get("res"), Mapping):
                t["res"] = {"reread": data["res"].get("reread")}
        elif kind in ("runner_item_on_ok", "runner_item_on_failed", "runner_item_on_skipped"):
            key = (str(data.get("host")), str(data.get("task_uuid")))
            t = tasks.setdefault(key, {"host": data.get("host"), "action": data.get("task_action"), "items": [],
                                       "status": "ok"})
            t["items"].append({"status": kind.removeprefix("runner_item_on_")})
    return count_tasks(t for t in tasks.values() if "status" in t)


def cgroup_cpu_s(text: str, *, v2: bool) -> float:
    """CPU seconds from a cgroup file: v2 ``cpu.stat`` (``usage_usec``) or v1 ``cpuacct.usage`` (ns)."""
    if v2:
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise ValueError("cpu.stat has no usage_usec line")
    return int(text.strip()) / 1e9


@dataclass
class Measurement:
    """One measured command."""

    checkout: str
    n: int
    op: str
    wall_s: float
    rc: int
    #: The gpufleet/ansible process tree's CPU (user + system), from getrusage(RUSAGE_CHILDREN).
    controller_cpu_s: float
    #: The same tree from the cpuacct cgroup the command ran in (None where no cgroup could be made).
    controller_cpu_cgroup_s: float | None
    #: All sandbox containers' cgroup CPU time over the command, summed.
    node_cpu_s: float | None
    #: Their idle background over the same wall time (rate measured before the N's measurements).
    node_idle_cpu_s: float | None
    #: The stack's containerd shims (``docker exec``'s node-side plumbing).
    engine_shim_cpu_s: float | None
    #: dockerd + containerd (shared with every engineer's containers: only clean in a quiet window).
    engine_daemon_cpu_s: float | None
    hosts: int
    gpu_nodes: int
    load_start: float
    load_end: float
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    changed: int | None = None
    note: str = ""

    @property
    def total_tasks(self) -> int:
        return sum(c["tasks"] for c in self.counts.values())

    def derived(self) -> dict[str, float | None]:
        gpu = [c for h, c in self.counts.items() if not h.startswith("control")]
        tasks = self.total_tasks
        return {
            "controller_cpu_per_host_s": self.controller_cpu_s / self.hosts if self.hosts else None,
            "controller_cpu_per_host_task_ms": 1000 * self.controller_cpu_s / tasks if tasks else None,
            "node_cpu_per_host_s": (self.node_cpu_s / self.hosts
                                    if self.node_cpu_s is not None and self.hosts else None),
            "tasks_per_gpu_node": statistics.mean(c["tasks"] for c in gpu) if gpu else None,
            # -1: not counted (a plain ansible-playbook run's recap has no module runs).
            "module_runs_per_gpu_node": (statistics.mean(c["module_runs"] for c in gpu)
                                         if gpu and all(c["module_runs"] >= 0 for c in gpu) else None),
            "wall_per_host_task_ms": 1000 * self.wall_s / (tasks / self.hosts) if tasks and self.hosts else None,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"derived": self.derived()}


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def render_markdown(doc: Mapping[str, Any], *, title: str = "Scale bench",
                    harness: str = "benchmarks.scale") -> str:
    """The results as Markdown: machine facts, checkouts, one row per measured command (``title`` and the
    ``harness`` module for benches that reuse the table, benchmarks/slices.py)."""
    m = doc["machine"]
    lines = [
        f"# {title}, {doc['started']} to {doc.get('finished') or '(stopped early)'} UTC",
        "",
        f"Machine: {m['cores']} cores, {m['memory_gib']:.1f} GiB memory, kernel {m['kernel']}, "
        f"docker {m['docker']}, cgroup v{m['cgroup_version']}, Python {m['python']}.",
        f"Harness: `python -m {harness}` ({harness.replace('.', '/')}.py explains every column)."
        + (" Sittings (UTC): " + ", ".join(f"{a} to {b}" for a, b in doc["sittings"]) + "."
           if doc.get("sittings") else ""),
        "",
        "| checkout | commit | ansible-core |",
        "|---|---|---|",
        *[f"| {c['label']} | {c['commit'][:10]} {c['subject'][:70]} | {c['ansible_core']} |"
          for c in doc["checkouts"]],
        "",
        "Controller CPU: the gpufleet/ansible process tree (rusage of the waited children; the cgroup figure in "
        "brackets). Node CPU: all sandbox containers' cgroups, summed, idle background in brackets. Per host: "
        "over all hosts of the run (N GPU nodes + the control node). Tasks and module runs: per GPU node.",
        "",
        "| checkout | N | operation | wall s | ctrl CPU s [cgroup] | ctrl CPU s/host | ctrl ms/host-task "
        "| node CPU s [idle] | node CPU s/host | engine CPU s shims/daemons | tasks/GPU node "
        "| module runs/GPU node | changed | load 1m start→end | rc |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in doc["measurements"]:
        d = r["derived"]
        lines.append(
            f"| {r['checkout']} | {r['n']} | {r['op']} | {r['wall_s']:.1f} | {r['controller_cpu_s']:.1f} "
            f"[{_f(r['controller_cpu_cgroup_s'])}] | {_f(d['controller_cpu_per_host_s'], '.2f')} "
            f"| {_f(d['controller_cpu_per_host_task_ms'], '.0f')} | {_f(r['node_cpu_s'])} "
            f"[{_f(r['node_idle_cpu_s'])}] | {_f(d['node_cpu_per_host_s'], '.2f')} "
            f"| {_f(r.get('engine_shim_cpu_s'))}/{_f(r.get('engine_daemon_cpu_s'))} "
            f"| {_f(d['tasks_per_gpu_node'], '.0f')} | {_f(d['module_runs_per_gpu_node'], '.0f')} "
            f"| {'-' if r['changed'] is None else r['changed']} | {r['load_start']:.2f}→{r['load_end']:.2f} "
            f"| {r['rc']} |")
    goals = goal_ratios(doc)
    if goals:
        lines += ["", "Issue 17's goals at N = 1: medians of the runs above, after / before, measured in this run.", "",
                  "| goal | before | after | after / before | target |", "|---|---:|---:|---:|---|"]
        lines += [f"| {g['goal']} | {g['before']:.2f} | {g['after']:.2f} | {_f(g['ratio'], '.2f')} | {g['target']} |"
                  for g in goals]
    against = baseline_ratios(doc)
    if against:
        lines += ["", "Goals against a named baseline checkout (medians of the runs above, measured in this run).", "",
                  "| goal | baseline | N | baseline | after | after / baseline | target | met |",
                  "|---|---|---:|---:|---:|---:|---|---|"]
        lines += [f"| {g['goal']} | {g['baseline']} | {g['n']} | {g['before']:.2f} | {g['after']:.2f} "
                  f"| {g['ratio']:.2f} | {g['target']} | {'yes' if g['met'] else 'no'} |" for g in against]
    if doc.get("notes"):
        lines += ["", *[f"- {n}" for n in doc["notes"]]]
    return "\n".join(lines) + "\n"


#: Issue 17's goals: (what, operation at N = 1, figure, target). The no-op-versus-fresh goal is a ratio within
#: one checkout, listed with both checkouts' values.
GOALS: tuple[tuple[str, str, str, str], ...] = (
    ("controller CPU s per host, no-op converge", "no-op converge (site.yml)", "ctrl_per_host", "<= 0.50"),
    ("controller CPU s per host, drift check", "drift", "ctrl_per_host", "<= 0.50"),
    ("node CPU s per host, no-op converge", "no-op converge (site.yml)", "node_per_host", "<= 0.50"),
    ("nvidia_driver role no-op rerun, wall s", "nvidia_driver role alone, no-op rerun", "wall", "<= 0.50"),
)


def _figure(m: Mapping[str, Any], figure: str) -> float | None:
    d = m["derived"]
    value = {"ctrl_per_host": d.get("controller_cpu_per_host_s"), "node_per_host": d.get("node_cpu_per_host_s"),
             "wall": m.get("wall_s")}[figure]
    return float(value) if isinstance(value, int | float) else None


def goal_ratios(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 17's goals from a bench with an ``after`` and a ``before`` checkout: the median of each figure at
    N = 1 (an operation measured several times: ``--first-size-repeat``, ``--driver-repeat``), and their ratio."""
    labels = {m["checkout"] for m in doc["measurements"]}
    if not {"after", "before"} <= labels:
        return []

    def median(label: str, op: str, figure: str) -> float | None:
        values = [v for m in doc["measurements"]
                  if m["checkout"] == label and m["n"] == 1 and m["rc"] in (0, 2) and m["op"].startswith(op)
                  and (v := _figure(m, figure)) is not None]
        return statistics.median(values) if values else None

    out = []
    for goal, op, figure, target in GOALS:
        before, after = median("before", op, figure), median("after", op, figure)
        if before and after is not None:
            out.append({"goal": goal, "before": before, "after": after, "ratio": after / before, "target": target})
    within: dict[str, float] = {}
    for label in ("before", "after"):
        fresh = median(label, "fresh converge of one GPU node", "wall")
        noop = median(label, "no-op rerun of that node", "wall")
        if fresh and noop is not None:
            within[label] = noop / fresh
    if len(within) == 2:
        out.append({"goal": "a GPU node's no-op rerun / its fresh converge, wall", "before": within["before"],
                    "after": within["after"], "ratio": None, "target": "after <= 0.25"})
    return out


#: Goals against a named baseline checkout (label in ``--checkout``), any size: (issue and what, baseline label,
#: operation prefix, N, figure, the largest after / baseline allowed). Issue 26: the converged-host skip that sees
#: everything keeps the no-op converge and drift within 20% of the tree before it (label ``before26``). Issue 33
#: point 5: a host that changes costs at most what it did before the skip (label ``before``, the pre-skip tree).
BASELINE_GOALS: tuple[tuple[str, str, str, int, str, float], ...] = (
    ("issue 26: no-op converge, wall", "before26", "no-op converge (site.yml)", 1, "wall", 1.20),
    ("issue 26: no-op converge, controller CPU s per host", "before26", "no-op converge (site.yml)", 1,
     "ctrl_per_host", 1.20),
    ("issue 26: drift check, wall", "before26", "drift", 1, "wall", 1.20),
    ("issue 26: drift check, controller CPU s per host", "before26", "drift", 1, "ctrl_per_host", 1.20),
    ("issue 33: fresh converge of one GPU node, wall", "before", "fresh converge of one GPU node", 1, "wall", 1.00),
    ("issue 33: remediation of 16 nodes, wall", "before", "remediate", 16, "wall", 1.00),
    ("issue 33: remediation of 16 nodes, controller CPU s per host", "before", "remediate", 16, "ctrl_per_host",
     1.00),
)


def baseline_ratios(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """BASELINE_GOALS measured in this run: the median of each side (ops measured more than once), after / baseline,
    and whether it is within the goal. A goal whose baseline or size was not measured is left out."""
    def median(label: str, op: str, n: int, figure: str) -> float | None:
        values = [v for m in doc["measurements"]
                  if m["checkout"] == label and m["n"] == n and m["rc"] in (0, 2) and m["op"].startswith(op)
                  and (v := _figure(m, figure)) is not None]
        return statistics.median(values) if values else None

    out = []
    for goal, base, op, n, figure, most in BASELINE_GOALS:
        b, a = median(base, op, n, figure), median("after", op, n, figure)
        if b and a is not None:
            out.append({"goal": goal, "baseline": base, "n": n, "before": b, "after": a, "ratio": a / b,
                        "target": f"<= {most:.2f}", "met": a / b <= most})
    return out


# ---------------------------------------------------------------------------------------- the machine


def _out(*cmd: str, cwd: Path | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    return (r.stdout or r.stderr).strip()


def machine_facts() -> dict[str, Any]:
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    return {
        "cores": os.cpu_count(),
        "memory_gib": mem_kib / 2**20,
        "kernel": platform.release(),
        "docker": _out("docker", "version", "--format", "{{.Server.Version}}"),
        "cgroup_version": 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1,
        "python": platform.python_version(),
    }


def stack_containers() -> list[tuple[str, str]]:
    """(name, full id) of the local stack's containers."""
    out = _out("docker", "ps", "-a", "--no-trunc", "--filter", f"label={LABEL}", "--format", "{{.Names}} {{.ID}}")
    return sorted(tuple(line.split()) for line in out.splitlines() if line.strip())  # type: ignore[misc]


def _container_cgroup(cid: str) -> tuple[Path, bool] | None:
    for path, v2 in ((Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"), True),
                     (Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat"), True),
                     (Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage"), False),
                     (Path(f"/sys/fs/cgroup/cpu,cpuacct/docker/{cid}/cpuacct.usage"), False)):
        if path.exists():
            return path, v2
    return None


def node_cpu_s() -> float | None:
    """All local-stack containers' CPU seconds so far; None when a running container's cgroup is not found."""
    total = 0.0
    for _, cid in stack_containers():
        found = _container_cgroup(cid)
        if found is None:
            return None
        total += cgroup_cpu_s(found[0].read_text(), v2=found[1])
    return total


def node_memory_mib() -> dict[str, float]:
    out = _out("docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}")
    units = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "B": 1 / 2**20}
    mem: dict[str, float] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(f"gpufleet-{STACK}-"):
            for unit, scale in units.items():
                if parts[1].endswith(unit):
                    mem[parts[0]] = float(parts[1].removesuffix(unit)) * scale
                    break
    return mem


def _proc_cpu_s(pid: str, *, children: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # utime, stime, cutime, cstime are fields 14-17 of the line; the split starts at field 3.
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def engine_cpu_s() -> tuple[float, float]:
    """(the local stack's containerd shims, dockerd + containerd): CPU seconds so far.

    The container engine's work for ``docker exec`` is in neither the controller's nor the nodes' cgroups; the
    daemons serve every engineer's containers, so their figure is only clean in a quiet window. The processes a
    shim reaps are not counted: they are the exec'd commands themselves (in the node's cgroup already) and the
    short ``runc`` calls, whose CPU outside the node's cgroup no figure holds."""
    ids = {cid for _, cid in stack_containers()}
    shims = daemons = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            name = Path(cmd[0].decode(errors="replace")).name
            if name.startswith("containerd-shim"):
                args = [a.decode(errors="replace") for a in cmd]
                if "-id" in args and args[args.index("-id") + 1] in ids:
                    shims += _proc_cpu_s(proc.name, children=False)
            elif name in ("dockerd", "containerd"):
                daemons += _proc_cpu_s(proc.name, children=False)
        except (OSError, IndexError, ValueError):
            continue
    return shims, daemons


class ControllerCgroup:
    """A cpuacct cgroup (v1) or a child cgroup (v2) for the measured command; None-safe where not allowed."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.v2 = False
        name = f"gpufleet-scalebench-{os.getpid()}"
        for base, v2 in ((Path("/sys/fs/cgroup/cpuacct"), False), (Path("/sys/fs/cgroup/cpu,cpuacct"), False),
                         (Path("/sys/fs/cgroup"), True)):
            if v2 and not (base / "cgroup.controllers").exists():
                continue
            try:
                (base / name).mkdir(exist_ok=True)
            except OSError:
                continue
            self.path, self.v2 = base / name, v2
            break

    def join(self) -> None:
        """In the child (preexec_fn): move itself into the cgroup."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_s(self) -> float | None:
        if self.path is None:
            return None
        f = self.path / ("cpu.stat" if self.v2 else "cpuacct.usage")
        return cgroup_cpu_s(f.read_text(), v2=self.v2)

    def remove(self) -> None:
        if self.path is not None:
            # OSError: a process still lives in it (its CPU is then counted by the cgroup figure only).
            with contextlib.suppress(OSError):
                self.path.rmdir()


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------------------------------- checkouts


@dataclass
class Checkout:
    path: Path
    label: str
    sizes: list[int]

    @property
    def bin(self) -> Path:
        return self.path / ".venv" / "bin"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env.pop("VIRTUAL_ENV", None)
        env.pop("ANSIBLE_CONFIG", None)
        return env

    def facts(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": str(self.path),
            "commit": _out("git", "rev-parse", "HEAD", cwd=self.path),
            "subject": _out("git", "log", "-1", "--format=%s", cwd=self.path),
            "dirty": bool(_out("git", "status", "--porcelain", "--untracked-files=no", cwd=self.path)),
            "ansible_core": _out(str(self.bin / "python"), "-c",
                                 "from ansible.release import __version__; print(__version__)"),
            "forks": _out(str(self.bin / "python"), "-c",
                          "import configparser; c = configparser.ConfigParser(); c.read('ansible/ansible.cfg'); "
                          "print(c.get('defaults', 'forks', fallback='5'))", cwd=self.path),
            "sizes": self.sizes,
        }


def parse_checkout(text: str) -> Checkout:
    """``PATH=LABEL:1,4,8`` (sizes optional for ``noop-up``)."""
    path, _, rest = text.partition("=")
    label, _, sizes = rest.partition(":")
    p = Path(path).resolve()
    if not (p / ".venv" / "bin" / "gpufleet").exists():
        raise SystemExit(f"{p}: no .venv/bin/gpufleet (run `make .venv/.installed` there)")
    return Checkout(p, label or p.name, sorted({int(s) for s in sizes.split(",") if s}))


# ---------------------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, out: Path, log: Path) -> None:
        self.out = out
        self.log = log
        self.doc: dict[str, Any] = {"started": f"{datetime.now(UTC):%Y-%m-%d %H:%M}", "finished": None,
                                    "machine": machine_facts(), "checkouts": [], "measurements": [],
                                    "idle_node_cpu": [], "node_memory_mib": [], "notes": [],
                                    "stack": STACK}
        self.cgroup = ControllerCgroup()
        self.idle_rate = 0.0
        self.sitting_started = self.doc["started"]

    def say(self, msg: str) -> None:
        line = f"{datetime.now(UTC):%H:%M:%S} {msg}"
        print(line, flush=True)
        with self.log.open("a") as f:
            f.write(line + "\n")

    def save(self) -> None:
        self.out.with_suffix(".json").write_text(json.dumps(self.doc, indent=2, sort_keys=True) + "\n")
        self.out.with_suffix(".md").write_text(render_markdown(self.doc))

    def command(self, co: Checkout, cmd: Sequence[str], *, n: int, op: str | None, hosts: int = 0,
                ok_rc: Iterable[int] = (0,)) -> tuple[subprocess.CompletedProcess[str], Measurement | None]:
        """Run ``cmd`` in ``co``; with ``op`` record it as a measurement."""
        self.say(f"[{co.label} N={n}] {op or 'setup'}: {' '.join(cmd)}")
        load0 = os.getloadavg()[0]
        node0 = node_cpu_s()
        eng0 = engine_cpu_s()
        cg0 = self.cgroup.cpu_s()
        ru0 = _children_cpu()
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as err:
            r = subprocess.run(list(cmd), cwd=co.path, env=co.env(), stdout=subprocess.PIPE, stderr=err, text=True,
                               check=False, preexec_fn=self.cgroup.join)
            wall = time.monotonic() - t0
            ru1 = _children_cpu()
            cg1 = self.cgroup.cpu_s()
            node1 = node_cpu_s()
            eng1 = engine_cpu_s()
            err.seek(0)
            stderr = err.read()
        with self.log.open("a") as f:
            f.write(stderr[-20000:] + "\n")
        load1 = os.getloadavg()[0]
        if r.returncode not in set(ok_rc):
            self.say(f"  rc={r.returncode}: {stderr.strip()[-1500:]}")
        self.say(f"  {wall:.1f} s wall, controller {ru1 - ru0:.1f} s CPU, rc {r.returncode}")
        if op is None:
            return subprocess.CompletedProcess(r.args, r.returncode, r.stdout, stderr), None
        m = Measurement(
            checkout=co.label, n=n, op=op, wall_s=round(wall, 2), rc=r.returncode,
            controller_cpu_s=round(ru1 - ru0, 2),
            controller_cpu_cgroup_s=None if cg0 is None or cg1 is None else round(cg1 - cg0, 2),
            node_cpu_s=None if node0 is None or node1 is None else round(node1 - node0, 2),
            node_idle_cpu_s=round(self.idle_rate * wall, 2), engine_shim_cpu_s=round(eng1[0] - eng0[0], 2),
            engine_daemon_cpu_s=round(eng1[1] - eng0[1], 2), hosts=hosts, gpu_nodes=n,
            load_start=load0, load_end=load1)
        self.doc["measurements"].append(m)
        return subprocess.CompletedProcess(r.args, r.returncode, r.stdout, stderr), m

    def record(self, m: Measurement, *, counts: Mapping[str, TaskCount] | None = None, changed: int | None = None,
               note: str = "") -> None:
        if counts is not None:
            m.counts = {h: asdict(c) for h, c in counts.items()}
        m.changed = changed
        m.note = note
        self.doc["measurements"][-1] = m.to_json()
        self.save()

    # -- sandbox plumbing

    def reset(self, co: Checkout) -> None:
        """Remove the local stack's containers and the checkout's fact and module payload caches
        (gpufleet_ansiballz_cache, where the checkout has it): the checkout starts from nothing."""
        names = [name for name, _ in stack_containers()]
        if names:
            subprocess.run(["docker", "rm", "-f", *names], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(co.path / ".cache" / "facts"), str(co.path / ".cache" / "ansiballz")],
                       check=False)
        self.command(co, [str(co.bin / "python"), "-m", "gpufleet.sandbox.platform", "start"], n=0, op=None)

    def recreate_node(self, co: Checkout, host: str, n: int) -> None:
        """Remove ``host``'s container and cached facts and start it again, unconverged."""
        subprocess.run(["docker", "rm", "-f", f"gpufleet-{STACK}-{host}"], capture_output=True, check=False)
        (co.path / ".cache" / "facts" / host).unlink(missing_ok=True)
        script = ("from gpufleet.sandbox import cluster, platform\n"
                  "from gpufleet.workflow import resolve_stack\n"
                  f"cluster.up(resolve_stack({STACK!r}, up=True, gpu_nodes={n}).spec, platform.prepare().image)\n")
        r, _ = self.command(co, [str(co.bin / "python"), "-c", script], n=n, op=None)
        if r.returncode != 0:
            raise SystemExit(f"could not recreate {host}: {r.stderr[-2000:]}")

    def measure_idle(self, n: int, seconds: float = 15.0) -> None:
        a = node_cpu_s()
        time.sleep(seconds)
        b = node_cpu_s()
        self.idle_rate = 0.0 if a is None or b is None else (b - a) / seconds
        self.doc["idle_node_cpu"].append({"n": n, "cpu_s_per_s": round(self.idle_rate, 4)})
        self.doc["node_memory_mib"].append({"n": n, "containers": node_memory_mib()})
        self.say(f"  idle node background at N={n}: {self.idle_rate:.3f} CPU s/s")

    # -- measured operations

    def converge(self, co: Checkout, n: int, op: str, *, limit: str | None = None, hosts: int) -> None:
        cmd = [str(co.bin / "gpufleet"), "converge", "--stack", STACK, "--json"]
        if limit:
            cmd += ["--limit", limit]
        r, m = self.command(co, cmd, n=n, op=op, hosts=hosts)
        assert m is not None
        try:
            data = json.loads(r.stdout)
        except ValueError:
            self.record(m, note="no JSON on stdout")
            return
        changed = sum(len(v) for v in data.get("changed", {}).values())
        self.record(m, counts=count_tasks(data.get("tasks", [])), changed=changed, note=data.get("verdict", ""))

    def drift(self, co: Checkout, n: int, *, hosts: int, record: bool = False) -> None:
        cmd = [str(co.bin / "gpufleet"), "drift", "--stack", STACK, "--json"]
        with tempfile.TemporaryDirectory() as tmp:
            rec = Path(tmp) / "events.jsonl"
            if record:
                cmd += ["--record", str(rec)]
            r, m = self.command(co, cmd, n=n, op="drift", hosts=hosts, ok_rc=(0, 2))
            assert m is not None
            counts = None
            if record and rec.exists():
                counts = count_events(json.loads(line) for line in rec.read_text().splitlines() if line.strip())
        try:
            data = json.loads(r.stdout)
            note = data.get("verdict", "")
            changed = len(data.get("items", []))
        except ValueError:
            note, changed = "no JSON on stdout", None
        self.record(m, counts=counts, changed=changed, note=note)

    def audit(self, co: Checkout, n: int, *, hosts: int) -> None:
        """`gpufleet audit` of the whole stack (issue 28: wall and controller CPU at 16 nodes). Read-only, so it
        changes nothing the next measurement sees; a checkout from before the audit existed is not asked."""
        if not (co.path / "gpufleet" / "audit").is_dir():
            self.say(f"[{co.label} N={n}] no `gpufleet audit` in this checkout: not measured")
            return
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [str(co.bin / "gpufleet"), "audit", "--stack", STACK, "--json", "--report", tmp]
            r, m = self.command(co, cmd, n=n, op="audit (read-only, every host)", hosts=hosts, ok_rc=(0, 2))
        assert m is not None
        try:
            data = json.loads(r.stdout)
            found = data.get("findings", [])
            note = (f"{len(data.get('hosts', []))} hosts read, {len(found)} findings "
                    f"({', '.join(sorted({f.get('id', '?') for f in found})) or 'none'})")
            changed: int | None = 0
        except ValueError:
            note, changed = "no JSON on stdout", None
        self.record(m, changed=changed, note=note)

    def power_limits(self, gpu_hosts: Sequence[str]) -> dict[str, list[str]]:
        out = {}
        for h in gpu_hosts:
            out[h] = _out("docker", "exec", f"gpufleet-{STACK}-{h}", "nvidia-smi", "--query-gpu=power.limit",
                          "--format=csv,noheader,nounits").split()
        return out

    def remediation(self, co: Checkout, n: int, *, hosts: int) -> None:
        gpu_hosts = [f"gpu-{i}" for i in range(n)]
        for h in gpu_hosts:
            subprocess.run(["docker", "exec", f"gpufleet-{STACK}-{h}", "nvidia-smi", "-pl", str(DRIFTED_POWER_W)],
                           capture_output=True, check=True)
        before = self.power_limits(gpu_hosts)
        r, m = self.command(co, [str(co.bin / "gpufleet"), "remediate", "--stack", STACK, "--batch", "25%",
                                 "--json"], n=n, op="remediate --batch 25% (power limit)", hosts=hosts)
        assert m is not None
        after = self.power_limits(gpu_hosts)
        restored = all(set(v) == {f"{float(after[gpu_hosts[0]][0]):.2f}"} for v in after.values()) and all(
            float(w) != DRIFTED_POWER_W for v in after.values() for w in v)
        set_ok = all(float(w) == DRIFTED_POWER_W for v in before.values() for w in v)
        try:
            data = json.loads(r.stdout)
            plans = len(data.get("plans", []))
            runs = data.get("remediation", {})
            note = (f"{plans} host plans, batch {data.get('batch_size')}; drift set: {set_ok}; "
                    f"limits restored: {restored} ({sorted({w for v in after.values() for w in v})} W); "
                    f"ok: {runs.get('ok')}")
        except ValueError:
            note, plans = "no JSON on stdout", 0
        self.record(m, changed=plans, note=note)

    def driver_role(self, co: Checkout, host: str, repeat: int) -> None:
        inventory = co.path / "inventories" / STACK / "hosts.yml"
        env_cfg = str(co.path / "ansible" / "ansible.cfg")
        for i in range(repeat):
            cmd = ["env", f"ANSIBLE_CONFIG={env_cfg}", str(co.bin / "ansible-playbook"), "-i", str(inventory),
                   "--limit", host, str(DRIVER_PLAYBOOK)]
            r, m = self.command(co, cmd, n=1, op=f"nvidia_driver role alone, no-op rerun {i + 1}", hosts=1)
            assert m is not None
            recap = [line for line in r.stdout.splitlines() if line.startswith(host) and "ok=" in line]
            counts = None
            changed = None
            if recap:
                fields = dict(kv.split("=") for kv in recap[-1].split()[2:] if "=" in kv)
                ok, skipped = int(fields.get("ok", 0)), int(fields.get("skipped", 0))
                changed = int(fields.get("changed", 0))
                counts = {host: TaskCount(ok + skipped + int(fields.get("failed", 0)), skipped, -1)}
            self.record(m, counts=counts, changed=changed, note=recap[-1].strip() if recap else "no recap")

    def grow(self, co: Checkout, n: int, idx: int) -> None:
        r, m = self.command(co, [str(co.bin / "gpufleet"), "up", "--stack", STACK, "--gpu-nodes", str(n)],
                            n=n, op=f"up --gpu-nodes {n} ({'create' if idx == 0 else 'grow'} + converge)", hosts=n + 1)
        assert m is not None
        self.record(m, note=r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else "")
        if r.returncode != 0:
            self.doc["notes"].append(f"{co.label}: up --gpu-nodes {n} failed (rc {r.returncode})")
            self.save()
            raise SystemExit(f"up --gpu-nodes {n} failed")

    def run_checkout(self, co: Checkout, *, fresh: bool, driver_repeat: int, quiet_at: int | None,
                     quiet_file: Path, skip_remediation: Sequence[int] = (), make_up_runs: int = 0,
                     reset: bool = True, first_size_repeat: int = 1, audit_at: Sequence[int] = ()) -> None:
        self.doc["checkouts"].append(co.facts())
        self.save()
        running = sum(1 for name, _ in stack_containers() if name.startswith(f"gpufleet-{STACK}-gpu-"))
        if reset:
            self.reset(co)
        for idx, n in enumerate(co.sizes):
            # The quiet window (--quiet-at) holds the whole size: growing the sandbox to it as well, since under
            # other engineers' load that alone takes longer than the window.
            with quiet(quiet_file if quiet_at is not None and n >= quiet_at else None, self.say):
                self.one_size(co, n, idx, fresh=fresh, driver_repeat=driver_repeat,
                              grow=not (idx == 0 and not reset and running == n),
                              remediate=n not in skip_remediation, repeat=first_size_repeat if idx == 0 else 1,
                              audit=n in audit_at)
            if idx == 0 and make_up_runs:
                # Issue 11's no-op `make up` (the stack's own size: 2 GPU nodes): one converge, then the timed runs.
                noop_up_runs(self, co, make_up_runs)

    def one_size(self, co: Checkout, n: int, idx: int, *, fresh: bool, driver_repeat: int, grow: bool,
                 remediate: bool, repeat: int = 1, audit: bool = False) -> None:
        hosts = n + 1
        if grow:
            self.grow(co, n, idx)
        else:
            self.say(f"[{co.label} N={n}] the stack runs {n} GPU nodes already (--no-reset): no `up`")
        if idx == 0 and fresh:
            # The control node alone cannot converge (slurm waits for its compute nodes to register), so
            # one GPU node is made fresh again after the first `up`: its container and cached facts.
            self.recreate_node(co, "gpu-0", n)
            self.converge(co, n, "fresh converge of one GPU node (--limit gpu-0)", limit="gpu-0", hosts=1)
            self.converge(co, n, "no-op rerun of that node (--limit gpu-0)", limit="gpu-0", hosts=1)
            if driver_repeat:
                self.driver_role(co, "gpu-0", driver_repeat)
        self.measure_idle(n)
        # ``repeat`` (--first-size-repeat, first size only): the goals compare medians, not one sample each.
        for _ in range(repeat):
            self.converge(co, n, "no-op converge (site.yml)", hosts=hosts)
            # Recorded (``--record``): the per-host task counts come from its events; the recording's own cost
            # (keeping and scrubbing the events) is in every checkout's figure alike.
            self.drift(co, n, hosts=hosts, record=True)
        if audit:
            self.audit(co, n, hosts=hosts)
        if remediate:
            self.remediation(co, n, hosts=hosts)

    def finish(self) -> None:
        self.doc["finished"] = f"{datetime.now(UTC):%Y-%m-%d %H:%M}"
        if "sittings" in self.doc:
            self.doc["sittings"].append([self.sitting_started, self.doc["finished"]])
        self.save()
        self.cgroup.remove()


@contextmanager
def quiet(path: Path | None, say: Any) -> Iterator[None]:
    """The session's QUIET window around a wall-time-sensitive part (removed after, and never kept longer
    than :data:`QUIET_MAX_S`: a watchdog removes it)."""
    if path is None:
        yield
        return
    path.write_text(f"scalebench: quiet measurement since {datetime.now(UTC):%H:%M} UTC, at most 25 min\n")
    say(f"created {path}")
    watchdog = subprocess.Popen(["sh", "-c", f"sleep {QUIET_MAX_S}; rm -f {path}"], start_new_session=True)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        watchdog.kill()
        watchdog.wait()
        say(f"removed {path}")


# ---------------------------------------------------------------------------------------- no-op make up


def noop_up_runs(bench: Bench, co: Checkout, runs: int) -> None:
    for i in range(runs + 1):
        op = "make up (first converge)" if i == 0 else f"no-op make up {i}"
        r, m = bench.command(co, ["make", "up"], n=2, op=op, hosts=3)
        assert m is not None
        tail = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        bench.record(m, note=tail[:200])


def noop_up(bench: Bench, checkouts: Sequence[Checkout], runs: int) -> None:
    for co in checkouts:
        bench.doc["checkouts"].append(co.facts())
        bench.reset(co)
        noop_up_runs(bench, co, runs)


# ---------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="the scale table")
    run.add_argument("--checkout", action="append", help="PATH=LABEL:N,N,... (measured in order; default: this "
                     "checkout at N = 1, 4, 8, 16)")
    run.add_argument("--no-fresh", dest="fresh", action="store_false", help="skip the fresh/no-op node pair")
    run.add_argument("--driver-repeat", type=int, default=3, help="nvidia_driver role no-op reruns (0: none)")
    run.add_argument("--first-size-repeat", type=int, default=1,
                     help="no-op converges and drift checks at each checkout's first size (medians in the goals)")
    run.add_argument("--quiet-at", type=int, default=None, help="create the QUIET file for N >= this")
    run.add_argument("--quiet-file", type=Path, default=Path("/work/QUIET"))
    run.add_argument("--no-reset", dest="reset", action="store_false",
                     help="keep the running sandbox (the first size's `up` is skipped when it runs that many nodes)")
    run.add_argument("--make-up-runs", type=int, default=0,
                     help="after the first size: `make up` once and this many timed no-op `make up` runs (issue 11)")
    run.add_argument("--skip-remediation", default="", help="N,N,...: sizes measured without the remediation")
    run.add_argument("--audit-at", default="", help="N,N,...: sizes at which `gpufleet audit` of every host is "
                     "measured (checkouts that have it)")
    run.add_argument("--resume", action="store_true",
                     help="append to the results at --out (another sitting of the same bench: say so in its notes)")
    run.add_argument("--out", type=Path, default=None, help="results path without suffix")
    up = sub.add_parser("noop-up", help="issue 11's no-op make up, per checkout")
    up.add_argument("--checkout", action="append", required=True, help="PATH=LABEL")
    up.add_argument("--runs", type=int, default=3)
    up.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    checkouts = [parse_checkout(c) for c in args.checkout or [f"{HERE.parent}=current:1,4,8,16"]]
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M}"
    out = args.out or RESULTS / (f"{stamp}-scale" if args.cmd == "run" else f"{stamp}-noop-make-up")
    out.parent.mkdir(parents=True, exist_ok=True)
    bench = Bench(out, out.with_suffix(".log"))
    if getattr(args, "resume", False) and out.with_suffix(".json").exists():
        previous = json.loads(out.with_suffix(".json").read_text())
        for key in ("checkouts", "measurements", "idle_node_cpu", "node_memory_mib", "notes"):
            bench.doc[key] = previous.get(key, []) + bench.doc[key]
        bench.doc["started"] = previous["started"]
        bench.doc["sittings"] = [*previous.get("sittings", [[previous["started"], previous.get("finished")]])]
    try:
        if args.cmd == "run":
            for co in checkouts:
                bench.run_checkout(co, fresh=args.fresh, driver_repeat=args.driver_repeat, quiet_at=args.quiet_at,
                                   quiet_file=args.quiet_file,
                                   skip_remediation=[int(x) for x in args.skip_remediation.split(",") if x],
                                   make_up_runs=args.make_up_runs, reset=args.reset,
                                   first_size_repeat=args.first_size_repeat,
                                   audit_at=[int(x) for x in args.audit_at.split(",") if x])
        else:
            noop_up(bench, checkouts, args.runs)
    finally:
        bench.finish()
    print(render_markdown(bench.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

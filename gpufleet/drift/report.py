"""The drift report: every task a check-mode run of site.yml would change, per host and component.

A component is the role that owns the task (tasks outside roles count under their play). The report is
built from a ``RunResult`` (live or replayed from recorded runner events) plus, where the caller kept
them, the untrimmed module results of changed tasks (``RawResults``): apt's full simulated output names
every package's installed and locked version, and ``RunResult`` keeps only its first 2000 characters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from gpufleet.ansible_run import RunResult, TaskResult, changes_by_host
from gpufleet.drift import dpkg, security
from gpufleet.drift.messages import Kind, interrupted_message, messages

#: Roles whose package or reboot changes stop GPU workloads (driver, fabric manager, kernel module reload).
DISRUPTIVE_COMPONENTS = frozenset({"nvidia_driver", "nvidia_fabricmanager", "fabricmanager"})
#: A task tagged like this is disruptive whatever its role (e.g. a kernel module reload).
DISRUPTIVE_TAG = "disruptive"

EXIT_IN_SYNC, EXIT_ERROR, EXIT_DRIFTED = 0, 1, 2


def _task_key(host: str, task_uuid: Any, task_path: Any) -> tuple[str, str]:
    # The task's uuid, not its path: every package role imports roles/pinned_packages/tasks/install.yml, so one
    # path is several tasks on a host, and keyed by path one role's result (the driver's changed hold) would
    # stand for another's (NCCL's unchanged dpkg read: its packages' hold state lost). Old recordings: the path.
    return host, f"uuid:{task_uuid}" if task_uuid else f"path:{task_path}"


class RawResults:
    """Event sink keeping the full ``res`` of changed task results, keyed by (host, task)."""

    def __init__(self) -> None:
        self.by_task: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, event: Mapping[str, Any]) -> None:
        if event.get("event") != "runner_on_ok":
            return
        data: Mapping[str, Any] = event.get("event_data") or {}
        res = data.get("res")
        if isinstance(res, Mapping) and res.get("changed") and isinstance(data.get("host"), str):
            self.by_task[_task_key(str(data["host"]), data.get("task_uuid"), data.get("task_path"))] = dict(res)

    def get(self, task: TaskResult) -> dict[str, Any] | None:
        return self.by_task.get(_task_key(task.host, task.task_uuid, task.task_path))


#: Play-level tasks that read the host and manage nothing: they are not a component of their own.
_NOT_COMPONENTS = frozenset({"ansible.builtin.gather_facts", "gather_facts", "ansible.builtin.setup", "setup",
                             "ansible.builtin.meta", "meta"})


def component_of(task: TaskResult) -> str | None:
    """The role that owns the task; a task outside roles counts under its playbook file's name.

    Play names are prose ("GPU nodes - pinned NVIDIA driver ..."), renamed at will and not a component;
    fact gathering at the start of a play manages nothing and counts nowhere (None).
    """
    if task.role:
        return task.role
    if task.action in _NOT_COMPONENTS:
        return None
    path = (task.task_path or "").rsplit(":", 1)[0]
    return PurePosixPath(path).stem if path else "site"


def site_probe_covers(task: TaskResult) -> list[str]:
    """The roles a host skips whole because site.yml's first probe found it converged (roles/host_footprint/tasks/
    site.yml): the probe's ``covers``, the roles its site record was written after."""
    res = task.res
    if task.status != "ok" or not task.action.endswith("host_footprint") or not res.get("converged"):
        return []
    return [str(r) for r in res.get("covers") or [] if isinstance(r, str)]


def is_disruptive(component: str, kind: Kind, tags: list[str]) -> bool:
    if kind == "reboot" or DISRUPTIVE_TAG in tags:
        return True
    return component in DISRUPTIVE_COMPONENTS and kind in ("package", "dpkg", "other")


@dataclass
class DriftItem:
    """One pending change on one host: what it is, from what to what."""

    host: str
    component: str
    kind: Kind
    task: str
    message: str
    diff: str = ""
    disruptive: bool = False
    #: ``security`` when the change weakens what apt or munge trusts (``gpufleet.drift.security``), else ``normal``.
    severity: security.Severity = "normal"

    def line(self) -> str:
        flag = "SECURITY " if self.severity == "security" else ""
        return f"{self.host} {self.component}: {flag}{self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "component": self.component, "kind": self.kind, "task": self.task,
                "message": self.message, "diff": self.diff, "disruptive": self.disruptive,
                "severity": self.severity}


@dataclass
class DriftReport:
    hosts: list[str]
    #: Every component (role) that ran on each host, drifted or not: the metric reports each as 0 or 1.
    components: dict[str, list[str]]
    items: list[DriftItem] = field(default_factory=list)
    #: ``host: task: message`` of failed or unreachable hosts; their drift is unknown.
    errors: list[str] = field(default_factory=list)
    verdict: str = ""
    #: Hosts whose check failed (a task failed on them) and hosts that stopped answering (unreachable,
    #: timed out): both need a rerun (``--limit``) once fixed.
    failed_hosts: list[str] = field(default_factory=list)
    unreachable_hosts: list[str] = field(default_factory=list)

    @property
    def error_hosts(self) -> list[str]:
        return sorted({*self.failed_hosts, *self.unreachable_hosts})

    @property
    def drifted_hosts(self) -> list[str]:
        return sorted({i.host for i in self.items})

    def drifted(self, host: str, component: str) -> bool:
        return any(i.host == host and i.component == component for i in self.items)

    def for_host(self, host: str) -> list[DriftItem]:
        return [i for i in self.items if i.host == host]

    def security(self, host: str, component: str | None = None) -> list[DriftItem]:
        return [i for i in self.items if i.host == host and i.severity == "security"
                and (component is None or i.component == component)]

    @property
    def security_items(self) -> list[DriftItem]:
        return [i for i in self.items if i.severity == "security"]

    def needs_drain(self, host: str) -> bool:
        return any(i.disruptive for i in self.for_host(host))

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_ERROR
        return EXIT_DRIFTED if self.items else EXIT_IN_SYNC

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "gpufleet.drift/1",
            "in_sync": not self.items and not self.errors,
            "exit_code": self.exit_code,
            "hosts": {h: {"drifted": bool(self.for_host(h)), "needs_drain": self.needs_drain(h),
                          "security": bool(self.security(h)),
                          "components": {c: self.drifted(h, c) for c in self.components.get(h, [])}}
                      for h in self.hosts},
            "items": [i.to_json() for i in self.items],
            "errors": list(self.errors),
            "unreachable": list(self.unreachable_hosts),
            "rerun": self.error_hosts,
            "verdict": self.verdict,
        }


def merge_reports(reports: Sequence[DriftReport]) -> DriftReport:
    """One report of several check jobs over disjoint hosts (the parallel drift workflow's jobs, each with its
    ``--limit``). A host two jobs both checked is an error in the merged report: their limits overlap, so which
    job's state counts is unknown."""
    seen: dict[str, int] = {}  # host -> the job that checked it first, in the jobs' order
    errors: list[str] = []
    for n, r in enumerate(reports, 1):
        for h in r.hosts:
            if h in seen:
                errors.append(f"{h}: checked by job {seen[h]} and job {n} (their --limit ranges overlap)")
            else:
                seen[h] = n
    return DriftReport(
        hosts=list(seen), components={h: c for r in reports for h, c in r.components.items()},
        items=[i for r in reports for i in r.items], errors=[*(e for r in reports for e in r.errors), *errors],
        verdict="; ".join(r.verdict for r in reports if r.verdict),
        failed_hosts=sorted({h for r in reports for h in r.failed_hosts}),
        unreachable_hosts=sorted({h for r in reports for h in r.unreachable_hosts}))


def interrupted_items(result: RunResult, packages: Mapping[str, Mapping[str, dpkg.PackageState]]) -> list[DriftItem]:
    """One finding per host and component whose packages an interrupted dpkg run left half done (``iU``,
    ``iHR``): a state of its own, not a version difference. It counts for the component whose task asked for the
    package by name (an interrupted driver package drains the node); one no role names counts under ``site``."""
    owner: dict[tuple[str, str], tuple[str, str]] = {}
    for t in result.tasks:
        if t.status in ("ok", "changed"):
            for name in dpkg.named_by(t.action, t.res):
                owner.setdefault((t.host, name), (component_of(t) or "site", t.label))
    found: dict[tuple[str, str, str], list[dpkg.PackageState]] = {}
    for host, pkgs in packages.items():
        for st in pkgs.values():
            if st.interrupted:
                comp, task = owner.get((host, st.name), ("site", "dpkg"))
                found.setdefault((host, comp, task), []).append(st)
    return [DriftItem(host, comp, "dpkg", task, interrupted_message(states),
                      disruptive=is_disruptive(comp, "dpkg", []))
            for (host, comp, task), states in found.items()]


def build_report(result: RunResult, raw: RawResults | None = None) -> DriftReport:
    """Drift report of a check-mode run (``result.check`` should be true: a real run changes the hosts)."""
    components: dict[str, list[str]] = {h: [] for h in result.hosts}
    for t in result.tasks:
        comp = component_of(t)
        components.setdefault(t.host, [])
        if comp is not None and t.status != "skipped" and comp not in components[t.host]:
            components[t.host].append(comp)
        # A host site.yml's first play found converged runs none of its roles: the probe names those it skips.
        for role in site_probe_covers(t):
            if role not in components[t.host]:
                components[t.host].append(role)
    packages = dpkg.fold((t.host, t.action, (raw.get(t) if raw else None) or t.res)
                         for t in result.tasks if t.status in ("ok", "changed"))
    items = interrupted_items(result, packages)
    for host, tasks in changes_by_host(result).items():
        for t in tasks:
            comp = component_of(t) or "site"
            full = raw.get(t) if raw else None
            kind, lines, diff = messages(t, full, packages.get(host))
            disruptive = is_disruptive(comp, kind, t.tags)
            weak = security.task_findings(t.action, full if full is not None else t.res, t.diff)
            for n, line in enumerate(lines):
                reasons = [r for path, rs in weak.items() if path in line or len(lines) == 1 for r in rs]
                if reasons:
                    line = f"{line} ({'; '.join(dict.fromkeys(reasons))})"
                items.append(DriftItem(host, comp, kind, t.label, line, diff if n == 0 else "", disruptive,
                                       "security" if reasons else "normal"))
    errors: list[str] = []
    conflicted: set[str] = set()
    erred: set[str] = set()
    for t in result.failures:
        # apt refusing two sources for one repository (a cuda-keyring copy next to gpufleet's) is the host's state,
        # a finding like any other drift, not an error of the check (issue 28 point 4).
        found = [] if t.lost else security.apt_conflicts(_failure_text(t))
        for c in found:
            items.append(DriftItem(t.host, component_of(t) or "site", "file", t.label,
                                   c.message() + "; the check stopped here on this host", severity=c.severity))
        if found:
            conflicted.add(t.host)
        else:
            erred.add(t.host)
            errors.append(f"{t.host}: {t.label}: {t.reason}")
    if not result.ok and not errors and not conflicted:
        errors.append(result.verdict())
    # Hosts finish in any order; sorted output stays comparable between runs.
    items.sort(key=lambda i: i.host)
    return DriftReport(hosts=sorted(components), components=components, items=items, errors=errors,
                       verdict=result.verdict(),
                       failed_hosts=sorted(h for h in result.failed_hosts if h in erred or h not in conflicted),
                       unreachable_hosts=sorted(result.unreachable_hosts))


def _failure_text(t: TaskResult) -> str:
    """What a failed task said: its message and the command's output (apt prints its errors on stderr)."""
    return "\n".join(str(v) for v in (t.msg, t.res.get("stderr"), t.res.get("stdout")) if v)


def render_text(report: DriftReport, *, diffs: bool = True) -> str:
    """The report as the operator reads it: host by host, component by component, diffs indented."""
    out: list[str] = []
    for host in report.hosts:
        items = report.for_host(host)
        if not items:
            continue
        drain = " (needs drain)" if report.needs_drain(host) else ""
        out.append(f"{host}{drain}")
        for item in items:
            out.append(f"  {item.line()}")
            if diffs and item.diff:
                out.extend("      " + ln for ln in item.diff.rstrip("\n").splitlines())
    out.extend(f"error: {e}" for e in report.errors)
    if report.security_items:
        hosts = sorted({i.host for i in report.security_items})
        out.append(f"security: {len(report.security_items)} finding(s) weaken what apt or munge trusts on "
                   f"{', '.join(hosts)}")
    if report.exit_code == EXIT_IN_SYNC:
        out.append(f"in sync: {len(report.hosts)} host(s), nothing would change")
    elif report.items:
        out.append(f"drifted: {len(report.items)} change(s) on {', '.join(report.drifted_hosts)}")
    if report.error_hosts:
        out.append(f"drift unknown on {', '.join(report.error_hosts)}: fix them, then rerun with "
                   f"--limit {','.join(report.error_hosts)}")
    return "\n".join(out)

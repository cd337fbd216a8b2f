"""The drift report: every task a check-mode run of site.yml would change, per host and component.

A component is the role that owns the task (tasks outside roles count under their play). The report is
built from a ``RunResult`` (live or replayed from recorded runner events) plus, where the caller kept
them, the untrimmed module results of changed tasks (``RawResults``): apt's full simulated output names
every package's installed and locked version, and ``RunResult`` keeps only its first 2000 characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.ansible_run import RunResult, TaskResult, changes_by_host
from gpufleet.drift.messages import Kind, messages

#: Roles whose package or reboot changes stop GPU workloads (driver, fabric manager, kernel module reload).
DISRUPTIVE_COMPONENTS = frozenset({"nvidia_driver", "nvidia_fabricmanager", "fabricmanager"})
#: A task tagged like this is disruptive whatever its role (e.g. a kernel module reload).
DISRUPTIVE_TAG = "disruptive"

EXIT_IN_SYNC, EXIT_ERROR, EXIT_DRIFTED = 0, 1, 2


class RawResults:
    """Event sink keeping the full ``res`` of changed task results, keyed by (host, task_path)."""

    def __init__(self) -> None:
        self.by_task: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, event: Mapping[str, Any]) -> None:
        if event.get("event") != "runner_on_ok":
            return
        data: Mapping[str, Any] = event.get("event_data") or {}
        res = data.get("res")
        if isinstance(res, Mapping) and res.get("changed") and isinstance(data.get("host"), str):
            self.by_task[(str(data["host"]), str(data.get("task_path")))] = dict(res)

    def get(self, task: TaskResult) -> dict[str, Any] | None:
        return self.by_task.get((task.host, str(task.task_path)))


def component_of(task: TaskResult) -> str:
    return task.role or task.play or "site"


def is_disruptive(component: str, kind: Kind, tags: list[str]) -> bool:
    if kind == "reboot" or DISRUPTIVE_TAG in tags:
        return True
    return component in DISRUPTIVE_COMPONENTS and kind in ("package", "other")


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

    def line(self) -> str:
        return f"{self.host} {self.component}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "component": self.component, "kind": self.kind, "task": self.task,
                "message": self.message, "diff": self.diff, "disruptive": self.disruptive}


@dataclass
class DriftReport:
    hosts: list[str]
    #: Every component (role) that ran on each host, drifted or not: the metric reports each as 0 or 1.
    components: dict[str, list[str]]
    items: list[DriftItem] = field(default_factory=list)
    #: ``host: task: message`` of failed or unreachable hosts; their drift is unknown.
    errors: list[str] = field(default_factory=list)
    verdict: str = ""

    @property
    def drifted_hosts(self) -> list[str]:
        return sorted({i.host for i in self.items})

    def drifted(self, host: str, component: str) -> bool:
        return any(i.host == host and i.component == component for i in self.items)

    def for_host(self, host: str) -> list[DriftItem]:
        return [i for i in self.items if i.host == host]

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
                          "components": {c: self.drifted(h, c) for c in self.components.get(h, [])}}
                      for h in self.hosts},
            "items": [i.to_json() for i in self.items],
            "errors": list(self.errors),
            "verdict": self.verdict,
        }


def build_report(result: RunResult, raw: RawResults | None = None) -> DriftReport:
    """Drift report of a check-mode run (``result.check`` should be true: a real run changes the hosts)."""
    components: dict[str, list[str]] = {h: [] for h in result.hosts}
    for t in result.tasks:
        comp = component_of(t)
        if t.status != "skipped" and comp not in components.setdefault(t.host, []):
            components[t.host].append(comp)
    items: list[DriftItem] = []
    for host, tasks in changes_by_host(result).items():
        for t in tasks:
            comp = component_of(t)
            kind, lines, diff = messages(t, raw.get(t) if raw else None)
            disruptive = is_disruptive(comp, kind, t.tags)
            items.extend(DriftItem(host, comp, kind, t.label, line, diff if n == 0 else "", disruptive)
                         for n, line in enumerate(lines))
    errors = [f"{t.host}: {t.label}: {(t.msg or t.status).strip().splitlines()[0]}" for t in result.failures]
    if not result.ok and not errors:
        errors.append(result.verdict())
    # Hosts finish in any order; sorted output stays comparable between runs.
    items.sort(key=lambda i: i.host)
    return DriftReport(hosts=sorted(components), components=components, items=items, errors=errors,
                       verdict=result.verdict())


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
    if report.exit_code == EXIT_IN_SYNC:
        out.append(f"in sync: {len(report.hosts)} host(s), nothing would change")
    elif report.items:
        out.append(f"drifted: {len(report.items)} change(s) on {', '.join(report.drifted_hosts)}")
    return "\n".join(out)

"""What one playbook run did: per-task and per-host results, and their JSON form.

``RunResult.to_json()`` returns a dict with these stable keys (``schema`` changes if any is renamed)::

    schema      1
    ok          bool: rc == 0 and no host failed or was unreachable
    rc          ansible-playbook's exit status (-1 when it never ran)
    status      the run's status: successful | failed (ansible-playbook's exit status) | unknown
    check       bool: the run was --check (``changed`` then means "would change")
    verdict     the closing one-line verdict, as printed
    hosts       {host: {ok, changed, failed, skipped, unreachable, rescued, ignored, state}}
                (ansible's PLAY RECAP numbers; ``ok`` includes changed tasks, as in the recap;
                state: running | done | failed | unreachable)
    changed     {host: [task label, ...]}  tasks that changed (or would change in check mode)
    failed      [{host, task, msg, lost, duration}]  failures that were not ignored, and unreachable hosts
                (lost: why the host stopped answering or timed out, else null; duration: seconds
                the task ran, i.e. the time waited for the host)
    rerun       [host, ...]  hosts that failed or stopped answering: rerun with --limit these
    notices     [{host, event, detail, line}]  what modules asked the summary to say (a result's
                ``gpufleet_notice``: the dpkg_hold module's recovery of an interrupted dpkg run), in run order
    tasks       [task, ...] in event order, each:
                  host, play, role, task, action, status (ok|changed|failed|skipped|unreachable),
                  changed, ignored (a failure under ignore_errors), msg, tags, task_path,
                  diff [{before, after, before_header?, after_header?, prepared?}] (entries that
                        show a change; a loop's are its items'),
                  items [{item, status, changed, msg}], res (module result minus bulky fields),
                  lost (the host stopped answering or the task timed out: why), duration (seconds)
    log_tail    last lines ansible printed outside task results (why a run that never started failed)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA = 1

TaskStatus = Literal["ok", "changed", "failed", "skipped", "unreachable"]
HostState = Literal["running", "done", "failed", "unreachable"]

#: Result keys dropped from ``TaskResult.res``: module arguments echoed back, duplicated line
#: lists, facts (often tens of kB per host), and the diff, which ``TaskResult.diff`` holds.
BULKY_RES_KEYS = frozenset(
    {"invocation", "ansible_facts", "stdout_lines", "stderr_lines", "diff", "module_args"}
)
#: Longer strings (command output, file contents) are cut so a JSON summary stays readable.
MAX_RES_STRING = 2000
#: Result key of a module's line for the run's summary: ``{event, detail}`` (ansible/library/dpkg_hold.py sets it
#: when it finished an interrupted dpkg run). Read from the results, never from task names.
NOTICE_KEY = "gpufleet_notice"


def trim_res(value: Any) -> Any:
    """Copy of a module result without bulky fields, with long strings cut."""
    if isinstance(value, dict):
        return {
            k: trim_res(v)
            for k, v in value.items()
            if k not in BULKY_RES_KEYS and not (isinstance(k, str) and k.startswith("_ansible"))
        }
    if isinstance(value, list):
        return [trim_res(v) for v in value]
    if isinstance(value, str) and len(value) > MAX_RES_STRING:
        return value[:MAX_RES_STRING] + f"... [{len(value) - MAX_RES_STRING} more characters]"
    return value


@dataclass
class ItemResult:
    """One item of a looped task."""

    item: str
    status: TaskStatus
    changed: bool
    msg: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"item": self.item, "status": self.status, "changed": self.changed, "msg": self.msg}


@dataclass
class TaskResult:
    """The outcome of one task on one host."""

    host: str
    play: str
    role: str | None
    task: str
    action: str
    status: TaskStatus
    changed: bool
    ignored: bool = False
    msg: str | None = None
    tags: list[str] = field(default_factory=list)
    task_path: str | None = None
    #: ansible's id of the task object. Unlike ``task_path`` it tells apart the copies of one task file
    #: imported by several roles (roles/pinned_packages/tasks/install.yml): same path, one uuid per import.
    task_uuid: str | None = None
    diff: list[dict[str, Any]] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    res: dict[str, Any] = field(default_factory=dict)
    #: Set when the host stopped answering (unreachable, a connection that broke, ``task_timeout`` expired):
    #: the task's outcome on the host is unknown, not a failure of the task. Says why.
    lost: str | None = None
    #: Seconds from the task's start to its result on this host (the time waited for a lost host).
    duration: float | None = None

    @property
    def reason(self) -> str:
        """One line for a failed or lost task: ``unreachable: timed out after 20 s (waited 20.1 s)``."""
        if self.lost:
            waited = f" (waited {self.duration:.1f} s)" if self.duration is not None else ""
            return f"unreachable: {self.lost}{waited}"
        msg = (self.msg or self.status).strip()
        return msg.splitlines()[0] if msg else self.status

    @property
    def label(self) -> str:
        """Task name as ansible prints it: ``role : task`` inside a role."""
        return f"{self.role} : {self.task}" if self.role else self.task

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "play": self.play,
            "role": self.role,
            "task": self.task,
            "action": self.action,
            "status": self.status,
            "changed": self.changed,
            "ignored": self.ignored,
            "msg": self.msg,
            "tags": list(self.tags),
            "task_path": self.task_path,
            "diff": [dict(d) for d in self.diff],
            "items": [i.to_json() for i in self.items],
            "res": self.res,
            "lost": self.lost,
            "duration": self.duration,
        }


@dataclass(frozen=True)
class Notice:
    """One line a module asked the run's summary to say about a host."""

    host: str
    event: str
    detail: str

    @property
    def line(self) -> str:
        """``recovered interrupted dpkg on gpu-0: nvidia-utils-570 570.133.20-0ubuntu1 (iHR)``."""
        return f"{self.event} on {self.host}: {self.detail}" if self.detail else f"{self.event} on {self.host}"

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "event": self.event, "detail": self.detail, "line": self.line}


@dataclass
class HostStats:
    """PLAY RECAP counters of one host, plus its state for the live display."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: int = 0
    rescued: int = 0
    ignored: int = 0
    state: HostState = "running"
    #: Task running on the host now (live display only).
    current_task: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "skipped": self.skipped,
            "unreachable": self.unreachable,
            "rescued": self.rescued,
            "ignored": self.ignored,
            "state": self.state,
        }


@dataclass
class RunResult:
    """Everything a playbook run produced that callers act on."""

    rc: int = -1
    status: str = "unknown"
    check: bool = False
    hosts: dict[str, HostStats] = field(default_factory=dict)
    tasks: list[TaskResult] = field(default_factory=list)
    #: True once playbook_on_stats arrived, i.e. ansible finished the playbook.
    finished: bool = False
    log_tail: list[str] = field(default_factory=list)
    #: The run's artifact folder (ansible's stdout and stderr, events.jsonl) when the caller kept the private data dir.
    artifact_dir: str | None = None
    #: Data the playbook reported with ``set_stats`` (aggregated over hosts), from playbook_on_stats.
    custom_stats: dict[str, Any] = field(default_factory=dict)

    @property
    def lost_hosts(self) -> list[str]:
        """Hosts whose failure was losing them (a broken connection, a task timeout): ansible counts these
        as failed, their state is unknown, like an unreachable host's."""
        return list(dict.fromkeys(t.host for t in self.failures if t.lost and t.status == "failed"))

    @property
    def failed_hosts(self) -> list[str]:
        lost = set(self.lost_hosts)
        return [h for h, s in self.hosts.items() if s.failed > 0 and h not in lost]

    @property
    def unreachable_hosts(self) -> list[str]:
        lost = set(self.lost_hosts)
        return [h for h, s in self.hosts.items() if s.unreachable > 0 or h in lost]

    @property
    def rerun_hosts(self) -> list[str]:
        """Hosts to run again once fixed (``--limit``): those that failed or stopped answering."""
        bad = set(self.failed_hosts) | set(self.unreachable_hosts)
        return [h for h in self.hosts if h in bad]

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed_hosts and not self.unreachable_hosts

    @property
    def failures(self) -> list[TaskResult]:
        """Failed tasks that were not ignored, and unreachable results.

        Once the recap is in, a host it counts no failure for (the failure was rescued) or not
        unreachable (``ignore_unreachable``) contributes nothing here.
        """

        def counts(t: TaskResult) -> bool:
            stats = self.hosts.get(t.host)
            if t.status == "unreachable":
                return stats is None or stats.unreachable > 0
            return t.status == "failed" and not t.ignored and (stats is None or stats.failed > 0)

        return [t for t in self.tasks if counts(t)]

    @property
    def notices(self) -> list[Notice]:
        """The ``gpufleet_notice`` of every task that ran (ok or changed), in run order."""
        out = []
        for t in self.tasks:
            n = t.res.get(NOTICE_KEY) if t.status in ("ok", "changed") else None
            if isinstance(n, dict) and n.get("event"):
                out.append(Notice(t.host, str(n["event"]), str(n.get("detail") or "")))
        return out

    def verdict(self) -> str:
        return verdict(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "ok": self.ok,
            "rc": self.rc,
            "status": self.status,
            "check": self.check,
            "verdict": self.verdict(),
            "hosts": {h: s.to_json() for h, s in self.hosts.items()},
            "changed": {h: [t.label for t in ts] for h, ts in changes_by_host(self).items()},
            "failed": [{"host": t.host, "task": t.label, "msg": t.msg, "lost": t.lost, "duration": t.duration}
                       for t in self.failures],
            "rerun": self.rerun_hosts,
            "notices": [n.to_json() for n in self.notices],
            "tasks": [t.to_json() for t in self.tasks],
            "log_tail": list(self.log_tail),
        }


def changes_by_host(result: RunResult) -> dict[str, list[TaskResult]]:
    """Tasks that changed (in check mode: would change), per host, in run order.

    Every host of the run is a key, so a host without changes maps to an empty list.
    """
    out: dict[str, list[TaskResult]] = {h: [] for h in result.hosts}
    for t in result.tasks:
        if t.changed and t.status in ("ok", "changed"):
            out.setdefault(t.host, []).append(t)
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def verdict(result: RunResult) -> str:
    """One line that says whether the run worked and, if not, which hosts to look at."""
    n_changed = sum(len(v) for v in changes_by_host(result).values())
    changed = f"{n_changed} task(s) would change" if result.check else f"{n_changed} task(s) changed"
    hosts = _count(len(result.hosts), "host")
    if result.ok:
        return f"OK: {hosts}, {changed}" + (" (check mode, nothing was changed)" if result.check else "")
    parts = []
    if result.failed_hosts:
        parts.append("failed on " + ", ".join(result.failed_hosts))
    if result.unreachable_hosts:
        # Hosts ansible counted as failed because they stopped answering: say on which task and after how long.
        lost = {t.host: t for t in result.failures if t.lost and t.status == "failed"}
        parts.append("unreachable: " + ", ".join(
            f"{h} ({lost[h].label}: {lost[h].reason.removeprefix('unreachable: ')})" if h in lost else h
            for h in result.unreachable_hosts))
    if not parts:
        parts.append(f"ansible-playbook exited {result.rc} ({result.status})")
    elif result.rc not in (0, -1):
        parts.append(f"rc={result.rc}")
    rerun = f"; rerun them: --limit {','.join(result.rerun_hosts)}" if result.rerun_hosts else ""
    return f"FAILED: {'; '.join(parts)}; {hosts}, {changed}{rerun}"

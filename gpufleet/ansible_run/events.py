"""Fold playbook events (ansible-runner's event shape, written by gpufleet_events) into a RunResult.

The same fold drives the live display (event by event) and the final result, so what the
operator watched and what the JSON summary says cannot disagree. Event names and their
``event_data`` keys are those of ansible-runner's ``awx_display`` callback (ansible-runner 2.4.3,
``ansible_runner/display_callback/callback/awx_display.py``), which gpufleet's own callback
(callback_plugins/gpufleet_events.py) writes since gpufleet stopped running playbooks through ansible-runner;
the counting follows ansible-core's ``StrategyBase._process_pending_results``, so the counters match PLAY RECAP
even before ``playbook_on_stats`` arrives.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.ansible_run.results import (
    HostStats,
    ItemResult,
    RunResult,
    TaskResult,
    TaskStatus,
    trim_res,
)

#: Include actions report runner_on_ok but ansible does not count them in the recap.
_INCLUDE_ACTIONS = frozenset(
    {"include_tasks", "include_role", "ansible.builtin.include_tasks", "ansible.builtin.include_role"}
)
_ITEM_STATUS: dict[str, TaskStatus] = {
    "runner_item_on_ok": "ok",
    "runner_item_on_failed": "failed",
    "runner_item_on_skipped": "skipped",
}
_FINAL_EVENTS = frozenset({"runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"})
#: Events whose stdout is ansible talking outside a task result (errors before the play starts).
_LOG_EVENTS = frozenset({"verbose", "error", "warning", "deprecated", "system_warning"})
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LOG_TAIL_LINES = 20

#: event_data key under which gpufleet's callback (callback_plugins/gpufleet_events.py) puts a task's tags:
#: ``{"task_uuid": ..., "tags": [...]}``.
TAGS_KEY = "task_tags"


def task_label(event_data: Mapping[str, Any]) -> str:
    task = str(event_data.get("task") or "")
    role = event_data.get("role")
    return f"{role} : {task}" if role else task


def _diffs(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Before/after dicts of a result that show a change: its own ``diff``, else its loop items'."""
    raw = res.get("diff")
    if raw is None:
        items = res.get("results")
        out: list[dict[str, Any]] = []
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping):
                    out.extend(_diffs(item))
        return out
    entries = raw if isinstance(raw, list) else [raw]
    return [dict(d) for d in entries if isinstance(d, Mapping) and _shows_change(d)]


def _shows_change(d: Mapping[str, Any]) -> bool:
    # Modules report "nothing to diff" as {} and the file module as before == after ({"path": p}
    # on both sides); neither shows a change, and the drift report lists only real ones.
    if "prepared" in d:
        return bool(d["prepared"])
    return d.get("before") != d.get("after")


def _msg(res: Mapping[str, Any]) -> str | None:
    msg = res.get("msg")
    if msg:
        return msg if isinstance(msg, str) else json.dumps(msg, default=str)
    stderr = res.get("stderr")
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip()
    return None


#: What a connection that broke mid-run leaves in a failed result instead of the module's JSON. The docker
#: connection runs ``docker exec``, which refuses a paused or stopped container at once (the module then
#: printed nothing: "Module result deserialization failed: No start of json char found"); SSH reports its
#: own failures as unreachable already.
_CONNECTION_LOST = (
    re.compile(r"Container \S+ is paused"),
    re.compile(r"Container \S+ is not running"),
    re.compile(r"No such container: \S+"),
    re.compile(r"Connection (?:timed out|closed|reset)|Broken pipe|Timeout, server \S+ not responding"),
)
#: ansible's words for a module run that returned no JSON at all ("MODULE FAILURE" in older cores).
_NO_RESULT = ("Module result deserialization failed", "MODULE FAILURE")


def lost_reason(name: str, res: Mapping[str, Any]) -> str | None:
    """Why the host stopped answering, when a result says so: unreachable, a broken connection, or
    ansible's ``task_timeout`` expired (a paused container never answers an exec already running)."""
    timedout = res.get("timedout")
    if isinstance(timedout, Mapping):
        return f"timed out after {timedout.get('period', '?')} s (task_timeout)"
    if name == "runner_on_unreachable":
        return str(res.get("msg") or "unreachable").strip().splitlines()[0]
    if name != "runner_on_failed":
        return None
    msg = str(res.get("msg") or "")
    # Only a result without the module's own answer: a task's own error that mentions a connection (a mirror
    # that timed out, a container the task manages) is a failure of the task, not a lost host.
    if not msg.startswith(_NO_RESULT) or str(res.get("module_stdout") or "").strip():
        return None
    text = "\n".join(str(res.get(k) or "") for k in ("module_stderr", "module_stdout"))
    for pattern in _CONNECTION_LOST:
        if m := pattern.search(text):
            return f"stopped answering ({m.group(0)})"
    return None


def _lost(name: str, res: Mapping[str, Any]) -> str | None:
    """``lost_reason`` of a result, or of a loop whose failed items all lost the host ("One or more items
    failed": each item's exec was refused by the paused container)."""
    if reason := lost_reason(name, res):
        return reason
    items = res.get("results")
    if name != "runner_on_failed" or not isinstance(items, list):
        return None
    failed = [i for i in items if isinstance(i, Mapping) and i.get("failed")]
    reasons = [lost_reason(name, i) for i in failed]
    return reasons[0] if failed and all(reasons) else None


def _item_label(res: Mapping[str, Any]) -> str:
    label = res.get("_ansible_item_label", res.get("item"))
    return label if isinstance(label, str) else json.dumps(label, default=str, sort_keys=True)


class ResultBuilder:
    """Accumulates events; ``result`` is valid (partial) after every ``add``."""

    def __init__(self, *, check: bool = False) -> None:
        self.result = RunResult(check=check)
        self._items: dict[tuple[str, str], list[ItemResult]] = {}
        self._log: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def _host(self, name: str) -> HostStats:
        return self.result.hosts.setdefault(name, HostStats())

    def add(self, event: Mapping[str, Any]) -> TaskResult | None:
        """Fold one event in; returns the TaskResult when the event finished a task on a host."""
        name = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        if name in _LOG_EVENTS:
            self._log_stdout(event)
            return None
        if name == "playbook_on_stats":
            self._stats(data)
            return None
        host = data.get("host")
        if not isinstance(host, str):
            return None
        key = (host, str(data.get("task_uuid") or data.get("task_path") or data.get("task")))
        if name == "runner_on_start":
            self._host(host).current_task = task_label(data)
        elif name in _ITEM_STATUS:
            self._item(key, _ITEM_STATUS[name], data)
        elif name in _FINAL_EVENTS:
            return self._final(key, name, data)
        return None

    def _log_stdout(self, event: Mapping[str, Any]) -> None:
        for line in str(event.get("stdout") or "").splitlines():
            line = _ANSI.sub("", line).rstrip()
            if line:
                self._log.append(line)
        self.result.log_tail = list(self._log)

    def _item(self, key: tuple[str, str], status: TaskStatus, data: Mapping[str, Any]) -> None:
        res: Mapping[str, Any] = data.get("res") or {}
        changed = bool(res.get("changed"))
        if status == "ok" and changed:
            status = "changed"
        self._items.setdefault(key, []).append(
            ItemResult(item=_item_label(res), status=status, changed=changed, msg=_msg(res))
        )

    def _final(self, key: tuple[str, str], name: str, data: Mapping[str, Any]) -> TaskResult:
        host = key[0]
        res: Mapping[str, Any] = data.get("res") or {}
        action = str(data.get("resolved_action") or data.get("task_action") or "")
        changed = bool(res.get("changed"))
        ignored = name == "runner_on_failed" and bool(data.get("ignore_errors"))
        status: TaskStatus
        if name == "runner_on_ok":
            status = "changed" if changed else "ok"
        elif name == "runner_on_failed":
            status = "failed"
        elif name == "runner_on_skipped":
            status, changed = "skipped", False
        else:
            status, changed = "unreachable", False
        task_path = data.get("task_path")
        task_uuid = data.get("task_uuid")
        duration = data.get("duration")
        tagged = data.get(TAGS_KEY)
        tags: list[str] = []
        # Only the entry of this very task (an event can still carry the previous task's, see the callback).
        if (isinstance(tagged, Mapping) and tagged.get("task_uuid") == data.get("task_uuid")
                and isinstance(tagged.get("tags"), list)):
            tags = [str(t) for t in tagged["tags"]]
        task = TaskResult(
            host=host,
            play=str(data.get("play") or ""),
            role=data.get("role") or None,
            task=str(data.get("task") or action),
            action=action,
            status=status,
            changed=changed,
            ignored=ignored,
            msg=_msg(res),
            tags=tags,
            task_path=task_path if isinstance(task_path, str) else None,
            task_uuid=task_uuid if isinstance(task_uuid, str) and task_uuid else None,
            diff=_diffs(res),
            items=self._items.pop(key, []),
            res=trim_res(dict(res)),
            lost=_lost(name, res) if status in ("failed", "unreachable") and not ignored else None,
            duration=float(duration) if isinstance(duration, int | float) else None,
        )
        self.result.tasks.append(task)
        self._count(task)
        return task

    def _count(self, task: TaskResult) -> None:
        stats = self._host(task.host)
        stats.current_task = None
        if task.status in ("ok", "changed"):
            if task.action not in _INCLUDE_ACTIONS:
                stats.ok += 1
                stats.changed += task.changed
        elif task.status == "failed" and task.ignored:
            stats.ok += 1
            stats.ignored += 1
            stats.changed += task.changed
        elif task.status == "failed":
            # A failure inside a block with rescue counts as "rescued" in the recap; events do not
            # say which, so playbook_on_stats corrects this count at the end.
            stats.failed += 1
            if task.lost:
                stats.state = "unreachable"
            elif stats.state == "running":
                stats.state = "failed"
        elif task.status == "skipped":
            stats.skipped += 1
        else:
            stats.unreachable += 1
            stats.state = "unreachable"

    def _stats(self, data: Mapping[str, Any]) -> None:
        fields = {
            "ok": "ok",
            "changed": "changed",
            "failures": "failed",
            "skipped": "skipped",
            "dark": "unreachable",
            "rescued": "rescued",
            "ignored": "ignored",
        }
        names: set[str] = set()
        for src in (*fields, "processed"):
            counts = data.get(src)
            if isinstance(counts, Mapping):
                names.update(str(h) for h in counts)
        for host in sorted(names, key=lambda h: (h not in self.result.hosts, h)):
            stats = self._host(host)
            for src, dst in fields.items():
                counts = data.get(src) or {}
                setattr(stats, dst, int(counts.get(host, 0)))
            stats.current_task = None
            lost = any(t.lost for t in self.result.tasks if t.host == host and t.status == "failed")
            stats.state = ("unreachable" if stats.unreachable or (stats.failed and lost)
                           else "failed" if stats.failed else "done")
        # What the playbook reported with set_stats (per_host: false), e.g. skew.yml's versions per host.
        custom = data.get("artifact_data")
        if isinstance(custom, Mapping):
            self.result.custom_stats = dict(custom)
        self.result.finished = True


def build_result(
    events: Iterable[Mapping[str, Any]],
    *,
    rc: int = -1,
    status: str = "unknown",
    check: bool = False,
) -> RunResult:
    """RunResult from a stream of playbook events (live or recorded).

    ``rc``/``status`` come from the runner, not from events; left at their defaults the result is
    never ``ok``. A task's tags come from its events' ``task_tags`` (added by gpufleet's callback plugin,
    gpufleet/ansible_run/callback_plugins/gpufleet_task_tags.py); events without them give no tags.
    """
    builder = ResultBuilder(check=check)
    for event in events:
        builder.add(event)
    builder.result.rc = rc
    builder.result.status = status
    return builder.result

"""gpufleet_events: every playbook and task event as one JSON line on the file descriptor gpufleet gives.

gpufleet.ansible_run.runner starts ``ansible-playbook`` itself, passes the write end of a pipe and names it in
``GPUFLEET_EVENT_FD``; this callback writes one JSON object per event there and gpufleet folds them into the run's
result (gpufleet.ansible_run.events) while the playbook runs. Without the variable it does nothing.

The events keep the shape gpufleet has read (and recorded, tests/fixtures/runner_events) since it ran playbooks
through ansible-runner: ``event``, ``uuid``, ``counter``, ``parent_uuid`` and ``event_data`` with the names of
ansible-runner's display callback (``play``, ``task``, ``task_uuid``, ``task_path``, ``task_action``,
``resolved_action``, ``role``, ``host``, ``res``, ``duration``, ``ignore_errors``, ...). What this callback does not
do is ansible-runner's extra work per event: a JSON file per event under ``job_events/``, the event re-encoded
into the stdout stream and parsed back out of it by a pexpect loop in the gpufleet process (docs/performance.md:
about 1.5-2 controller CPU s of a no-op converge of one GPU node). ansible's own output stays the default stdout
callback's, written where gpufleet points stdout (the run's artifacts).

Each task's events also carry its tags (``task_tags: {task_uuid, tags}``, tags sorted): ``task.tags`` holds the
tags the task inherits from its blocks, role, include and play when it starts.

Results are ``CallbackTaskResult.result`` (ansible-core 2.19): already censored for ``no_log`` and stripped of
ansible's internal keys. An event larger than ``MAX_RES_CHARS`` when encoded is sent with an empty ``res``, as
ansible-runner did.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import uuid
from typing import Any

from ansible.plugins.callback import CallbackBase

#: The environment variable naming the file descriptor to write to (set by gpufleet.ansible_run.runner).
FD_ENV = "GPUFLEET_EVENT_FD"
#: event_data key of a task's tags; gpufleet.ansible_run.events reads the same name.
TAGS_KEY = "task_tags"
#: ansible-runner's limit (MAX_EVENT_RES default): a larger result is sent as {}.
MAX_RES_CHARS = 700000


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        fd = os.environ.get(FD_ENV, "")
        # Line-buffered text: each event reaches gpufleet as soon as it happens (the live table).
        self._out = os.fdopen(int(fd), "w", encoding="utf-8", buffering=1) if fd.isdigit() else None
        self._counter = 0
        self._playbook: dict[str, Any] = {}
        self._play: dict[str, Any] = {}
        self._task: dict[str, Any] = {}
        self._starts: dict[str, datetime.datetime] = {}

    # -- writing

    def _emit(self, event: str, parent: str | None, **data: Any) -> None:
        if self._out is None:
            return
        self._counter += 1
        event_uuid = str(data.pop("uuid", None) or uuid.uuid4())
        event_data = {**self._playbook, **self._play, **self._task, **data, "uuid": event_uuid}
        line: dict[str, Any] = {"event": event, "uuid": event_uuid, "counter": self._counter,
                                "created": _now().isoformat(), "event_data": event_data}
        if parent:
            line["parent_uuid"] = parent
        text = json.dumps(line, default=str)
        if len(text) > MAX_RES_CHARS and event != "playbook_on_stats" and "res" in event_data:
            event_data["res"] = {}
            text = json.dumps(line, default=str)
        try:
            self._out.write(text + "\n")
        except (BrokenPipeError, ValueError):
            # gpufleet went away (interrupted): ansible finishes or is stopped on its own; nothing to tell.
            self._out = None

    def _task_context(self, task: Any) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "task": task.name or task.action,
            "task_uuid": str(task._uuid),
            "task_action": task.action,
            "resolved_action": getattr(task, "resolved_action", None) or task.action,
            "task_args": "",
            TAGS_KEY: {"task_uuid": str(task._uuid), "tags": sorted({str(t) for t in (task.tags or [])})},
        }
        with contextlib.suppress(AttributeError):
            ctx["task_path"] = task.get_path()
        role = getattr(task, "_role", None)
        name = role._role_name if role is not None else getattr(task, "role_name", "")
        if name:
            ctx["role"] = name
        return ctx

    def _timing(self, host: str) -> dict[str, Any]:
        start = self._starts.get(host)
        if start is None:
            return {"start": None, "end": None, "duration": None}
        end = _now()
        return {"start": start.isoformat(), "end": end.isoformat(), "duration": (end - start).total_seconds()}

    def _host_event(self, event: str, result: Any, *, address: bool = True, **extra: Any) -> None:
        data = {**self._task_context(result.task), "host": result.host.get_name()}
        if address:
            data["remote_addr"] = result.host.address
        self._emit(event, self._task.get("task_uuid"), **data, **extra)

    # -- playbook, play, task

    def v2_playbook_on_start(self, playbook: Any) -> None:
        playbook_uuid = str(uuid.uuid4())
        self._playbook = {"playbook": getattr(playbook, "_file_name", ""), "playbook_uuid": playbook_uuid}
        self._emit("playbook_on_start", None, uuid=playbook_uuid)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        hosts = getattr(play, "hosts", "")
        pattern = ",".join(hosts) if isinstance(hosts, list) else str(hosts or "")
        name = play.get_name().strip() or pattern
        self._task = {}
        self._play = {"play": name, "play_uuid": str(play._uuid), "play_pattern": pattern}
        self._emit("playbook_on_play_start", self._playbook.get("playbook_uuid"), name=name, pattern=pattern,
                   uuid=str(play._uuid))

    def _task_start(self, task: Any, is_conditional: bool) -> None:
        self._task = self._task_context(task)
        self._emit("playbook_on_task_start", self._play.get("play_uuid"), name=task.get_name(),
                   is_conditional=is_conditional, uuid=self._task["task_uuid"])

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._task_start(task, False)

    def v2_playbook_on_cleanup_task_start(self, task: Any) -> None:
        self._task_start(task, False)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._task, self._play = {}, {}
        custom = stats.custom.get("_run", {}) if hasattr(stats, "custom") else {}
        self._emit("playbook_on_stats", self._playbook.get("playbook_uuid"), changed=stats.changed,
                   dark=stats.dark, failures=stats.failures, ignored=getattr(stats, "ignored", {}), ok=stats.ok,
                   processed=stats.processed, rescued=getattr(stats, "rescued", {}), skipped=stats.skipped,
                   artifact_data=custom)
        if self._out is not None:
            self._out.flush()

    # -- per host

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._starts[host.get_name()] = _now()
        self._emit("runner_on_start", self._task.get("task_uuid"), **self._task_context(task),
                   host=host.get_name())

    def v2_runner_on_ok(self, result: Any) -> None:
        res = result.result
        if result.task.action in ("setup", "gather_facts", "ansible.builtin.setup", "ansible.builtin.gather_facts"):
            # The environment of the remote user: large, and nothing gpufleet reads (ansible-runner dropped it too).
            facts = res.get("ansible_facts")
            if isinstance(facts, dict):
                res = {**res, "ansible_facts": {k: v for k, v in facts.items() if k != "ansible_env"}}
        self._host_event("runner_on_ok", result, res=res, event_loop=result.task.loop_with,
                         **self._timing(result.host.get_name()))

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._host_event("runner_on_failed", result, res=result.result, ignore_errors=ignore_errors,
                         event_loop=result.task.loop_with, **self._timing(result.host.get_name()))

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._host_event("runner_on_skipped", result, event_loop=result.task.loop_with,
                         **self._timing(result.host.get_name()))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._host_event("runner_on_unreachable", result, res=result.result, **self._timing(result.host.get_name()))

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._host_event("runner_item_on_ok", result, address=False, res=result.result)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._host_event("runner_item_on_failed", result, address=False, res=result.result)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._host_event("runner_item_on_skipped", result, address=False, res=result.result)

    def v2_runner_retry(self, result: Any) -> None:
        self._host_event("runner_retry", result, address=False, res=result.result)

    def v2_on_file_diff(self, result: Any) -> None:
        self._host_event("runner_on_file_diff", result, address=False, diff=result.result.get("diff"))

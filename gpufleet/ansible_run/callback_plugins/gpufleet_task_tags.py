"""gpufleet_task_tags: the events of a task carry the task's tags (``event_data.task_tags``).

ansible-runner's events name a task (``task``, ``task_path``, ``task_uuid``) but not its tags. Ansible knows them
when the task starts: ``task.tags`` already holds the tags the task inherits from its blocks, role, include and
play. This callback adds ``task_tags: {task_uuid, tags}`` (tags sorted) to the event context of ansible-runner's
display callback (``awx_display``, which writes every event), so the ``runner_on_*`` events of the task carry
them; gpufleet.ansible_run.events reads them from there. Callbacks run in load order and the display callback
comes first, so events written before this callback hears of the next task (its ``playbook_on_task_start``)
still carry the previous task's entry: the ``task_uuid`` in it tells them apart.

Enabled by gpufleet.ansible_run.runner (``ANSIBLE_CALLBACK_PLUGINS`` / ``ANSIBLE_CALLBACKS_ENABLED``); outside
ansible-runner there is no event context and it does nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from ansible.plugins.callback import CallbackBase

#: The event_data key; gpufleet.ansible_run.events reads the same name.
TAGS_KEY = "task_tags"


def _runner_event_context() -> Any:
    """The event context of the ansible-runner display callback loaded in this process, or None."""
    for module in list(sys.modules.values()):
        ctx = getattr(module, "event_context", None)
        if type(ctx).__name__ == "EventContext" and callable(getattr(ctx, "add_global", None)):
            return ctx
    return None


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_task_tags"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._ctx: Any = None

    def _context(self) -> Any:
        if self._ctx is None:
            self._ctx = _runner_event_context()
        return self._ctx

    def _set(self, task: Any) -> None:
        ctx = self._context()
        if ctx is not None:
            # The uuid ansible-runner gives the task's events (it reads the same attribute).
            tags = sorted({str(t) for t in (task.tags or [])})
            ctx.add_global(**{TAGS_KEY: {"task_uuid": str(task._uuid), "tags": tags}})

    def _clear(self) -> None:
        ctx = self._context()
        if ctx is not None:
            ctx.remove_global(**{TAGS_KEY: None})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._set(task)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._set(task)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._clear()

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._clear()

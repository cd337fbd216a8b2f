"""gpufleet_changed_tasks: write which tasks reported changed, per host, to a JSON file.

The break-and-restore step (molecule/shared/restore.yml) reruns a scenario's converge.yml in a nested
``ansible-playbook`` and must know which tasks reported changed on which host, while the run's own output stays
the readable default. This notification callback records every changed result (tasks and handlers, a loop counted
once for the task) and writes, when the run ends, ``[{"host", "role", "task"}, ...]`` to the file named by
``GPUFLEET_CHANGED_TASKS_FILE``. ``role`` is the role the task belongs to (tasks a role imports from another role's
file, like pinned_packages' install path, report under the importing role), empty for play-level tasks.

Enabled by restore.yml only (``ANSIBLE_CALLBACK_PLUGINS`` / ``ANSIBLE_CALLBACKS_ENABLED`` of the nested run).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

#: The environment variable naming the output file; restore.yml sets the same name.
OUTPUT_ENV = "GPUFLEET_CHANGED_TASKS_FILE"


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "gpufleet_changed_tasks"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._changed: list[dict[str, str]] = []

    def v2_runner_on_ok(self, result: Any) -> None:
        if not result._result.get("changed", False):
            return
        task = result._task
        role = task._role.get_name(include_role_fqcn=False) if task._role is not None else ""
        entry = {"host": result._host.get_name(), "role": role, "task": task.get_name().split(" : ", 1)[-1]}
        if entry not in self._changed:
            self._changed.append(entry)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        path = os.environ.get(OUTPUT_ENV)
        if path:
            with open(path, "w", encoding="utf-8") as out:
                json.dump(self._changed, out, indent=1)

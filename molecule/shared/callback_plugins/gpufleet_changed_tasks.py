"""gpufleet_changed_tasks: write which tasks reported changed, per host, to a JSON file.

The break-and-restore step (molecule/shared/restore.yml) reruns a scenario's converge.yml in a nested
``ansible-playbook`` and must know which tasks reported changed on which host, while the run's own output stays
the readable default. This notification callback records every changed result (tasks and handlers, a loop counted
once for the task) and writes, when the run ends, ``[{"host", "role", "task"}, ...]`` to the file named by
``GPUFLEET_CHANGED_TASKS_FILE``. ``role`` is the role the task belongs to (tasks a role imports from another role's
file, like pinned_packages' install path, report under the importing role), empty for play-level tasks.

It also writes what roles/host_footprint's probe answered, ``[{"host", "scope", "converged", "reason"}, ...]``, to
the file named by ``GPUFLEET_PROBES_FILE`` when that is set: restore.yml proves with it that the probe skips every
role before the breaks, so that the changes after them come through the probe's reading.

Enabled by restore.yml only (``ANSIBLE_CALLBACK_PLUGINS`` / ``ANSIBLE_CALLBACKS_ENABLED`` of the nested run).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

#: The environment variables naming the output files; restore.yml sets the same names.
OUTPUT_ENV = "GPUFLEET_CHANGED_TASKS_FILE"
PROBES_ENV = "GPUFLEET_PROBES_FILE"


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "gpufleet_changed_tasks"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._changed: list[dict[str, str]] = []
        self._probes: list[dict[str, Any]] = []

    def v2_runner_on_ok(self, result: Any) -> None:
        res = result._result
        if res.get("footprint_state") == "probe":
            self._probes.append({"host": result._host.get_name(), "scope": str((res.get("scopes") or ["?"])[0]),
                                 "converged": bool(res["converged"]), "reason": str(res.get("reason", ""))})
        if not res.get("changed", False):
            return
        task = result._task
        role = task._role.get_name(include_role_fqcn=False) if task._role is not None else ""
        entry = {"host": result._host.get_name(), "role": role, "task": task.get_name().split(" : ", 1)[-1]}
        if entry not in self._changed:
            self._changed.append(entry)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        for env, data in ((OUTPUT_ENV, self._changed), (PROBES_ENV, self._probes)):
            path = os.environ.get(env)
            if path:
                with open(path, "w", encoding="utf-8") as out:
                    json.dump(data, out, indent=1)

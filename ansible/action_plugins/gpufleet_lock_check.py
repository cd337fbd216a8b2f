"""gpufleet_lock_check: the version lock's compatibility rules over the inventory, before any host is touched.

Runs on the controller only (no connection to the hosts, so it works in check mode and on unreachable
hosts). It reads every host's lock variables with the file and line that set them and hands them to
gpufleet.lock.ansible_check, which runs the same rules and messages as ``gpufleet lock check``. Without the
gpufleet package on the controller's Python it fails, never passes silently.

Options:
  group: inventory group whose hosts are checked (default ``gpu``; every host when the group is empty).
         The whole group is checked even under ``--limit``: a limited run must not hide skew.

Used by ansible/playbooks/lock_check.yml (the first play of ansible/site.yml)::

    - name: Check the version lock
      gpufleet_lock_check:
      run_once: true
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from ansible.plugins.action import ActionBase

try:
    # Origin (file:line of a variable) is ansible-core 2.19's data tagging; older cores only lose the file.
    from ansible._internal._datatag._tags import Origin
except ImportError:  # pragma: no cover - depends on the ansible-core in use
    Origin = None

FIX_IMPORT = (
    "run ansible-playbook from gpufleet's virtualenv (`. .venv/bin/activate` in the repository, created by "
    "`make up`), or install gpufleet into this Python with `pip install -e <repository>`"
)


def _native(value: Any) -> Any:
    """Plain Python values: tagged values pickle and compare fine, but must not leak into messages' repr."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_native(v) for v in value]
    return str(value)


def _origin(value: Any) -> str | None:
    tag = Origin.get_tag(value) if Origin is not None else None
    if tag is None:
        return None
    if tag.path:
        path = tag.path
        cwd = os.getcwd() + os.sep
        if path.startswith(cwd):
            path = path[len(cwd):]
        return f"{path}:{tag.line_num}" if tag.line_num else path
    return tag.description or None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("group",))
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            from gpufleet.lock.ansible_check import HOST_VARS, HostSettings, check_hosts, report
        except ImportError as e:
            result.update(failed=True, msg=(
                f"gpufleet_lock_check: cannot import the gpufleet package in {sys.executable} ({e}); the version "
                f"lock rules live there and are never skipped. Fix: {FIX_IMPORT}"))
            return result

        group = str(self._task.args.get("group", "gpu"))
        groups = task_vars.get("groups", {})
        names = list(groups.get(group) or groups.get("all") or [])
        hostvars = task_vars["hostvars"]
        hosts = []
        for name in names:
            hv = hostvars[name]
            values: dict[str, Any] = {}
            origins: dict[str, str] = {}
            for var in HOST_VARS:
                if var not in hv:
                    continue
                value = hv[var]
                values[var] = _native(value)
                where = _origin(value)
                if where:
                    origins[var] = where
            hosts.append(HostSettings(name, values, origins))

        problems = check_hosts(hosts)
        result["changed"] = False
        result["msg"] = report(problems, hosts)
        result["hosts"] = [h.name for h in hosts]
        if problems:
            result["failed"] = True
            result["problems"] = [
                {"file": p.file, "key": p.key, "value": _native(p.value), "rule": p.rule, "fix": p.fix}
                for p in problems
            ]
        return result

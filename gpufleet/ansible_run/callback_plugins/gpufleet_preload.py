"""gpufleet_preload: the plugins every task's worker needs are loaded once, before the workers fork.

ansible forks a worker process per task and host, and the worker loads what the task needs: its connection plugin
(import, then its DOCUMENTATION parsed as YAML for the config definitions) and, on the first filter or test a
template uses, every filter and test plugin file on the configured paths. The main process never needs the
connection plugin and loads the Jinja plugins late, so the workers forked before that loaded them again, every
task: ~24% of the workers' samples in a no-op converge (py-spy, docs/performance.md). Loaded in the main process
at play start, they are inherited by every worker from the fork.

Loads the connection plugins the play's hosts name (``ansible_connection`` in host and group variables, plain
names only, and the play's or the default transport) and the filter and test plugins. Best effort: a name that
does not load is left to the worker, which reports it as before. It needs no enabling: ansible loads it from the
callback path (ansible/ansible.cfg, and gpufleet's runner adds the same folder).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import connection_loader, filter_loader, test_loader

from ansible import constants as C  # type: ignore[attr-defined]

DOCUMENTATION = """
name: gpufleet_preload
type: aggregate
short_description: load connection, filter and test plugins before the workers fork
description:
  - Loads the connection plugins of the play's hosts and the filter and test plugins in the main process, so that
    each task's forked worker inherits them instead of loading them again.
"""


def connection_names(play_connection: Any, host_vars: Iterable[dict[str, Any]]) -> list[str]:
    """The connection plugin names to load: the play's (or the default transport) and each plain (untemplated)
    ``ansible_connection`` value of the hosts' and their groups' variables."""
    names = {str(play_connection or C.DEFAULT_TRANSPORT)}
    for variables in host_vars:
        value = variables.get("ansible_connection")
        if isinstance(value, str) and value and "{" not in value:
            names.add(str(value))
    return sorted(names)


def _inventory_vars(play: Any) -> list[dict[str, Any]]:
    """Host and group variables of the play's inventory, as loaded (no templating)."""
    manager = play.get_variable_manager()
    inventory = getattr(manager, "_inventory", None)
    if inventory is None:
        return []
    out: list[dict[str, Any]] = []
    for group in inventory.groups.values():
        out.append(group.get_vars())
    for host in inventory.hosts.values():
        out.append(host.get_vars())
    return out


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_preload"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_play_start(self, play: Any) -> None:
        loaded = []
        try:
            names = connection_names(getattr(play, "connection", None), _inventory_vars(play))
        except Exception:  # best effort: the workers load what this could not
            names = [str(C.DEFAULT_TRANSPORT)]
        for name in names:
            try:
                if connection_loader.get(name, class_only=True) is not None:
                    loaded.append(name)
            except Exception:  # a worker reports a connection that does not load
                continue
        for loader, probe in ((filter_loader, "ansible.builtin.to_json"), (test_loader, "ansible.builtin.version")):
            try:
                loader.get(probe)  # loads every legacy filter/test plugin file once (Jinja2Loader)
            except Exception:  # as above
                continue
        self._display.vvv(f"gpufleet_preload: connection plugins {', '.join(loaded) or 'none'}, filters and tests")

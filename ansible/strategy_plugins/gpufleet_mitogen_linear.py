"""gpufleet_mitogen_linear: Mitogen's linear strategy, also for connections named by their collection name.

An optional extra, never the default (ansible.cfg keeps ``strategy = linear``). Mitogen for Ansible
(``pip install mitogen==0.3.54``) keeps one Python interpreter per host and runs every module in it, so a module
run no longer starts a Python on the node and unpacks its payload. Mitogen takes over only connections named
``ssh``, ``docker``, ... ; gpufleet's sandbox inventories (and Molecule's) name ``community.docker.docker``, which
Mitogen would leave to Ansible: this strategy maps those names to the short ones first. Enable it with:

    ANSIBLE_STRATEGY_PLUGINS=<repo>/ansible/strategy_plugins ANSIBLE_STRATEGY=gpufleet_mitogen_linear

Measurements and limits: docs/performance.md.
"""

from __future__ import annotations

from typing import Any

import ansible_mitogen.strategy as _mitogen_strategy
from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule as _MitogenLinear

#: Collection names of the connections Mitogen has its own implementation for.
ALIASES = {
    "community.docker.docker": "docker",
    "ansible.builtin.ssh": "ssh",
    "ansible.legacy.ssh": "ssh",
}
#: Left to Ansible: tasks on the controller itself gain nothing from Mitogen, and its `local` breaks the
#: async_status polling of Molecule's create/destroy playbooks (seen: "Wait for instance(s) deletion" never ends).
NOT_REDIRECTED = ("local",)

_redirect = _mitogen_strategy.wrap_connection_loader__get_with_context


def _get_with_context(name: str, *args: Any, **kwargs: Any) -> Any:
    return _redirect(ALIASES.get(name, name), *args, **kwargs)


# Mitogen checks the play's connection against its list before it redirects a load; the collection names join it.
_mitogen_strategy.REDIRECTED_CONNECTION_PLUGINS = tuple(
    p for p in _mitogen_strategy.REDIRECTED_CONNECTION_PLUGINS if p not in NOT_REDIRECTED) + tuple(ALIASES)
_mitogen_strategy.wrap_connection_loader__get_with_context = _get_with_context


class StrategyModule(_MitogenLinear):  # type: ignore[misc]
    pass

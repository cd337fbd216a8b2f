"""The Pulumi program: spec + lock -> backend -> platform layer -> stack outputs.

Ansible never runs inside ``pulumi up``: the program only exports the inventory source; ``gpufleet up``
writes ``inventories/<stack>/`` from the outputs afterwards and then converges the hosts.
"""

from __future__ import annotations

from typing import Any

import pulumi

from gpufleet.infra.backends import make_backend
from gpufleet.infra.platform import Platform
from gpufleet.infra.registered_nodes import registered_nodes_of
from gpufleet.lock import Lock, resolve_lock
from gpufleet.spec import ClusterSpec, load_spec


def build(spec: ClusterSpec, lock: Lock, kubeconfig: pulumi.Input[str] | None,
          *, operator_dcgm_exporter: bool = True, registered_nodes: frozenset[str] | None = None) -> dict[str, Any]:
    """Declare every resource of the stack; return (and export) its outputs as plain data. ``registered_nodes``:
    the existing cluster's Node names (None: not known, an offline plan labels every host)."""
    backend = make_backend(spec, kubeconfig, lock, registered_nodes)
    if backend.provider is not None:
        Platform("platform", spec, lock, backend, operator_dcgm_exporter=operator_dcgm_exporter)
    outputs: dict[str, Any] = {
        "stack": spec.stack,
        "clusterName": spec.cluster_name,
        "backend": spec.backend,
        "inventory": backend.inventory_source,
        "lock": lock.model_dump(mode="json"),
    }
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


def resolve(spec: ClusterSpec) -> Lock:
    """The stack's version lock (raises ConfigError naming the stack file when a rule is broken)."""
    return resolve_lock(spec)


def main() -> None:
    """Entry of ``pulumi up``: the stack file is the Pulumi stack config, read with our validation."""
    spec = load_spec(pulumi.get_stack())
    config = pulumi.Config("gpufleet")
    kubeconfig = config.get_secret("kubeconfig") if spec.backend == "existing" else None
    registered = None
    plain = config.get("kubeconfig") if spec.backend == "existing" else None
    if plain:
        # The Nodes that exist, read before any label patch is declared (a patch of an absent Node would
        # create it: gpufleet/infra/registered_nodes.py). The clear text goes to kubectl only, never to state.
        registered = registered_nodes_of(spec, plain)
    build(spec, resolve(spec), kubeconfig, registered_nodes=registered)

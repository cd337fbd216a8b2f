"""Which of the stack's hosts are registered Nodes: the program labels only those.

A node label patch is a server-side apply, and an apply of an object that does not exist creates it
(Kubernetes docs, "Server-Side Apply": apply is create-or-update; pulumi/pulumi-kubernetes#2194 shows a
``NamespacePatch`` creating its namespace). For a host the kubelet has not registered yet that is a bare Node
with our labels and no taints; when the kubelet joins it finds the Node there and does not register it, so
``registerWithTaints`` (role ``host_tuning``) is never applied. The program therefore lists the cluster's
Nodes first and skips the hosts that are absent, with a warning; the next ``gpufleet up`` after they join
labels them (and a new taint Job, named by its hosts, taints them).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence

from gpufleet.errors import REDACTED, ConfigError, ConfigProblem
from gpufleet.infra.node_taints import Transport
from gpufleet.spec import ClusterSpec, Host, NodePool, stack_file
from gpufleet.validation.actions import KubectlRunner, kubectl_transport


def registered_nodes(send: Transport) -> frozenset[str]:
    """The names of the cluster's Nodes (one list call). Raises ``LookupError`` with the API's message."""
    status, body = send("GET", "/api/v1/nodes", None, "application/json")
    if status != 200:
        raise LookupError(f"listing the cluster's nodes answered {status}: {body.get('message', body)}")
    return frozenset(item["metadata"]["name"] for item in body.get("items", []))


def registered_nodes_of(spec: ClusterSpec, kubeconfig: str, *, kubectl: Sequence[str] = ("kubectl",),
                        run: KubectlRunner | None = None) -> frozenset[str]:
    """The Nodes of the cluster ``kubeconfig`` (the stack's secret, as text) points at, read with ``kubectl``
    (every kubeconfig auth form works: client certificates, tokens, exec plugins). One ConfigError naming
    ``gpufleet:kubeconfig`` when the cluster cannot be read."""
    fd, path = tempfile.mkstemp(prefix="gpufleet-kubeconfig-")  # 0600: the kubeconfig holds credentials
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(kubeconfig)
        try:
            argv = (*kubectl, "--kubeconfig", path)
            return registered_nodes(kubectl_transport(argv, run) if run else kubectl_transport(argv))
        except (LookupError, OSError) as e:
            raise ConfigError([ConfigProblem(
                str(stack_file(spec.stack)), "gpufleet:kubeconfig", REDACTED,
                f"the program lists the cluster's nodes before labelling them and could not: {e}",
                "check that kubectl is on PATH and that `kubectl --kubeconfig <the stack's kubeconfig> get nodes` "
                "works from this machine")]) from None
    finally:
        os.unlink(path)


def absent_hosts(pools: Iterable[tuple[NodePool, Sequence[Host]]],
                 registered: frozenset[str] | None) -> list[tuple[NodePool, Host]]:
    """The hosts the stack lists that are not registered Nodes (none when ``registered`` is not known)."""
    if registered is None:
        return []
    return [(pool, h) for pool, hosts in pools for h in hosts if h.name not in registered]


def absent_message(pool: NodePool, host: Host) -> str:
    return (f"node {host.name} (pool {pool.name}) is not registered in the cluster: its labels are not applied "
            "(a server-side apply would create a bare Node, and the kubelet would then join without its "
            "registration taints). Join it (kubeadm join), then run `gpufleet up` again.")

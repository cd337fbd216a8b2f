"""Control/data-plane separation: what GPU and system nodes carry, and what pods need to land on them.

Who owns what on a Node (docs/pulumi.md): labels are a granular map, so the program patches them with
server-side apply next to other managers' labels. Taints are one atomic list under server-side apply, so
they are never in a patch: the kubelet registers them (Ansible-managed pools), the node group definition
carries them (cloud pools), and nodes already registered get them by read-modify-write
(``gpufleet.infra.node_taints``, run by a Job).
"""

from __future__ import annotations

from typing import Any

from gpufleet.spec import GPU_TAINT_KEY, Host, NodePool

ROLE_LABEL = "gpufleet.io/role"
POOL_LABEL = "gpufleet.io/pool"
#: Node label of cloud pools with their fabric attached (efa, infiniband, gpudirect): what fabric agents select.
FABRIC_LABEL = "gpufleet.io/fabric"
#: Value of the mandatory GPU taint: nvidia.com/gpu=present:NoSchedule.
GPU_TAINT_VALUE = "present"
GPU_TAINT: dict[str, str] = {"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": "NoSchedule"}

#: Operators and monitoring run on system nodes only, never next to training jobs.
SYSTEM_NODE_SELECTOR: dict[str, str] = {ROLE_LABEL: "system"}
#: System nodes may be control-plane nodes (small clusters): what runs there tolerates their taint.
CONTROL_PLANE_TOLERATION: dict[str, str] = {
    "key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
#: GPU Operator node labels that keep its operands off a node (gpu-operator docs, "Common chart
#: customization options"): Ansible installs driver and toolkit there, the operator must not.
OPERATOR_OFF_LABELS: dict[str, str] = {
    "nvidia.com/gpu.deploy.driver": "false",
    "nvidia.com/gpu.deploy.container-toolkit": "false",
}


#: Node labels gpufleet sets from the stack's ``place`` (on-prem hosts, Azure pools), outermost first: the levels
#: of Kueue's Topology where the cloud publishes none (gpufleet.infra.kueue).
PLACE_LABELS: dict[str, str] = {"block": "gpufleet.io/block", "rack": "gpufleet.io/rack",
                                "switch": "gpufleet.io/switch"}


def host_place(pool: NodePool, host: Host | None) -> dict[str, str]:
    """Level name -> value of a host's network place (the host's own fields override the pool's)."""
    out: dict[str, str] = {}
    for place in (pool.place, host.place if host is not None else None):
        if place is not None:
            out.update({k: v for k, v in place.model_dump().items() if v is not None})
    return out


def place_labels(pool: NodePool, host: Host | None) -> dict[str, str]:
    """Node labels of a host's network place (gpufleet.io/block, rack, switch)."""
    return {PLACE_LABELS[k]: v for k, v in host_place(pool, host).items()}


def node_labels(pool: NodePool, *, operator_components: bool = False,
                host: Host | None = None) -> dict[str, str]:
    """The pool's labels (with ``host``: that host's place labels too). ``operator_components``: the GPU
    Operator's driver/toolkit are on in this cluster (a pool has host_management operator), so Ansible-managed
    GPU pools are labelled out of them."""
    labels = {**pool.labels, **place_labels(pool, host), ROLE_LABEL: pool.role, POOL_LABEL: pool.name}
    if operator_components and pool.role == "gpu" and pool.host_management == "ansible":
        labels.update(OPERATOR_OFF_LABELS)
    return labels


def node_taints(pool: NodePool) -> list[dict[str, str]]:
    """The pool's taints; GPU pools always carry the GPU taint, first, whatever the stack says."""
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
    if pool.role == "gpu":
        taints = [GPU_TAINT, *[t for t in taints if t["key"] != GPU_TAINT_KEY]]
    return taints


def taint_spec(taint: dict[str, str]) -> str:
    """``key=value:effect`` as kubectl taint and the kubelet's --register-with-taints write it."""
    return f"{taint['key']}={taint.get('value', '')}:{taint['effect']}"


def taint_args(pool: NodePool) -> list[str]:
    """Arguments of ``gpufleet/infra/node_taints.py`` for the pool: its nodes by label, its taints."""
    args = ["--selector", f"{POOL_LABEL}={pool.name}"]
    for t in node_taints(pool):
        args += ["--taint", taint_spec(t)]
    return args


def toleration(taint: dict[str, str]) -> dict[str, Any]:
    return {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}


def gpu_node_tolerations(pools: list[NodePool]) -> list[dict[str, Any]]:
    """Tolerations an agent needs to run on every GPU node of these pools (deduplicated, stable order)."""
    out: list[dict[str, Any]] = []
    for pool in pools:
        for taint in node_taints(pool):
            tol = toleration(taint)
            if tol not in out:
                out.append(tol)
    return out

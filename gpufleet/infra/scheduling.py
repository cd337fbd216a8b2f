"""Control/data-plane separation: what GPU and system nodes carry, and what pods need to land on them."""

from __future__ import annotations

from typing import Any

from gpufleet.spec import GPU_TAINT_KEY, NodePool

ROLE_LABEL = "gpufleet.io/role"
POOL_LABEL = "gpufleet.io/pool"
#: Value of the mandatory GPU taint: nvidia.com/gpu=present:NoSchedule.
GPU_TAINT_VALUE = "present"
GPU_TAINT: dict[str, str] = {"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": "NoSchedule"}

#: Operators and monitoring run on system nodes only, never next to training jobs.
SYSTEM_NODE_SELECTOR: dict[str, str] = {ROLE_LABEL: "system"}


def node_labels(pool: NodePool) -> dict[str, str]:
    return {**pool.labels, ROLE_LABEL: pool.role, POOL_LABEL: pool.name}


def node_taints(pool: NodePool) -> list[dict[str, str]]:
    """The pool's taints; GPU pools always carry the GPU taint, first, whatever the stack says."""
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
    if pool.role == "gpu":
        taints = [GPU_TAINT, *[t for t in taints if t["key"] != GPU_TAINT_KEY]]
    return taints


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

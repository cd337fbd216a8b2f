"""The backend contract: what every backend hands the platform layer and the inventory writer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.spec import Host, NodePool

if TYPE_CHECKING:
    import pulumi
    import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class PoolHandle:
    """A node pool as the backend made (or found) it."""

    pool: NodePool
    #: Hosts Ansible reaches; empty for pools whose nodes Ansible does not manage.
    hosts: tuple[Host, ...] = ()
    #: True when the backend's node group definition carries the pool's taints (cloud node groups register
    #: their nodes with them: ``gpufleet.infra.scheduling.node_taints(pool)``), so nothing taints them later.
    #: False for nodes that exist already: the platform layer taints them by read-modify-write.
    taints_at_registration: bool = False


@dataclass
class BackendHandles:
    """What every backend returns, so the platform layer and the inventory hand-off are backend-agnostic.

    ``provider`` is None only for the ``local`` backend: the sandbox has no Kubernetes resources of ours.
    """

    provider: k8s.Provider | None
    pools: list[PoolHandle]
    #: Stack output the inventory writer reads: pool name -> list of {name, address, connection, user}.
    inventory_source: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Lustre volumes a backend made itself (``datasets``/``checkpoints`` -> the PV volumeHandle in its CSI
    #: driver's format, known once the file systems exist); empty: the stack's mgs_nids.
    lustre_volume_handles: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    #: The CSI driver of those volumes: the cloud's own (GKE's Managed Lustre add-on, the EKS FSx for Lustre
    #: add-on, Microsoft's Azure Managed Lustre chart), which the backend installs, with each volume's
    #: ``volumeAttributes`` in that driver's PV format; None: the platform layer's Lustre CSI chart (HPE's).
    lustre_csi_driver: str | None = None
    lustre_volume_attributes: Mapping[str, Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    #: Names of the Nodes registered in the cluster when the program ran (``gpufleet.infra.registered_nodes``):
    #: the platform layer labels only hosts among them. None: not known (an offline plan), every host.
    registered_nodes: frozenset[str] | None = None

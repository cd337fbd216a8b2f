"""Per pool of a cloud stack: machine type, GPUs, fabric, placement and the hourly on-demand cost estimate.

From the stack and the catalog only (``gpufleet/catalog/clouds.yaml``, every price with region, date and
source), so ``gpufleet plan`` shows it without the cloud SDK. List prices: no discounts, storage or traffic.
"""

from __future__ import annotations

from typing import Any

from gpufleet.catalog import kubernetes as kv
from gpufleet.catalog.clouds import AWS, AZURE, GCP, Price
from gpufleet.lock import Lock, pool_driver
from gpufleet.spec import ClusterSpec, NodePool

#: What each cloud's fabric and managed Lustre are called (plan output, docs/clouds.md).
SERVICES = {"aws": {"fabric": "EFA", "lustre_service": "FSx for Lustre"},
            "azure": {"fabric": "InfiniBand", "lustre_service": "Azure Managed Lustre"},
            "gcp": {"fabric": "GPUDirect", "lustre_service": "Google Cloud Managed Lustre"}}


def _aws_pool(spec: ClusterSpec, pool: NodePool) -> tuple[dict[str, Any], Price | None] | None:
    assert spec.aws is not None
    itype = AWS.instance_types.get(pool.instance_type or "")
    if itype is None:
        return None
    efa = pool.fabric == "efa" and itype.efa_interfaces > 0
    zones = spec.aws.availability_zones
    return {
        "instance_type": itype.name, "gpus_per_node": itype.gpus, "gpu": itype.gpu,
        "fabric": f"EFA x{itype.efa_interfaces}" if efa else "none",
        "placement": (f"cluster placement group, {zones[0]}" if pool.role == "gpu" and efa
                      else f"spread over {', '.join(zones)}"),
        "instance_source": itype.source,
    }, AWS.price(itype.name, spec.aws.region)


def _azure_pool(spec: ClusterSpec, pool: NodePool) -> tuple[dict[str, Any], Price | None] | None:
    assert spec.azure is not None
    size = AZURE.vm_sizes.get(pool.instance_type or "")
    if size is None:
        return None
    ib = pool.fabric == "infiniband" and size.infiniband_hcas > 0
    zone = spec.azure.zone
    return {
        "instance_type": size.name, "gpus_per_node": size.gpus, "gpu": size.gpu,
        "fabric": f"InfiniBand {size.infiniband_hcas} x {size.infiniband_gbps} Gb/s" if ib else "none",
        "placement": (f"one scale set (one InfiniBand partition), zone {zone}" if pool.role == "gpu"
                      else "spread over zones 1, 2, 3"),
        "instance_source": size.source,
    }, AZURE.price(size.name, spec.azure.location)


def _gcp_pool(spec: ClusterSpec, pool: NodePool) -> tuple[dict[str, Any], Price | None] | None:
    assert spec.gcp is not None
    mt = GCP.machine_types.get(pool.instance_type or "")
    if mt is None:
        return None
    flavour = GCP.flavour(mt.name) if pool.fabric == "gpudirect" else None
    nics = f"{mt.gpu_nics} GPU NICs" + (f" + {mt.extra_gvnics} gVNIC" if mt.extra_gvnics else "")
    zone = spec.gcp.zone
    compact = GCP.gpudirect[mt.gpudirect].compact_placement if mt.gpudirect in GCP.gpudirect else True
    placement = (f"reservation {pool.capacity.reservation_id}, {zone}" if pool.capacity.type != "on-demand"
                 else f"compact placement, {zone}" if compact else f"zone {zone} (no compact placement for it)")
    return {
        "instance_type": mt.name, "gpus_per_node": mt.gpus, "gpu": mt.gpu,
        "fabric": f"{flavour.label}, {nics}" if flavour is not None else "none",
        "placement": placement if pool.role == "gpu" else zone,
        "instance_source": mt.source,
    }, GCP.price(mt.name, spec.gcp.region)


_POOLS = {"aws": _aws_pool, "azure": _azure_pool, "gcp": _gcp_pool}
#: The Lustre CSI driver that mounts each cloud's managed Lustre on the pools' nodes (the platform layer's PVs):
#: each cloud's own, named in its catalog section.
LUSTRE_CSI_DRIVERS = {"aws": AWS.fsx_lustre.csi.driver, "azure": AZURE.managed_lustre.csi_driver,
                      "gcp": GCP.managed_lustre.csi_driver}


def kubernetes_summary(spec: ClusterSpec) -> dict[str, Any]:
    """The managed Kubernetes version, where it stands today in the cloud's support calendar and the source
    (gpufleet/catalog/kubernetes.yaml). GKE follows its release channel: the channel is the version."""
    cfg = getattr(spec, spec.backend)
    if spec.backend == "gcp":
        return {"version": cfg.kubernetes_version or f"{cfg.release_channel} channel default",
                "release_channel": cfg.release_channel, "support": "follows the release channel",
                "support_end": None,
                "source": "https://cloud.google.com/kubernetes-engine/docs/release-schedule"}
    on = kv.today()
    standing = kv.support(spec.backend, cfg.kubernetes_version, on, cfg.long_term_support)
    return {"version": cfg.kubernetes_version, "long_term_support": cfg.long_term_support,
            "support": standing.status if standing else "unknown",
            "support_end": str(standing.ends) if standing and standing.ends else None,
            "as_of": str(on), "source": standing.source if standing else None}


def _region(spec: ClusterSpec) -> str:
    if spec.aws is not None:
        return spec.aws.region
    if spec.gcp is not None:
        return spec.gcp.region
    assert spec.azure is not None
    return spec.azure.location


def cloud_summary(spec: ClusterSpec, lock: Lock | None = None) -> dict[str, Any]:
    """Empty for non-cloud backends (and clouds without a backend). With the stack's lock, each GPU pool says who
    installs its driver and which version runs (``gpufleet.lock.pool_driver``)."""
    if spec.backend not in _POOLS or getattr(spec, spec.backend) is None:
        return {}
    region = _region(spec)
    pools: list[dict[str, Any]] = []
    total = 0.0
    missing: list[str] = []
    for pool in spec.pools:
        found = _POOLS[spec.backend](spec, pool)
        if found is None:
            continue
        facts, price = found
        nodes = pool.size
        entry: dict[str, Any] = {
            "pool": pool.name, "role": pool.role, "instance_type": facts["instance_type"], "nodes": nodes,
            "max_nodes": pool.max if pool.max is not None else nodes,
            "gpus_per_node": facts["gpus_per_node"], "gpu": facts["gpu"], "gpus": facts["gpus_per_node"] * nodes,
            "fabric": facts["fabric"], "placement": facts["placement"],
            "capacity": pool.capacity.type + (f" {pool.capacity.reservation_id}" if pool.capacity.reservation_id
                                              else ""),
            "host_management": pool.host_management,
            "instance_source": facts["instance_source"],
        }
        if spec.storage.lustre is not None:
            entry["lustre_csi_driver"] = LUSTRE_CSI_DRIVERS[spec.backend]
        if lock is not None and pool.role == "gpu":
            entry["driver"] = pool_driver(lock, pool.host_management)
        if price is None:
            missing.append(facts["instance_type"])
            entry.update(usd_per_hour_each=None, usd_per_hour=None)
        else:
            cost = round(price.usd_per_hour * nodes, 4)
            total += cost
            entry.update(usd_per_hour_each=price.usd_per_hour, usd_per_hour=cost, price_region=price.region,
                         price_date=str(price.date), price_source=price.source)
        pools.append(entry)
    return {
        "cloud": spec.backend, "region": region, **SERVICES[spec.backend],
        "kubernetes": kubernetes_summary(spec),
        "pools": pools,
        "total_usd_per_hour": round(total, 4),
        "total_complete": not missing,
        "cost_note": ("on-demand list price per instance-hour at each pool's current size; no savings plans, "
                      "reservations, storage or data transfer"
                      + (f"; no catalog price in {region} for: {', '.join(missing)}" if missing else "")),
    }

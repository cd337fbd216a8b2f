"""Per pool of a cloud stack: machine type, GPUs, fabric, placement and the hourly on-demand cost estimate.

From the stack and the catalog only (``gpufleet/catalog/clouds.yaml``, every price with region, date and
source), so ``gpufleet plan`` shows it without the cloud SDK. List prices: no discounts, storage or traffic.
"""

from __future__ import annotations

from typing import Any

from gpufleet.catalog.clouds import AWS
from gpufleet.spec import ClusterSpec

#: What each cloud's fabric and managed Lustre are called (plan output, docs/clouds.md).
SERVICES = {"aws": {"fabric": "EFA", "lustre_service": "FSx for Lustre"}}


def cloud_summary(spec: ClusterSpec) -> dict[str, Any]:
    """Empty for non-cloud backends."""
    if spec.backend != "aws" or spec.aws is None:
        return {}
    region = spec.aws.region
    pools: list[dict[str, Any]] = []
    total = 0.0
    missing: list[str] = []
    for pool in spec.pools:
        itype = AWS.instance_types.get(pool.instance_type or "")
        if itype is None:
            continue
        price = AWS.price(itype.name, region)
        nodes = pool.size
        efa = pool.fabric == "efa" and itype.efa_interfaces > 0
        entry: dict[str, Any] = {
            "pool": pool.name, "role": pool.role, "instance_type": itype.name, "nodes": nodes,
            "max_nodes": pool.max if pool.max is not None else nodes,
            "gpus_per_node": itype.gpus, "gpu": itype.gpu, "gpus": itype.gpus * nodes,
            "fabric": f"EFA x{itype.efa_interfaces}" if efa else "none",
            "placement": (f"cluster placement group, {spec.aws.availability_zones[0]}"
                          if pool.role == "gpu" and efa else f"spread over {', '.join(spec.aws.availability_zones)}"),
            "capacity": pool.capacity.type + (f" {pool.capacity.reservation_id}" if pool.capacity.reservation_id
                                              else ""),
            "host_management": pool.host_management,
            "instance_source": itype.source,
        }
        if price is None:
            missing.append(itype.name)
            entry.update(usd_per_hour_each=None, usd_per_hour=None)
        else:
            cost = round(price.usd_per_hour * nodes, 4)
            total += cost
            entry.update(usd_per_hour_each=price.usd_per_hour, usd_per_hour=cost, price_region=price.region,
                         price_date=str(price.date), price_source=price.source)
        pools.append(entry)
    return {
        "cloud": "aws", "region": region, **SERVICES["aws"],
        "pools": pools,
        "total_usd_per_hour": round(total, 4),
        "total_complete": not missing,
        "cost_note": ("on-demand list price per instance-hour at each pool's current size; no savings plans, "
                      "reservations, storage or data transfer"
                      + (f"; no catalog price in {region} for: {', '.join(missing)}" if missing else "")),
    }

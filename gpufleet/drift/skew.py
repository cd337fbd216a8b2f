"""Fleet skew: versions that differ between hosts of one pool, pinned by the lock or not.

``ansible/playbooks/skew.yml`` reads the versions on every host and reports them with ``set_stats``
(aggregated over hosts): ``STATS_KEY: {host: {item: version, ..., pool}}``; the packages behind each item
come from the lock (gpufleet.lock.packages.skew_packages, through the generated layer). Drift compares hosts
with the lock; skew compares hosts with each other, so it also catches what the lock does not pin
(kernel, VBIOS, OFED) and a host the lock check cannot see (e.g. a loaded module older than installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.ansible_run import RunResult
from gpufleet.lock import Lock

#: The set_stats key skew.yml reports under.
STATS_KEY = "gpufleet_skew"
#: Items skew.yml reports, in report order, with a reader's name.
ITEMS: dict[str, str] = {
    "kernel": "kernel",
    "driver_loaded": "driver (loaded module)",
    "driver_installed": "driver (installed)",
    "fabricmanager": "fabric manager",
    "cuda": "CUDA toolkit",
    "cudnn": "cuDNN",
    "nccl": "NCCL",
    "dcgm": "DCGM",
    "ofed": "DOCA/OFED",
    "vbios": "VBIOS",
}


def locked_values(lock: Lock) -> dict[str, str]:
    """The lock's version for each item it pins (upstream versions, without Debian revisions)."""
    pins = {
        "driver_loaded": lock.driver,
        "driver_installed": lock.driver,
        "cuda": lock.cuda,
        "cudnn": lock.cudnn,
        "nccl": lock.nccl,
        "dcgm": lock.dcgm,
    }
    if lock.fabric_manager_required:
        pins["fabricmanager"] = lock.fabric_manager
    if lock.kernel:
        pins["kernel"] = lock.kernel
    return pins


def collect_versions(result: RunResult) -> dict[str, dict[str, str]]:
    """host -> {item: version} from what the skew playbook reported with set_stats; missing items are ``""``."""
    reported: Any = result.custom_stats.get(STATS_KEY)
    out: dict[str, dict[str, str]] = {}
    if not isinstance(reported, Mapping):
        return out
    for host, items in reported.items():
        if isinstance(items, Mapping):
            out[str(host)] = {str(k): "" if v is None else str(v) for k, v in items.items()}
    return out


@dataclass
class SkewItem:
    pool: str
    item: str
    #: version -> hosts reporting it ("" means not installed / not readable).
    values: dict[str, list[str]]
    locked: str | None

    def line(self) -> str:
        parts = [f"{v or 'none'} on {', '.join(hosts)}" for v, hosts in self.values.items()]
        lock = f" (locked {self.locked})" if self.locked else " (not pinned by the lock)"
        return f"pool {self.pool} {ITEMS.get(self.item, self.item)}: {'; '.join(parts)}{lock}"

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "item": self.item, "values": self.values, "locked": self.locked,
                "pinned": self.locked is not None}


def find_skew(versions: Mapping[str, Mapping[str, str]], lock: Lock | None = None) -> list[SkewItem]:
    """Items whose value differs between hosts of the same pool (values sorted, most common first)."""
    pins = locked_values(lock) if lock else {}
    pools: dict[str, list[str]] = {}
    for host, vals in versions.items():
        pools.setdefault(str(vals.get("pool") or "all"), []).append(host)
    out: list[SkewItem] = []
    for pool, hosts in sorted(pools.items()):
        names = [i for i in ITEMS if any(i in versions[h] for h in hosts)]
        names += sorted({k for h in hosts for k in versions[h]} - set(ITEMS) - {"pool"})
        for item in names:
            values: dict[str, list[str]] = {}
            for h in sorted(hosts):
                values.setdefault(versions[h].get(item, ""), []).append(h)
            if len(values) > 1:
                ordered = dict(sorted(values.items(), key=lambda kv: (-len(kv[1]), kv[0])))
                out.append(SkewItem(pool, item, ordered, pins.get(item)))
    return out

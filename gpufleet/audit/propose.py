"""The proposed stack: pools of identical hardware, the lock profile nearest to what runs, written as
``stacks/Pulumi.<name>.yaml`` (backend ``existing``) with the audit's evidence in comments.

The stack is checked the way ``gpufleet lock check`` checks one (spec validation, then every lock rule) before
it is returned; a proposal the project would refuse is a bug, not an output.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpufleet.audit.facts import HostFacts
from gpufleet.audit.pools import by_hardware, hardware_pool_name
from gpufleet.catalog import GPUS
from gpufleet.lock.profiles import PROFILES, Profile
from gpufleet.lock.resolve import resolve_lock
from gpufleet.lock.versions import driver_branch, matches_format
from gpufleet.spec import ClusterSpec

#: Components the audit reads and a profile pins, compared to choose the nearest profile.
COMPARED = ("driver", "cuda", "cudnn", "nccl", "dcgm", "container_toolkit")
_HOST = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


@dataclass
class PoolPlan:
    name: str
    gpu: str | None
    gpu_name: str | None
    count: int
    fabric: str
    hosts: list[HostFacts]
    power_limit: str | None
    #: component -> the version most hosts run.
    versions: dict[str, str]


@dataclass
class Proposal:
    stack: str
    profile: Profile
    pools: list[PoolPlan]
    #: "component: running -> profile" for every component the profile changes.
    changes: list[str]
    #: Hosts left out of the stack and why (GPU not in the catalog, host name not a node name).
    left_out: list[str] = field(default_factory=list)

    def config(self) -> dict[str, Any]:
        """The stack file's ``config`` mapping."""
        pools: list[dict[str, Any]] = []
        for p in self.pools:
            pool: dict[str, Any] = {"name": p.name, "role": "gpu", "gpu": p.gpu, "count": len(p.hosts),
                                    "fabric": p.fabric, "host_management": "ansible"}
            if p.power_limit:
                pool["power_limit"] = p.power_limit
            pool["hosts"] = [{"name": h.host, "address": h.host} for h in p.hosts]
            pools.append(pool)
        return {"gpufleet:backend": "existing", "gpufleet:clusterName": self.stack,
                "gpufleet:lock": {"profile": self.profile.name}, "gpufleet:pools": pools}

    def spec(self) -> ClusterSpec:
        cfg = self.config()
        return ClusterSpec.model_validate({"stack": self.stack, "backend": "existing", "cluster_name": self.stack,
                                           "lock": cfg["gpufleet:lock"], "pools": cfg["gpufleet:pools"]})

    def render(self) -> str:
        lines = [f"# Proposed by `gpufleet audit` from {sum(len(p.hosts) for p in self.pools)} audited host(s).",
                 f"# Lock profile {self.profile.name}: {self.profile.description}."]
        if self.changes:
            lines.append("# Converging with this lock changes what runs:")
            lines += [f"#   {c}" for c in self.changes]
        else:
            lines.append("# The profile matches every version the hosts run.")
        for p in self.pools:
            running = ", ".join(f"{k} {v}" for k, v in sorted(p.versions.items())) or "no NVIDIA packages"
            lines.append(f"# pool {p.name}: {len(p.hosts)} x {p.count} {p.gpu_name}, fabric {p.fabric}; "
                         f"runs {running}")
        lines += [f"# left out: {why}" for why in self.left_out]
        lines.append("# Addresses are the audited host names: replace them where Ansible reaches hosts otherwise.")
        body = yaml.safe_dump({"config": self.config()}, sort_keys=False, default_flow_style=False)
        return "\n".join(lines) + "\n---\n" + body


def majority(values: list[str]) -> str | None:
    return Counter(values).most_common(1)[0][0] if values else None


def _score(profile: Profile, versions: dict[str, str]) -> tuple[int, int, int]:
    have = profile.versions()
    same = sum(1 for k in COMPARED if k in versions and have.get(k) == versions[k])
    branch = 0
    if "driver" in versions and matches_format("driver", versions["driver"]):
        branch = -abs(driver_branch(versions["driver"]) - driver_branch(str(have["driver"])))
    return same, branch, 0


def nearest_profile(gpus: set[str], versions: dict[str, str]) -> Profile:
    """The profile made for every pool's GPU that shares the most versions with what runs (then the closest
    driver branch); any profile when none lists all the GPUs (the lock rules then say what is wrong)."""
    fitting = [p for p in PROFILES.values() if gpus <= set(p.gpus)] or list(PROFILES.values())
    return max(fitting, key=lambda p: _score(p, versions))


def _power_limit(hosts: list[HostFacts]) -> str | None:
    limits = {g.power_limit_w for h in hosts for g in (h.smi.gpus if h.smi else []) if g.power_limit_w}
    return f"{int(next(iter(limits)))}" if len(limits) == 1 else None


def propose(facts: list[HostFacts], stack: str) -> Proposal:
    """The stack for these hosts; ``resolve_lock`` has accepted it (a ConfigError here is a bug)."""
    import re

    plans: list[PoolPlan] = []
    left_out: list[str] = []
    for key, hosts in sorted(by_hardware(facts).items()):
        model = key[0]
        if model not in GPUS:
            left_out += [f"{h.host}: GPU {h.gpu_name or 'none found'} is not in gpufleet's catalog" for h in hosts]
            continue
        named = [h for h in hosts if re.fullmatch(_HOST, h.host)]
        left_out += [f"{h.host}: not a node name (RFC 1123 lower case)" for h in hosts if h not in named]
        if not named:
            continue
        versions: dict[str, str] = {}
        for comp in COMPARED:
            v = majority([h.versions()[comp] for h in named if comp in h.versions()])
            if v is not None:
                versions[comp] = v
        plans.append(PoolPlan(hardware_pool_name(key), model, named[0].gpu_name, key[1], key[2], named,
                              _power_limit(named), versions))
    overall: dict[str, str] = {}
    for comp in COMPARED:
        v = majority([p.versions[comp] for p in plans if comp in p.versions])
        if v is not None:
            overall[comp] = v
    profile = nearest_profile({p.gpu for p in plans if p.gpu}, overall)
    have = profile.versions()
    changes = [f"{k}: {overall[k]} -> {have[k]}" for k in COMPARED if k in overall and overall[k] != have.get(k)]
    proposal = Proposal(stack, profile, plans, changes, left_out)
    if plans:
        resolve_lock(proposal.spec())
    return proposal

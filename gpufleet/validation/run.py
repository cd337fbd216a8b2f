"""``gpufleet validate``: run the ``node_validation`` role, then judge each node with ``health``.

The role writes one JSON bundle per host into ``<raw_dir>/<host>.json`` on the controller; every
judgement is made here from those bundles and the stack (spec, lock, catalog).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import RunResult, run_playbook
from gpufleet.catalog import get_gpu
from gpufleet.errors import REDACTED, InputError
from gpufleet.inputs import load_yaml, read_text
from gpufleet.lock import Lock
from gpufleet.outdir import OutputDir
from gpufleet.spec import ClusterSpec
from gpufleet.validation.health import Expectations, NodeData, NodeHealth, evaluate_node, unreachable

if TYPE_CHECKING:
    from gpufleet.workflow import ResolvedStack

PLAYBOOK = REPO_ROOT / "ansible" / "playbooks" / "validate.yml"


def expectations_for(spec: ClusterSpec, lock: Lock, pool_name: str | None,
                     ib_rate_gbps: int | None = None) -> Expectations:
    """What a node of ``pool_name`` must show, from the pool, the lock and the catalog."""
    pool = next((p for p in spec.pools if p.name == pool_name), None)
    model = get_gpu(pool.gpu) if pool is not None and pool.gpu else None
    power = None
    if pool is not None and model is not None and pool.power_limit:
        power = float(model.resolve_power_limit(pool.power_limit))
    return Expectations(
        model=model,
        # Operator-managed pools run the operator's driver container at the lock's version too.
        driver_version=lock.driver,
        persistence_mode=True,
        power_limit_w=power,
        fabric=pool.fabric if pool is not None else "none",
        ib_hca=spec.networks.ib_hca,
        ib_rate_gbps=ib_rate_gbps,
    )


def inventory_hosts(inventory: Path, group: str = "gpu") -> dict[str, str | None]:
    """Hosts of ``group`` in a gpufleet-written hosts.yml, with their pool (from the ``pool_<name>`` groups)."""
    data = load_yaml(inventory) or {}

    def mapping(value: Any, key: str) -> dict[str, Any]:
        # An inventory edited by hand can hold a list (or a string) where Ansible's format has a mapping.
        # Its value is not shown: inventories hold host variables such as ansible_password.
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InputError.one(str(inventory), f"is a {type(value).__name__}, not a mapping",
                                 "write the inventory in Ansible's YAML format (all: children: <group>: hosts: "
                                 "<host>: {...}), or regenerate it with gpufleet", key=key, value=REDACTED,
                                 kind="inventory problem")
        return value

    all_ = mapping(mapping(data, "-").get("all"), "all")
    children = mapping(all_.get("children"), "all.children")
    pools: dict[str, str] = {}
    for name, grp in children.items():
        if str(name).startswith("pool_"):
            for host in mapping(mapping(grp, f"all.children.{name}").get("hosts"), f"all.children.{name}.hosts"):
                pools[str(host)] = str(name).removeprefix("pool_")
    members = mapping(mapping(children.get(group), f"all.children.{group}").get("hosts"),
                      f"all.children.{group}.hosts")
    return {str(h): pools.get(str(h)) for h in members}


def load_bundles(raw_dir: Path) -> dict[str, dict[str, Any]]:
    """The role's per-host JSON bundles, read within the input limits (a bundle is node output: untrusted)."""
    bundles: dict[str, dict[str, Any]] = {}
    for path in sorted(raw_dir.glob("*.json")):
        try:
            data = json.loads(read_text(path, "log"), parse_int=_bounded_int)
        except (ValueError, RecursionError) as e:
            raise InputError.one(str(path), f"not a validation bundle ({str(e)[:120]})",
                                 "rerun gpufleet validate; the node_validation role writes these files",
                                 kind="input error") from None
        if not isinstance(data, dict):
            raise InputError.one(str(path), f"a validation bundle is a JSON object, not {type(data).__name__}",
                                 "rerun gpufleet validate", kind="input error")
        bundles[str(data.get("host") or path.stem)] = data
    return bundles


def _bounded_int(text: str) -> int:
    if len(text) > 20:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def evaluate(spec: ClusterSpec, lock: Lock, hosts: dict[str, str | None], bundles: dict[str, dict[str, Any]],
             run: RunResult | None = None, ib_rate_gbps: int | None = None) -> list[NodeHealth]:
    """One NodeHealth per host; a host without a bundle is critical (never silently healthy)."""
    out: list[NodeHealth] = []
    for host, pool in sorted(hosts.items()):
        bundle = bundles.get(host)
        if bundle is None:
            why = "the playbook did not reach it"
            if run is not None and host in run.hosts:
                why = f"playbook state {run.hosts[host].state}"
                msgs = [f["msg"] for f in run.to_json().get("failed", []) if f.get("host") == host and f.get("msg")]
                if msgs:
                    why += f": {msgs[0]}"
            out.append(unreachable(host, pool, why))
            continue
        try:
            data = NodeData.from_bundle(bundle)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # The bundle is node output: a wrong schema or shape is the contract's error, not a traceback.
            raise InputError.one(f"validation bundle of {host}", f"not a node_validation bundle ({str(e)[:160]})",
                                 "rerun gpufleet validate with this gpufleet's node_validation role",
                                 kind="input error") from None
        out.append(evaluate_node(data, expectations_for(spec, lock, data.pool or pool, ib_rate_gbps)))
    return out


@dataclass
class ValidationResult:
    stack: str
    nodes: list[NodeHealth]
    run: RunResult | None
    raw_dir: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No critical finding on any node."""
        return all(n.status != "critical" for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "ok": self.ok, "nodes": [n.to_json() for n in self.nodes],
                "playbook": None if self.run is None else {"ok": self.run.ok, "rc": self.run.rc,
                                                           "status": self.run.status},
                "raw_dir": None if self.raw_dir is None else str(self.raw_dir), "notes": self.notes}


def run_validation(stack: ResolvedStack, *, limit: str | None = None, keep: OutputDir | None = None,
                   ib_rate_gbps: int | None = None, console: Console | None = None,
                   live: bool = True) -> ValidationResult:
    """Collect on every GPU node of ``stack`` and judge it; ``keep`` gets a copy of the bundles under raw/.

    The role always writes into a fresh temporary folder: a bundle from an earlier run cannot stand in for an
    unreachable host, and nothing in the user's folder is deleted to ensure that. In ``keep`` only the bundles
    gpufleet copied there earlier are replaced or removed (gpufleet.outdir).
    """
    spec, lock, inventory = stack.spec, stack.lock, stack.inventory
    hosts = inventory_hosts(inventory)
    with tempfile.TemporaryDirectory(prefix="gpufleet-validate-") as tmp:
        target = Path(tmp).resolve()
        run = run_playbook(PLAYBOOK, inventory, limit=limit, console=console, live=live,
                           extravars={"node_validation_report_dir": str(target)})
        bundles = load_bundles(target)
        if keep is not None:
            names = {f"raw/{p.name}" for p in target.glob("*.json")}
            keep.remove_written("raw/*.json", keep=names)
            for rel in sorted(names):
                keep.write_bytes(rel, (target / rel.removeprefix("raw/")).read_bytes())
        if limit:
            hosts = {h: p for h, p in hosts.items() if h in bundles or h in run.hosts}
            if not hosts:
                # No node checked is not a healthy cluster: a typo in --limit must not report "healthy".
                raise InputError.one(str(inventory), f"--limit {limit!r} matches no GPU host of the inventory",
                                     "pass a host name or pattern of the inventory's gpu group", key="--limit",
                                     value=limit, kind="invalid option")
        nodes = evaluate(spec, lock, hosts, bundles, run, ib_rate_gbps)
    return ValidationResult(spec.stack, nodes, run, None if keep is None else keep.path / "raw")

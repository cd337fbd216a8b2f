"""``gpufleet plan --stack S [--json]``: offline evaluation of the Pulumi program with mocks."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.tree import Tree

from gpufleet.cli.contract import console_for, contract, dumps
from gpufleet.lock import Lock
from gpufleet.spec import CLOUD_BACKENDS, ClusterSpec

if TYPE_CHECKING:
    # The Pulumi SDK (~0.2-0.3 CPU s to import) only for `gpufleet plan`: every other command (up, converge,
    # drift) imports this module through the CLI and needs none of it.
    from gpufleet.infra.offline import OfflinePlan, PlannedResource

app = typer.Typer(add_completion=False)


def key_inputs(res: PlannedResource) -> dict[str, Any]:
    """The inputs worth a glance per resource type (the JSON output carries all of them)."""
    i = res.inputs
    meta = i.get("metadata") or {}
    kind = res.type.rsplit(":", 1)[-1]
    if kind == "Release":
        return {"chart": i.get("chart"), "version": i.get("version"), "namespace": i.get("namespace"),
                "repo": (i.get("repositoryOpts") or {}).get("repo")}
    if kind == "NodePatch":
        return {"node": meta.get("name"), "labels": meta.get("labels")}
    if kind == "Job":
        pod = ((i.get("spec") or {}).get("template") or {}).get("spec") or {}
        cmd = [a for c in pod.get("containers") or [] for a in c.get("command") or []]
        # Taint Jobs: node_taints.py --selector <pool label> --taint <key=value:effect> ...
        pairs = list(itertools.pairwise(cmd))
        return {"name": meta.get("name"), "namespace": meta.get("namespace"),
                "selector": next((v for k, v in pairs if k == "--selector"), None),
                "taints": [v for k, v in pairs if k == "--taint"]}
    if kind == "PersistentVolume":
        spec = i.get("spec") or {}
        return {"volumeHandle": (spec.get("csi") or {}).get("volumeHandle"),
                "capacity": (spec.get("capacity") or {}).get("storage"),
                "accessModes": spec.get("accessModes")}
    if kind == "kubernetes":
        return {k: v for k, v in i.items() if k in ("kubeconfig", "enableServerSideApply")}
    if res.custom and meta:
        out = {"name": meta.get("name")}
        if meta.get("namespace"):
            out["namespace"] = meta["namespace"]
        return out
    return {}


def plan_data(spec: ClusterSpec, plan: OfflinePlan, inventory: dict[str, str],
              lock: Lock | None = None) -> dict[str, Any]:
    releases = {r.inputs.get("chart"): r.inputs.get("values")
                for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    from gpufleet.infra.cloud_summary import cloud_summary
    from gpufleet.infra.offline import DISCLAIMER

    return {
        "cloud": cloud_summary(spec, lock),
        "monitoring": monitoring_summary(spec, plan),
        "scheduling": scheduling_summary(spec, plan),
        "note": DISCLAIMER,
        "stack": spec.stack,
        "backend": spec.backend,
        "lock": plan.outputs.get("lock"),
        "resources": [{"type": r.type, "name": r.name, "parent": r.parent, "urn": r.urn,
                       "parent_urn": r.parent_urn, "key_inputs": key_inputs(r), "inputs": r.inputs}
                      for r in sorted(plan.resources, key=lambda r: r.urn)],
        "values": releases,
        "inventory": inventory,
        "warnings": plan.warnings,
    }


def scheduling_summary(spec: ClusterSpec, plan: OfflinePlan) -> list[dict[str, Any]]:
    """Per GPU pool: Kueue flavor, queues, quotas, topology levels and placement (empty: no Kueue declared)."""
    from gpufleet.infra.kueue import plan_rows

    if not plan.of_type("gpufleet:platform:Kueue"):
        return []
    return plan_rows(spec)


def monitoring_summary(spec: ClusterSpec, plan: OfflinePlan) -> dict[str, Any]:
    """Who scrapes what: the monitoring stack, the ServiceMonitors and rules it picks up, the drift metric."""
    if not plan.resources:
        return {}
    kinds = {r.type.rsplit(":", 1)[-1] for r in plan.resources}
    releases = {r.inputs.get("chart"): r.inputs for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    exporter = ((releases.get("gpu-operator") or {}).get("values") or {}).get("dcgmExporter") or {}
    standalone = (releases.get("dcgm-exporter") or {}).get("values") or {}
    return {
        "mode": spec.monitoring.mode,
        "prometheus": (f"kube-prometheus-stack {releases['kube-prometheus-stack']['version']} on system nodes"
                       if "kube-prometheus-stack" in releases
                       else f"existing, selecting labels {spec.monitoring.selector}"),
        "dcgm_exporter_service_monitor": bool((exporter.get("serviceMonitor") or {}).get("enabled")
                                              or (standalone.get("serviceMonitor") or {}).get("enabled")),
        "prometheus_rules": [r.inputs["metadata"]["name"]
                             for r in plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")],
        "grafana_dashboard_configmaps": [
            r.inputs["metadata"]["name"] for r in plan.of_type("kubernetes:core/v1:ConfigMap")
            if (r.inputs["metadata"].get("labels") or {}).get("grafana_dashboard")],
        "drift_textfile_metric": ("node_exporter textfile collector on the node labelled "
                                  "gpufleet.io/drift-metrics=true" if "CronJob" in kinds
                                  else "not deployed (set gpufleet:drift to run the check in the cluster)"),
    }


def sandbox_inventory_source(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    """The local stack's hosts as `gpufleet up` writes them: the sandbox's containers, reached with docker."""
    from gpufleet.sandbox.backend import sandbox_hosts

    return {pool: [h.model_dump() for h in hosts] for pool, hosts in sandbox_hosts(spec).items()}


def render_inventory(spec: ClusterSpec, lock: Any, outputs: dict[str, Any]) -> dict[str, str]:
    """The files write_inventory would write, by relative path (written to a temporary folder)."""
    from gpufleet.inventory import hosts_from_outputs, write_inventory

    if not outputs.get("inventory") and spec.backend not in CLOUD_BACKENDS:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_inventory(spec, lock, hosts_from_outputs(outputs["inventory"]), root)
        return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _print_cloud(console: Console, cloud: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{cloud['cloud']} {cloud['region']}: fabric {cloud['fabric']}, "
                        f"Lustre {cloud['lustre_service']}")
    for col in ("pool", "instance type", "nodes", "GPUs", "fabric", "placement", "capacity", "USD/h"):
        table.add_column(col)
    for p in cloud["pools"]:
        gpus = f"{p['gpus']} ({p['gpus_per_node']} x {p['gpu']})" if p["gpu"] else "-"
        cost = "no price" if p["usd_per_hour"] is None else f"{p['usd_per_hour']:.2f}"
        table.add_row(p["pool"], p["instance_type"], f"{p['nodes']} (max {p['max_nodes']})", gpus, p["fabric"],
                      p["placement"], p["capacity"], cost)
    console.print(table)
    k = cloud["kubernetes"]
    console.print(f"Kubernetes {k['version']}: {k['support']}"
                  + (f" until {k['support_end']}" if k.get("support_end") else "") + f" ({k['source']})",
                  markup=False, highlight=False)
    for p in cloud["pools"]:
        if p.get("lustre_csi_driver"):
            console.print(f"  {p['pool']} Lustre CSI driver: {p['lustre_csi_driver']}", markup=False,
                          highlight=False)
    console.print(f"cluster total: [bold]{cloud['total_usd_per_hour']:.2f} USD/h[/] ({cloud['cost_note']})")
    for p in cloud["pools"]:
        if p.get("driver"):
            console.print(f"  {p['pool']} driver: {p['driver']}", markup=False, highlight=False)
    for p in cloud["pools"]:
        if p.get("price_source"):
            console.print(f"  {p['instance_type']}: {p['usd_per_hour_each']} USD/h in {p['price_region']} "
                          f"as of {p['price_date']}, {p['price_source']}", markup=False, highlight=False)


def _print(console: Console, data: dict[str, Any]) -> None:
    console.print(f"[bold yellow]{data['note']}[/]")
    console.print(f"stack [bold]{data['stack']}[/] (backend {data['backend']})")
    console.print_json(json.dumps({"lock": data["lock"]}))
    if data["cloud"]:
        _print_cloud(console, data["cloud"])
    if data["monitoring"]:
        console.print("[bold]monitoring[/]")
        console.print_json(json.dumps(data["monitoring"]))
    if data["scheduling"]:
        console.print("[bold]scheduling (Kueue: flavor, queues, quota, topology levels per GPU pool)[/]")
        console.print_json(json.dumps(data["scheduling"]))
    if data["resources"]:
        children: dict[str | None, list[dict[str, Any]]] = {}
        for r in data["resources"]:
            children.setdefault(r["parent_urn"], []).append(r)
        root = Tree(f"{len(data['resources'])} resources")

        def add(node: Tree, parent: str | None) -> None:
            for r in sorted(children.get(parent, []), key=lambda x: (x["type"], x["name"])):
                ki = json.dumps(r["key_inputs"], sort_keys=True) if r["key_inputs"] else ""
                add(node.add(f"[cyan]{r['type']}[/] [bold]{r['name']}[/] {ki}"), r["urn"])

        add(root, None)
        console.print(root)
    else:
        console.print("no Kubernetes resources: this stack's nodes are not made by Pulumi")
    for chart, vals in data["values"].items():
        console.print(f"[bold]values for {chart}[/]")
        console.print_json(json.dumps(vals))
    for path, text in data["inventory"].items():
        console.print(f"[bold]inventory file {path}[/]")
        console.print(text, markup=False, highlight=False)
    for w in data["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"[bold yellow]{data['note']}[/]")


@app.command()
@contract
def plan(stack: str = typer.Option(..., "--stack", "-s", help="stack name (stacks/Pulumi.<stack>.yaml)"),
         as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Evaluate the Pulumi program offline with mocks and print what it would declare."""
    from gpufleet.infra.offline import evaluate
    from gpufleet.workflow import resolve_stack

    # resolve_stack names the file given in problems, also a path outside stacks/, and sizes the sandbox as every
    # other command sees it. Errors (ConfigError) go through the CLI's error contract: exit 1, JSON with --json.
    resolved = resolve_stack(stack)
    spec, lock = resolved.spec, resolved.lock
    result = evaluate(spec, lock)
    inventory = render_inventory(spec, lock, result.outputs if spec.backend != "local"
                                 else {"inventory": sandbox_inventory_source(spec)})
    data = plan_data(spec, result, inventory, lock)
    if as_json:
        typer.echo(dumps(data))
    else:
        _print(console_for(), data)

"""``gpufleet plan`` through typer's CliRunner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.cli.plan import app
from gpufleet.inputs import loads_yaml


def load_yaml_text(text: str) -> Any:
    # Inventories tag stack values !unsafe: read them as Ansible does (plain strings), with gpufleet's loader.
    return loads_yaml(text, "<test>")

NOTE = "offline evaluation with mocks — this is not `pulumi preview`"


def test_plan_json_onprem() -> None:
    r = CliRunner().invoke(app, ["--stack", "onprem-h100", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["note"] == NOTE
    assert data["backend"] == "existing"
    node = next(x for x in data["resources"] if x["name"] == "node-gpu-a-1")
    assert node["type"] == "kubernetes:core/v1:NodePatch"
    assert node["parent"] == "separation"
    assert node["key_inputs"] == {
        "node": "gpu-a-1",
        "labels": {"gpufleet.io/block": "b1", "gpufleet.io/pool": "h100-a", "gpufleet.io/rack": "r01",
                   "gpufleet.io/role": "gpu", "gpufleet.io/switch": "leaf-01"},
    }
    job = next(x for x in data["resources"] if x["type"] == "kubernetes:batch/v1:Job"
               and x["key_inputs"]["selector"] == "gpufleet.io/pool=h100-a")
    assert job["key_inputs"]["taints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert data["monitoring"] == {
        "mode": "kube-prometheus-stack",
        "prometheus": "kube-prometheus-stack 88.5.3 on system nodes",
        "dcgm_exporter_service_monitor": True,
        "prometheus_rules": ["gpufleet-gpu-alerts"],
        "grafana_dashboard_configmaps": ["gpufleet-gpu-dashboard"],
        "drift_textfile_metric": "not deployed (set gpufleet:drift to run the check in the cluster)",
    }
    rel = next(x for x in data["resources"] if x["type"].endswith("Release") and x["name"] == "gpu-operator")
    assert rel["key_inputs"] == {
        "chart": "gpu-operator",
        "version": "v26.7.0",
        "namespace": "gpu-operator",
        "repo": "https://helm.ngc.nvidia.com/nvidia",
    }
    assert data["values"]["gpu-operator"]["driver"]["version"] == "570.172.08"
    hosts = load_yaml_text(data["inventory"]["hosts.yml"])
    assert hosts["all"]["children"]["pool_h100-a"]["hosts"]["gpu-a-1"]["ansible_host"] == "192.0.2.21"
    assert sorted(data["inventory"]) == [
        "group_vars/all/cluster.yml",
        "group_vars/all/lock_digest.yml",
        "group_vars/all/versions.yml",
        "group_vars/pool_h100-a/gpu_settings.yml",
        "group_vars/pool_h100-a/kubelet.yml",
        "group_vars/pool_h100-b/gpu_settings.yml",
        "group_vars/pool_h100-b/kubelet.yml",
        "hosts.yml",
    ]
    kubelet = load_yaml_text(data["inventory"]["group_vars/pool_h100-a/kubelet.yml"])
    assert kubelet == {"host_tuning_kubelet_register_taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    assert "offline-plan-placeholder-kubeconfig" not in r.output


def test_plan_local_shows_lock_and_inventory_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stack file's sizes, whatever sandbox happens to run on this machine (a bench may run one of 1 or 16 nodes).
    monkeypatch.setattr("gpufleet.sandbox.backend.running_pool_sizes", lambda _stack: {})
    r = CliRunner().invoke(app, ["--stack", "local", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["resources"] == [] and data["values"] == {}
    assert data["lock"]["gpu_operator"] == "v26.7.0"
    hosts = load_yaml_text(data["inventory"]["hosts.yml"])["all"]["children"]
    # Named as `gpufleet up` writes them: the node's hostname, reached at its container.
    assert hosts["pool_gpu"]["hosts"]["gpu-1"] == {
        "ansible_host": "gpufleet-local-gpu-1",
        "gpufleet_pool": "gpu",
        "ansible_connection": "community.docker.docker",
    }
    assert list(hosts["system"]["hosts"]) == ["control-0"]


def test_plan_human_output_states_it_is_not_a_preview() -> None:
    r = CliRunner().invoke(app, ["--stack", "onprem-h100"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == NOTE
    assert r.output.rstrip().splitlines()[-1] == NOTE
    assert "kubernetes:helm.sh/v3:Release gpu-operator" in r.output


def test_plan_bad_stack_names_the_file() -> None:
    r = CliRunner().invoke(app, ["--stack", "nope"])
    assert r.exit_code == 1
    assert "stacks/Pulumi.nope.yaml" in r.output and "stack file not found" in r.output


@pytest.mark.parametrize(("stack", "version", "support_end", "driver"), [
    ("aws-p5", "1.35", "2027-03-27", "fsx.csi.aws.com"),
    ("azure-ndv5", "1.35", "2027-03-31", "azurelustre.csi.azure.com"),
    ("gcp-a3mega", "REGULAR channel default", None, "lustre.csi.storage.gke.io"),
])
def test_plan_shows_kubernetes_support_and_each_pools_lustre_csi_driver(
        monkeypatch: pytest.MonkeyPatch, stack: str, version: str, support_end: str | None, driver: str) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-12-04")
    r = CliRunner().invoke(app, ["--stack", stack, "--json"])
    if r.exit_code != 0 and "extra" in r.output:
        pytest.skip(f"cloud extra not installed: missing reference data ({r.output.strip()[:80]})")
    assert r.exit_code == 0, r.output
    cloud = json.loads(r.output)["cloud"]
    k = cloud["kubernetes"]
    assert (k["version"], k["support_end"]) == (version, support_end)
    assert k["source"].startswith("https://")
    assert {p["pool"]: p["lustre_csi_driver"] for p in cloud["pools"]} == {p["pool"]: driver for p in cloud["pools"]}
    human = CliRunner().invoke(app, ["--stack", stack], env={"COLUMNS": "200", "GPUFLEET_TODAY": "2026-12-04"})
    assert f"Kubernetes {version}" in human.output and k["source"] in human.output

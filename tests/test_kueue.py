"""Kueue offline: chart values against upstream values.yaml, objects against the pinned CRDs, quotas and
topology levels per stack (the real API server checks are tests/test_kueue_apiserver.py)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.catalog.charts import CHARTS
from gpufleet.infra import kueue, manifests
from gpufleet.infra.scheduling import GPU_TAINT, node_taints, toleration
from gpufleet.infra.upstream_check import crd_errors, unknown_value_keys
from gpufleet.lock import resolve_lock
from gpufleet.spec import ClusterSpec, load_spec

UPSTREAM = REPO_ROOT.parent / "shared" / "upstream" / "kueue-v0.19.2"
needs_upstream = pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"upstream reference data absent: {UPSTREAM}")
CRD = {kind: UPSTREAM / "crds" / f"kueue.x-k8s.io_{plural}.yaml" for kind, plural in {
    "Topology": "topologies", "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues", "WorkloadPriorityClass": "workloadpriorityclasses"}.items()}
STACKS = ["onprem-h100", "aws-p5", "gcp-a3mega", "azure-ndv5"]


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module", params=STACKS)
def spec(request: pytest.FixtureRequest) -> ClusterSpec:
    return load_spec(request.param)


@needs_upstream
def test_catalog_pins_the_upstream_chart_as_oci() -> None:
    entry = CHARTS["kueue"]
    chart = _yaml(UPSTREAM / "Chart.yaml")
    assert entry.oci and entry.repo == "oci://registry.k8s.io/kueue/charts"
    assert entry.default == chart["version"] == "0.19.2"
    assert entry.versions["0.19.2"].upstream == UPSTREAM.name and entry.versions["0.19.2"].index is None
    assert resolve_lock(load_spec("onprem-h100")).kueue == "0.19.2"


@needs_upstream
def test_values_use_only_upstream_keys_and_a_typo_fails() -> None:
    spec = load_spec("onprem-h100")
    upstream = _yaml(UPSTREAM / "values.yaml")
    ours = kueue.kueue_values(spec, resolve_lock(spec))
    assert unknown_value_keys(ours, upstream) == []
    bad = copy.deepcopy(ours)
    bad["controllerManager"]["nodeSelecter"] = bad["controllerManager"].pop("nodeSelector")
    assert unknown_value_keys(bad, upstream) == ["controllerManager.nodeSelecter"]


def _key_paths(obj: Any, prefix: str = "") -> list[str]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("groupKindConcurrency",):
                continue
            out.append(prefix + k)
            out += _key_paths(v, prefix + k + ".")
    return out


@needs_upstream
def test_controller_config_keys_are_upstream_config_keys() -> None:
    """Every key of our Configuration appears (set or commented) in the chart's default
    controllerManagerConfigYaml; waitForPodsReady is on with the stack's timeout."""
    text = _yaml(UPSTREAM / "values.yaml")["managerConfig"]["controllerManagerConfigYaml"]
    known = set(re.findall(r"^\s*#?\s*([A-Za-z]+):", text, flags=re.M))
    spec = load_spec("onprem-h100")
    config = yaml.safe_load(kueue.kueue_values(spec, resolve_lock(spec))["managerConfig"][
        "controllerManagerConfigYaml"])
    leaves = {p.rsplit(".", 1)[-1] for p in _key_paths(config)}
    assert sorted(leaves - known) == []
    assert config["waitForPodsReady"]["timeout"] == "300s" and config["waitForPodsReady"]["blockAdmission"]
    assert set(config["integrations"]["frameworks"]) >= {"batch/job", "kubeflow.org/mpijob"}
    assert sorted({"waitForPodz"} - known) == ["waitForPodz"]


@needs_upstream
def test_every_object_validates_against_the_pinned_crd(spec: ClusterSpec) -> None:
    for obj in kueue.kueue_objects(spec):
        assert crd_errors(obj, CRD[obj["kind"]]) == [], obj["metadata"]["name"]


def test_flavors_and_quotas_follow_the_pools(spec: ClusterSpec) -> None:
    flavors = [o for o in kueue.kueue_objects(spec) if o["kind"] == "ResourceFlavor"]
    assert [f["metadata"]["name"] for f in flavors] == [p.name for p in spec.gpu_pools]
    cq = kueue.cluster_queue(spec)
    for pool, fl in zip(spec.gpu_pools, cq["spec"]["resourceGroups"][0]["flavors"], strict=True):
        gpus, cpus, mem = kueue.node_facts(spec, pool)
        n = pool.count if pool.count is not None else pool.max
        assert fl == {"name": pool.name, "resources": [{"name": "cpu", "nominalQuota": n * cpus},
                                                       {"name": "memory", "nominalQuota": f"{n * mem}Gi"},
                                                       {"name": "nvidia.com/gpu", "nominalQuota": n * gpus}]}
    assert [lq["metadata"]["namespace"] for lq in kueue.local_queues(spec)] == spec.workload_namespaces


def test_onprem_quotas_are_node_resources_times_pool_size() -> None:
    spec = load_spec("onprem-h100")
    rows = {r["pool"]: r for r in kueue.plan_rows(spec)}
    assert rows["h100-a"]["quota"] == {"nvidia.com/gpu": 16, "cpu": 448, "memory": "3800Gi"}
    assert rows["h100-a"]["topology_levels"] == ["gpufleet.io/block", "gpufleet.io/rack", "gpufleet.io/switch",
                                                 "kubernetes.io/hostname"]
    assert rows["h100-a"]["placement"] == {"level": "gpufleet.io/switch", "mode": "preferred"}


@pytest.mark.parametrize(("stack", "levels"), [
    ("aws-p5", ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
                "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"]),
    ("gcp-a3mega", ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                    "kubernetes.io/hostname"]),
    # AKS publishes no network topology labels: the hostname only, unless the stack places the pool.
    ("azure-ndv5", ["kubernetes.io/hostname"]),
])
def test_topology_levels_are_the_backends_labels(stack: str, levels: list[str]) -> None:
    spec = load_spec(stack)
    for pool in spec.gpu_pools:
        assert [lv["nodeLabel"] for lv in kueue.topology(spec, pool)["spec"]["levels"]] == levels
        assert kueue.resource_flavor(pool)["spec"]["topologyName"] == pool.name


def test_onprem_nodes_carry_their_place_labels() -> None:
    spec = load_spec("onprem-h100")
    pool = next(p for p in spec.gpu_pools if p.name == "h100-b")
    labels = manifests.node_patch(pool, pool.hosts[0])["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("gpufleet.io/") and k not in (
        "gpufleet.io/role", "gpufleet.io/pool")} == {"gpufleet.io/block": "b1", "gpufleet.io/rack": "r02",
                                                     "gpufleet.io/switch": "leaf-02"}


def test_a_place_on_some_hosts_only_is_refused() -> None:
    spec = load_spec("onprem-h100")
    pool = spec.gpu_pools[0]
    assert pool.place is not None
    rack_on_one = pool.place.model_copy(update={"block": None, "switch": None})
    broken = pool.model_copy(update={"place": None, "hosts": [
        pool.hosts[0].model_copy(update={"place": rack_on_one}), pool.hosts[1]]})
    with pytest.raises(kueue.KueueError, match="place rack is set on some hosts only"):
        kueue.topology_levels(spec, broken)


def test_a_level_the_pool_lacks_is_refused() -> None:
    spec = load_spec("gcp-a3mega")
    spec = spec.model_copy(update={"scheduling": spec.scheduling.model_copy(update={"topology_level": "switch"})})
    with pytest.raises(kueue.KueueError, match="has no such level on backend gcp"):
        kueue.podset_annotations(spec, spec.gpu_pools[0])


def test_priority_classes_map_to_workload_priority_classes() -> None:
    wpcs = {w["metadata"]["name"]: w["value"] for w in kueue.workload_priority_classes()}
    pcs = {p["metadata"]["name"]: p["value"] for p in manifests.priority_classes()}
    assert wpcs == pcs and wpcs["gpufleet-training"] > wpcs["gpufleet-batch"]
    assert kueue.cluster_queue(load_spec("onprem-h100"))["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"


def test_kueue_stays_off_gpu_nodes_and_flavors_tolerate_every_pool_taint(spec: ClusterSpec) -> None:
    manager = kueue.kueue_values(spec, resolve_lock(spec))["controllerManager"]
    assert manager["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert toleration(GPU_TAINT) not in manager["tolerations"]
    for pool in spec.gpu_pools:
        tolerations = kueue.resource_flavor(pool)["spec"]["tolerations"]
        assert all(toleration(t) in tolerations for t in node_taints(pool))


def test_nccl_tests_jobs_carry_queue_and_topology(tmp_path: Path) -> None:
    """The pair job (MPIJob) is admitted whole from the LocalQueue and its workers kept under one leaf switch."""
    from typer.testing import CliRunner

    from gpufleet.cli.validate import app

    r = CliRunner().invoke(app, ["bench-render", "--stack", "onprem-h100", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    pair = _yaml(tmp_path / "kubernetes" / "nccl-pair-gpu-a-0-gpu-a-1.yaml")
    assert pair["kind"] == "MPIJob"
    assert pair["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    assert pair["metadata"]["labels"][kueue.PRIORITY_LABEL] == "gpufleet-training"
    worker = pair["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert worker["annotations"] == {kueue.PREFERRED_TOPOLOGY: "gpufleet.io/switch"}
    single = _yaml(tmp_path / "kubernetes" / "nccl-single-gpu-a-0.yaml")
    assert single["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    assert single["spec"]["template"]["metadata"]["annotations"] == {kueue.PREFERRED_TOPOLOGY: "gpufleet.io/switch"}


def test_plan_shows_queues_flavors_quotas_and_levels_per_pool() -> None:
    import json

    from typer.testing import CliRunner

    from gpufleet.cli.plan import app

    r = CliRunner().invoke(app, ["--stack", "onprem-h100", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["pool"]: row for row in json.loads(r.output)["scheduling"]}
    assert sorted(rows) == ["h100-a", "h100-b"]
    assert rows["h100-b"] == {
        "pool": "h100-b", "flavor": "h100-b", "cluster_queue": "onprem-h100", "local_queues": ["training/gpu"],
        "quota": {"nvidia.com/gpu": 16, "cpu": 448, "memory": "3800Gi"},
        "topology_levels": ["gpufleet.io/block", "gpufleet.io/rack", "gpufleet.io/switch", "kubernetes.io/hostname"],
        "placement": {"level": "gpufleet.io/switch", "mode": "preferred"}}

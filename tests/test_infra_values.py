"""GPU Operator / dcgm-exporter values against upstream chart values; NVIDIA CRs against upstream CRDs;
plain manifests against Kubernetes schemas (kubernetes-validate, offline)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.infra import manifests, values
from gpufleet.infra.scheduling import GPU_TAINT
from gpufleet.infra.upstream_check import commented_keys_documented, crd_errors, unknown_value_keys
from gpufleet.lock import Lock, resolve_lock
from gpufleet.spec import ClusterSpec, load_spec

UPSTREAM = REPO_ROOT.parent / "shared" / "upstream"
OPERATOR = UPSTREAM / "gpu-operator-v26.7.0"
EXPORTER = UPSTREAM / "dcgm-exporter-4.5.3-4.8.2"
CLUSTER_POLICY_CRD = OPERATOR / "crds" / "nvidia.com_clusterpolicies.yaml"
NVIDIA_DRIVER_CRD = OPERATOR / "crds" / "nvidia.com_nvidiadrivers.yaml"
needs_upstream = pytest.mark.skipif(
    not UPSTREAM.is_dir(), reason=f"upstream reference data absent: {UPSTREAM}"
)


def _yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


@pytest.fixture(scope="module")
def onprem() -> tuple[ClusterSpec, Lock]:
    spec = load_spec("onprem-h100")
    return spec, resolve_lock(spec)


@pytest.fixture(scope="module")
def operator_managed(onprem: tuple[ClusterSpec, Lock]) -> tuple[ClusterSpec, Lock]:
    spec = onprem[0]
    pools = [
        p.model_copy(update={"host_management": "operator"}) if p.role == "gpu" else p for p in spec.pools
    ]
    spec2 = spec.model_copy(update={"pools": pools, "mig_strategy": "mixed"})
    return spec2, resolve_lock(spec2)


OP_ALLOWED = values.COMMENTED_UPSTREAM_KEYS["gpu-operator"]
#: Keys upstream's values.yaml does not list but the chart reads: commented ones and subchart sections.
OP_KNOWN = OP_ALLOWED + values.SUBCHART_KEYS["gpu-operator"]


@needs_upstream
def test_operator_values_use_only_upstream_keys(
    onprem: tuple[ClusterSpec, Lock], operator_managed: tuple[ClusterSpec, Lock]
) -> None:
    upstream = _yaml(OPERATOR / "values.yaml")
    for spec, lock in (onprem, operator_managed):
        ours = values.gpu_operator_values(spec, lock, with_counters=True)
        assert unknown_value_keys(ours, upstream, allowed=OP_KNOWN) == []


@needs_upstream
def test_misspelled_operator_keys_fail(onprem: tuple[ClusterSpec, Lock]) -> None:
    upstream = _yaml(OPERATOR / "values.yaml")
    bad = copy.deepcopy(values.gpu_operator_values(*onprem, with_counters=True))
    bad["dcgmExporter"]["serviceMonitor"]["enable"] = True
    bad["driver"]["kernelModuleTyp"] = "open"
    bad["dcgmExporter"]["config"]["nmae"] = "x"
    bad["validator"] = {"enabled": True}  # the chart has no validator.enabled: the validator always runs
    assert sorted(unknown_value_keys(bad, upstream, allowed=OP_KNOWN)) == [
        "dcgmExporter.config.nmae",
        "dcgmExporter.serviceMonitor.enable",
        "driver.kernelModuleTyp",
        "validator.enabled",
    ]


@needs_upstream
def test_commented_upstream_keys_are_documented_upstream() -> None:
    text = (OPERATOR / "values.yaml").read_text()
    for key in OP_ALLOWED:
        assert commented_keys_documented(text, key), key
    assert not commented_keys_documented(text, "dcgmExporter.config.nmae")


@needs_upstream
def test_exporter_values_use_only_upstream_keys(onprem: tuple[ClusterSpec, Lock]) -> None:
    upstream = _yaml(EXPORTER / "values.yaml")
    ours = values.dcgm_exporter_values(onprem[0], with_counters=True)
    assert unknown_value_keys(ours, upstream) == []
    ours["serviceMonitor"]["enable"] = True
    assert unknown_value_keys(ours, upstream) == ["serviceMonitor.enable"]


def test_host_managed_lock_disables_driver_and_toolkit(onprem: tuple[ClusterSpec, Lock]) -> None:
    v = values.gpu_operator_values(*onprem, with_counters=True)
    assert v["driver"] == {
        "enabled": False,
        "version": "570.172.08",
        "kernelModuleType": "open",
        "nvidiaDriverCRD": {"enabled": False, "deployDefaultCR": False},
    }
    assert v["toolkit"] == {"enabled": False, "version": "v1.18.0"}
    assert v["dcgmExporter"] == {
        "enabled": True,
        "serviceMonitor": {"enabled": True, "interval": "15s"},
        "config": {"name": "gpufleet-dcgm-counters"},
    }
    assert v["operator"]["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert v["daemonsets"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert v["mig"] == {"strategy": "none"}
    assert values.nvidia_drivers(*onprem) == []


def test_operator_managed_pools_get_one_driver_each(operator_managed: tuple[ClusterSpec, Lock]) -> None:
    v = values.gpu_operator_values(*operator_managed, with_counters=False)
    assert v["driver"]["enabled"] is True and v["toolkit"]["enabled"] is True
    assert v["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert "config" not in v["dcgmExporter"]
    drivers = values.nvidia_drivers(*operator_managed)
    assert [d["metadata"]["name"] for d in drivers] == ["driver-h100-a", "driver-h100-b"]
    assert drivers[0]["spec"]["nodeSelector"] == {"gpufleet.io/pool": "h100-a"}
    assert drivers[0]["spec"]["version"] == "570.172.08"
    assert drivers[0]["spec"]["default"] is False


@needs_upstream
def test_cluster_policy_validates_against_crd(
    onprem: tuple[ClusterSpec, Lock], operator_managed: tuple[ClusterSpec, Lock]
) -> None:
    for spec, lock in (onprem, operator_managed):
        cp = values.cluster_policy(values.gpu_operator_values(spec, lock, with_counters=True))
        assert crd_errors(cp, CLUSTER_POLICY_CRD) == []
    assert cp["spec"]["driver"]["useNvidiaDriverCRD"] is True
    assert cp["spec"]["mig"] == {"strategy": "mixed"}


@needs_upstream
def test_invalid_cluster_policy_fields_fail(onprem: tuple[ClusterSpec, Lock]) -> None:
    cp = values.cluster_policy(values.gpu_operator_values(*onprem, with_counters=True))
    cp["spec"]["driver"]["kernelModuleTyp"] = "open"
    cp["spec"]["mig"]["strategy"] = "singel"
    errors = crd_errors(cp, CLUSTER_POLICY_CRD)
    assert len(errors) == 2
    assert errors[0].startswith("spec.driver: Additional properties are not allowed ('kernelModuleTyp'")
    assert errors[1] == "spec.mig.strategy: 'singel' is not one of ['none', 'single', 'mixed']"
    del cp["spec"]["toolkit"]
    assert "<root>" not in " ".join(crd_errors(cp, CLUSTER_POLICY_CRD))
    assert "spec: 'toolkit' is a required property" in crd_errors(cp, CLUSTER_POLICY_CRD)


@needs_upstream
def test_nvidia_drivers_validate_against_crd(operator_managed: tuple[ClusterSpec, Lock]) -> None:
    drivers = values.nvidia_drivers(*operator_managed)
    assert drivers
    for d in drivers:
        assert crd_errors(d, NVIDIA_DRIVER_CRD) == []
    bad = copy.deepcopy(drivers[0])
    bad["spec"]["kernelModuleType"] = "closed"
    assert crd_errors(bad, NVIDIA_DRIVER_CRD) == [
        "spec.kernelModuleType: 'closed' is not one of ['auto', 'open', 'proprietary']"
    ]


def test_nic_cluster_policy_targets_rdma_pools(onprem: tuple[ClusterSpec, Lock]) -> None:
    ncp = values.nic_cluster_policy(*onprem)
    term = ncp["spec"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][
        0
    ]
    assert term["matchExpressions"] == [
        {"key": "gpufleet.io/pool", "operator": "In", "values": ["h100-a", "h100-b"]}
    ]
    cfg = json.loads(ncp["spec"]["rdmaSharedDevicePlugin"]["config"])
    assert cfg["configList"][0]["resourceName"] == "rdma_shared_device_a"
    assert ncp["spec"]["rdmaSharedDevicePlugin"]["version"] == "network-operator-v25.7.0"


def test_lustre_volumes_distinct_and_exact(onprem: tuple[ClusterSpec, Lock]) -> None:
    objs = manifests.lustre_volumes(onprem[0])
    pvs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PersistentVolume"}
    assert (
        pvs["lustre-datasets-training"]["spec"]["csi"]["volumeHandle"]
        == "198.51.100.5@o2ib:198.51.100.6@o2ib:/ai/datasets"
    )
    assert (
        pvs["lustre-checkpoints-training"]["spec"]["csi"]["volumeHandle"]
        == "198.51.100.5@o2ib:198.51.100.6@o2ib:/ai/checkpoints"
    )
    assert pvs["lustre-datasets-training"]["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pvs["lustre-checkpoints-training"]["spec"]["capacity"] == {"storage": "262144Gi"}


def test_node_patch_sets_labels_never_taints(onprem: tuple[ClusterSpec, Lock]) -> None:
    spec = onprem[0]
    gpu_pool, sys_pool = spec.pools[1], spec.pools[0]
    gpu = manifests.node_patch(gpu_pool, gpu_pool.hosts[0])
    assert gpu == {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-a-0",
        "labels": {"gpufleet.io/block": "b1", "gpufleet.io/rack": "r01", "gpufleet.io/switch": "leaf-01",
                   "gpufleet.io/role": "gpu", "gpufleet.io/pool": "h100-a"},
    }}
    assert "spec" not in manifests.node_patch(sys_pool, sys_pool.hosts[0])
    # The taint reaches the GPU pool's nodes through the read-modify-write Job instead.
    job = manifests.taint_job(gpu_pool, gpu_pool.hosts)
    assert job is not None
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "python3", "/opt/gpufleet/node_taints.py", "--selector", "gpufleet.io/pool=h100-a",
        "--taint", f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"]
    assert manifests.taint_job(gpu_pool, []) is None


def _all_manifests(spec: ClusterSpec) -> list[dict[str, Any]]:
    objs = manifests.platform_namespaces(spec) + manifests.priority_classes() + manifests.taint_rbac()
    for ns in spec.workload_namespaces:
        objs += manifests.network_policies(ns)
    objs += [
        manifests.counters_configmap("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "gpu-operator"),
        manifests.lustre_storage_class(),
        *manifests.lustre_volumes(spec),
    ]
    for pool in spec.pools:
        objs += [manifests.node_patch(pool, h) for h in pool.hosts]
        job = manifests.taint_job(pool, pool.hosts)
        objs += [job] if job else []
    return objs


def test_manifests_validate_with_kubernetes_schemas(onprem: tuple[ClusterSpec, Lock]) -> None:
    objs = _all_manifests(onprem[0])
    # 6 namespaces: kueue-system since issue 30
    assert len(objs) == 6 + 2 + 4 + 4 + 1 + 1 + 4 + 7 + 3
    for obj in objs:
        kubernetes_validate.validate(obj, manifests.K8S_SCHEMA_VERSION, strict=True)
    bad = copy.deepcopy(objs[-1])
    bad["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, manifests.K8S_SCHEMA_VERSION, strict=True)

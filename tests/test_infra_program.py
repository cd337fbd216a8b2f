"""The Pulumi program evaluated with the SDK's mocks (gpufleet.infra.offline sets them before importing
the program modules): every component, the backend contract, and every bundled stack."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError
from gpufleet.infra.backends import CLOUD_SDKS
from gpufleet.infra.offline import PLACEHOLDER_KUBECONFIG, REDACTED, OfflinePlan, evaluate
from gpufleet.lock import resolve_lock
from gpufleet.spec import STACKS_DIR, ClusterSpec, load_spec, stack_name

#: Cloud stacks need their SDK extra; CI fails instead of skipping (tests/conftest.py).
EXTRA_MISSING = ("the {} extra is not installed (pip install -r requirements-clouds.lock; "
                 "tests/run_all.sh does): CI treats it like missing reference data")

RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_PATCH = "kubernetes:core/v1:NodePatch"


def _plan(spec: ClusterSpec, **kw: bool) -> OfflinePlan:
    return evaluate(spec, resolve_lock(spec), **kw)


@pytest.fixture(scope="module")
def onprem() -> OfflinePlan:
    return _plan(load_spec("onprem-h100"))


def _release(plan: OfflinePlan, chart: str) -> dict:
    return next(r.inputs for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart)


def test_onprem_resource_counts(onprem: OfflinePlan) -> None:
    counts = Counter(r.type for r in onprem.resources)
    assert counts == {
        "gpufleet:backend:ExistingCluster": 1,
        "pulumi:providers:kubernetes": 1,
        "gpufleet:platform:Platform": 1,
        "gpufleet:platform:Namespaces": 1,
        "gpufleet:platform:PlaneSeparation": 1,
        "gpufleet:platform:GpuOperator": 1,
        "gpufleet:platform:NetworkOperator": 1,
        "gpufleet:platform:LustreStorage": 1,
        "gpufleet:platform:Monitoring": 1,
        "gpufleet:platform:Kueue": 1,
        # Kueue (issue 30): one Topology and one flavor per GPU pool, two priorities, one ClusterQueue,
        # a LocalQueue per workload namespace
        "kubernetes:kueue.x-k8s.io/v1beta2:Topology": 2,
        "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor": 2,
        "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass": 2,
        "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue": 1,
        "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue": 1,
        "kubernetes:core/v1:Namespace": 6,
        "kubernetes:core/v1:NamespacePatch": 1,
        NODE_PATCH: 7,
        "kubernetes:batch/v1:Job": 3,
        "kubernetes:core/v1:ServiceAccount": 1,
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": 1,
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": 1,
        "kubernetes:monitoring.coreos.com/v1:PrometheusRule": 1,
        "kubernetes:scheduling.k8s.io/v1:PriorityClass": 2,
        "kubernetes:networking.k8s.io/v1:NetworkPolicy": 4,
        "kubernetes:core/v1:ConfigMap": 3,
        RELEASE: 5,
        "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy": 1,
        "kubernetes:storage.k8s.io/v1:StorageClass": 1,
        "kubernetes:core/v1:PersistentVolume": 2,
        "kubernetes:core/v1:PersistentVolumeClaim": 2,
        "kubernetes:apps/v1:DaemonSetPatch": 1,
    }


def test_components_parent_their_children(onprem: OfflinePlan) -> None:
    parents = {(r.type, r.name): r.parent for r in onprem.resources}
    assert parents[(NODE_PATCH, "node-gpu-a-0")] == "separation"
    assert parents[("kubernetes:core/v1:Namespace", "namespace-gpu-operator")] == "namespaces"
    assert parents[(RELEASE, "gpu-operator")] == "gpu-operator"
    assert parents[("gpufleet:platform:GpuOperator", "gpu-operator")] == "platform"
    assert parents[(RELEASE, "lustre-csi-driver")] == "lustre"
    assert parents[("pulumi:providers:kubernetes", "onprem-h100-k8s")] == "onprem-h100"
    assert parents[("gpufleet:platform:Platform", "platform")] is None


def test_node_patches_carry_labels_and_never_taints(onprem: OfflinePlan) -> None:
    patches = {r.name: r.inputs for r in onprem.of_type(NODE_PATCH)}
    assert all("spec" not in p for p in patches.values())
    assert patches["node-gpu-b-1"]["metadata"]["labels"] == {
        "gpufleet.io/role": "gpu",
        "gpufleet.io/pool": "h100-b",
        # the stack's place of the pool: Kueue's topology levels
        "gpufleet.io/block": "b1", "gpufleet.io/rack": "r02", "gpufleet.io/switch": "leaf-02",
    }
    assert patches["node-sys-0"]["metadata"]["labels"]["gpufleet.io/role"] == "system"
    jobs = {r.inputs["metadata"]["labels"]["gpufleet.io/pool"]: r for r in onprem.of_type("kubernetes:batch/v1:Job")}
    # One per pool with hosts: the system pool's Job removes taints of ours a stack no longer lists.
    assert sorted(jobs) == ["h100-a", "h100-b", "system"]
    assert jobs["h100-b"].inputs["spec"]["template"]["spec"]["containers"][0]["command"][2:] == [
        "--selector", "gpufleet.io/pool=h100-b", "--taint", "nvidia.com/gpu=present:NoSchedule"]
    assert jobs["system"].inputs["spec"]["template"]["spec"]["containers"][0]["command"][2:] == [
        "--selector", "gpufleet.io/pool=system"]
    # A taint Job runs after the labels it selects nodes by.
    job_deps = onprem.depends(jobs["h100-b"])
    assert {r.urn for r in onprem.of_type(NODE_PATCH) if r.name.startswith("node-gpu-b")} <= job_deps


def test_releases_pinned_from_lock(onprem: OfflinePlan) -> None:
    op = _release(onprem, "gpu-operator")
    assert (op["version"], op["namespace"], op["repositoryOpts"]["repo"]) == (
        "v26.7.0",
        "gpu-operator",
        "https://helm.ngc.nvidia.com/nvidia",
    )
    assert op["values"]["driver"]["enabled"] is False
    assert _release(onprem, "network-operator")["version"] == "25.7.0"
    assert _release(onprem, "lustre-csi-driver")["version"] == "0.1.12"
    assert not any(r.inputs["chart"] == "dcgm-exporter" for r in onprem.of_type(RELEASE))


def test_kubeconfig_secret_never_shown(onprem: OfflinePlan) -> None:
    provider = onprem.of_type("pulumi:providers:kubernetes")[0]
    assert provider.inputs["kubeconfig"] == REDACTED
    assert PLACEHOLDER_KUBECONFIG not in repr([r.inputs for r in onprem.resources])


def test_outputs_carry_inventory_source(onprem: OfflinePlan) -> None:
    inv = onprem.outputs["inventory"]
    assert inv["h100-a"] == [
        {"name": "gpu-a-0", "address": "192.0.2.20", "connection": "ssh"},
        {"name": "gpu-a-1", "address": "192.0.2.21", "connection": "ssh"},
    ]
    assert onprem.outputs["lock"]["driver"] == "570.172.08"


def test_standalone_exporter_only_when_operator_exporter_off() -> None:
    plan = _plan(load_spec("onprem-h100"), operator_dcgm_exporter=False)
    exporter = _release(plan, "dcgm-exporter")
    assert (exporter["version"], exporter["namespace"]) == ("4.8.2", "monitoring")
    assert _release(plan, "gpu-operator")["values"]["dcgmExporter"]["enabled"] is False
    cms = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["namespace"]
           for r in plan.of_type("kubernetes:core/v1:ConfigMap")}
    assert cms["gpufleet-dcgm-counters"] == "monitoring"


def test_local_backend_declares_no_kubernetes_resources() -> None:
    plan = _plan(load_spec("local"))
    assert plan.resources == []
    assert plan.outputs["backend"] == "local"
    assert plan.outputs["lock"]["profile"] == "h100-cuda12.8"


def test_existing_backend_needs_hosts_for_ansible_pools() -> None:
    spec = load_spec("onprem-h100")
    pools = [p.model_copy(update={"hosts": []}) if p.name == "h100-b" else p for p in spec.pools]
    with pytest.raises(ConfigError) as e:
        _plan(spec.model_copy(update={"pools": pools}))
    assert e.value.problems[0].key == "gpufleet:pools[2].hosts"
    assert e.value.problems[0].file.endswith("stacks/Pulumi.onprem-h100.yaml")


def test_every_cloud_backend_is_complete() -> None:
    # A backend is complete or absent, never half-built: every cloud the spec accepts has its module, its SDK
    # extra and a bundled stack (tests/test_infra_{aws,azure,gcp}.py test each).
    from gpufleet.spec import CLOUD_BACKENDS

    assert sorted(CLOUD_SDKS) == sorted(CLOUD_BACKENDS)
    bundled = {load_spec(stack_name(p)).backend for p in STACKS_DIR.glob("Pulumi.*.yaml")}
    assert set(CLOUD_BACKENDS) <= bundled


@pytest.mark.parametrize("path", sorted(STACKS_DIR.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_every_bundled_stack_plans(path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(stack_name(path))
    if spec.backend in CLOUD_SDKS:
        pytest.importorskip(CLOUD_SDKS[spec.backend][1], reason=EXTRA_MISSING.format(spec.backend))
    plan = _plan(spec)
    assert plan.outputs["stack"] == spec.stack
    assert plan.warnings == []


def test_backend_contract_same_handles_for_every_backend() -> None:
    from gpufleet.infra.backends import inventory_source, local_handles

    local = local_handles(load_spec("local"))
    assert local.provider is None
    assert [h.pool.name for h in local.pools] == ["system", "gpu"]
    assert local.inventory_source == {}
    spec = load_spec("onprem-h100")
    assert list(inventory_source(spec)) == ["system", "h100-a", "h100-b"]
    assert inventory_source(spec)["system"][2] == {
        "name": "sys-2",
        "address": "192.0.2.12",
        "connection": "ssh",
    }


def test_offline_evaluation_uses_only_the_public_mock_api() -> None:
    """Issue 11: no private SDK functions, monitor subclasses or hard-coded secret signatures."""
    from gpufleet.infra import offline

    text = Path(offline.__file__).read_text()
    for private in ("run_pulumi_func", "_sync_await", "MockMonitor", "pulumi.runtime.mocks", "pulumi.runtime.stack",
                    "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"):
        assert private not in text, private
    assert "pulumi.runtime.set_mocks" in text and "@pulumi.runtime.test" in text

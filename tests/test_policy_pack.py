"""The policy pack's functions, called directly (constructing PolicyPack would start a server)."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.infra.backends import CLOUD_SDKS
from gpufleet.infra.offline import evaluate
from gpufleet.lock import resolve_lock
from gpufleet.spec import STACKS_DIR, load_spec, stack_name

sys.path.insert(0, str(REPO_ROOT / "policy"))
import gpufleet_policies as gp

#: Cloud stacks need their SDK extra; CI fails instead of skipping (tests/conftest.py).
EXTRA_MISSING = ("the {} extra is not installed (pip install -r requirements-clouds.lock; "
                 "tests/run_all.sh does): CI treats it like missing reference data")

GPU_NODE = {"metadata": {"name": "gpu-a-0", "labels": {"gpufleet.io/role": "gpu", "gpufleet.io/pool": "a"}}}
SYS_NODE = {"metadata": {"name": "sys-0", "labels": {"gpufleet.io/role": "system"}}}
TAINT_MSG = (
    "GPU nodes must carry the taint nvidia.com/gpu=present:NoSchedule so that only GPU workloads "
    "land there; add it to the pool's taints"
)


def test_untainted_gpu_pool_rejected() -> None:
    job = {"metadata": {"labels": {"gpufleet.io/pool": "a"}}, "spec": {"template": {"spec": {"containers": [
        {"command": ["kubectl", "taint", "nodes", "--selector", "gpufleet.io/pool=a",
                     "nvidia.com/gpu=present:NoSchedule", "--overwrite"]}]}}}}
    assert gp.gpu_nodes_tainted([(gp.NODE_PATCH, GPU_NODE), (gp.JOB, job)]) == []
    assert gp.gpu_nodes_tainted([(gp.NODE_PATCH, GPU_NODE)]) == [
        "GPU node gpu-a-0 (pool a) gets no nvidia.com/gpu=present:NoSchedule: no taint Job for its pool sets it"]
    assert gp.gpu_nodes_tainted([(gp.NODE_PATCH, SYS_NODE)]) == []


def test_node_patch_with_taints_rejected() -> None:
    patched = {**GPU_NODE, "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                                "effect": "NoSchedule"}]}}
    assert gp.node_patch_without_taints(gp.NODE_PATCH, patched)[0].startswith(
        "a node patch must not set spec.taints")
    assert gp.node_patch_without_taints(gp.NODE_PATCH, GPU_NODE) == []
    eks = {
        "labels": {"gpufleet.io/role": "gpu"},
        "taints": [{"key": "nvidia.com/gpu", "effect": "NO_SCHEDULE"}],
    }
    assert gp.gpu_pool_tainted(gp.EKS_NODE_GROUP, eks) == []
    assert gp.gpu_pool_tainted(gp.EKS_NODE_GROUP, {**eks, "taints": []}) == [TAINT_MSG]
    aks = {"nodeLabels": {"gpufleet.io/role": "gpu"}, "nodeTaints": ["nvidia.com/gpu=present:NoSchedule"]}
    assert gp.gpu_pool_tainted(gp.AKS_AGENT_POOL, aks) == []
    assert gp.gpu_pool_tainted(gp.AKS_AGENT_POOL, {**aks, "nodeTaints": []}) == [TAINT_MSG]


def test_resource_adapter_reports_through_pulumi_callback() -> None:
    reported: list[tuple[str, Any]] = []
    validate = gp._resource_validator(gp.gpu_pool_tainted)
    eks = {"labels": {"gpufleet.io/role": "gpu"}, "taints": []}
    args = SimpleNamespace(resource_type=gp.EKS_NODE_GROUP, props=eks)
    validate(args, lambda msg, urn: reported.append((msg, urn)))
    assert reported == [(TAINT_MSG, None)]


def test_stack_adapter_sees_all_resources() -> None:
    reported: list[str] = []
    validate = gp._stack_validator(gp.system_pool_exists)
    args = SimpleNamespace(resources=[SimpleNamespace(resource_type=gp.NODE_PATCH, props=GPU_NODE)])
    validate(args, lambda msg, urn: reported.append(msg))
    assert reported == ["GPU pools need a system pool: operators and monitoring must not run on GPU nodes"]


def test_helm_versions_must_be_exact() -> None:
    rel = "kubernetes:helm.sh/v3:Release"
    assert gp.helm_pinned(rel, {"chart": "gpu-operator", "version": "v26.7.0"}) == []
    assert gp.helm_pinned(rel, {"chart": "network-operator", "version": "25.7.0"}) == []
    assert gp.helm_pinned(rel, {"chart": "gpu-operator", "version": "~26.7"}) == [
        "Helm chart gpu-operator must be pinned to an exact version (got '~26.7')"
    ]
    assert gp.helm_pinned(rel, {"chart": "x"}) == [
        "Helm chart x must be pinned to an exact version (got None)"
    ]


def test_no_public_ips_on_gpu_nodes() -> None:
    aks = {"nodeLabels": {"gpufleet.io/role": "gpu"}, "enableNodePublicIP": True}
    assert gp.no_public_ip_on_gpu_nodes(gp.AKS_AGENT_POOL, aks) == [
        "GPU nodes must not get public IP addresses; reach them through the management network"
    ]
    assert gp.no_public_ip_on_gpu_nodes(gp.AKS_AGENT_POOL, {**aks, "enableNodePublicIP": False}) == []
    lt = {"tags": {"gpufleet.io/role": "gpu"}, "networkInterfaces": [{"associatePublicIpAddress": True}]}
    assert len(gp.no_public_ip_on_gpu_nodes(gp.AWS_LAUNCH_TEMPLATE, lt)) == 1
    lt_sys = {**lt, "tags": {"gpufleet.io/role": "system"}}
    assert gp.no_public_ip_on_gpu_nodes(gp.AWS_LAUNCH_TEMPLATE, lt_sys) == []


def test_dataset_and_checkpoint_volumes_distinct() -> None:
    def pv(kind: str, handle: str) -> tuple[str, dict[str, Any]]:
        return gp.PV, {
            "metadata": {"labels": {"gpufleet.io/volume": kind}},
            "spec": {"csi": {"volumeHandle": handle}},
        }

    assert gp.volumes_distinct([pv("datasets", "n@o2ib:/ai/d"), pv("checkpoints", "n@o2ib:/ai/c")]) == []
    assert gp.volumes_distinct([pv("datasets", "n@o2ib:/ai"), pv("checkpoints", "n@o2ib:/ai")]) == [
        "dataset and checkpoint volumes must be distinct; both use n@o2ib:/ai"
    ]


@pytest.mark.parametrize("path", sorted(STACKS_DIR.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_bundled_stacks_pass_every_policy(path) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(stack_name(path))
    if spec.backend in CLOUD_SDKS:
        pytest.importorskip(CLOUD_SDKS[spec.backend][1], reason=EXTRA_MISSING.format(spec.backend))
    plan = evaluate(spec, resolve_lock(spec))
    assert gp.violations((r.type, r.inputs) for r in plan.resources) == {}


def test_onprem_stack_without_taint_fails_the_pack() -> None:
    spec = load_spec("onprem-h100")
    plan = evaluate(spec, resolve_lock(spec))
    resources = [(r.type, r.inputs) for r in plan.resources]
    stripped = [(t, p) for t, p in resources if t != gp.JOB]
    found = gp.violations(stripped)
    assert list(found) == ["gpu-nodes-tainted"] and len(found["gpu-nodes-tainted"]) == 4


def test_policies_construct_without_a_server() -> None:
    pols = gp.policies()
    assert [p.name for p in pols] == [
        "gpu-pools-tainted",
        "node-patches-without-taints",
        "helm-charts-pinned",
        "no-public-ip-gpu-nodes",
        "gpu-pools-have-their-fabric",
        "efa-interfaces-on-every-card",
        "gpu-launch-template-in-cluster-placement",
        "efa-group-references-itself",
        "no-public-ip-on-launch",
        "eks-endpoint-not-open-to-the-world",
        "infiniband-pool-in-one-zone",
        "gpudirect-pool-on-cos",
        "gke-gpu-networks-distinct",
        "system-pool-exists",
        "gpu-nodes-tainted",
        "datasets-checkpoints-distinct",
        "gcp-gpu-vpcs-jumbo-mtu",
        "lustre-fsnames-distinct",
        "gpu-pools-queued",
    ]
    assert all(p.enforcement_level.value == "mandatory" for p in pols)


def test_gpu_pool_without_flavor_and_namespace_without_local_queue_fail_the_pack() -> None:
    """Issue 30: the onprem plan passes; without its Kueue flavors and LocalQueue it does not."""
    spec = load_spec("onprem-h100")
    plan = evaluate(spec, resolve_lock(spec))
    resources = [(r.type, r.inputs) for r in plan.resources]
    assert gp.gpu_pools_queued(resources) == []
    stripped = [(t, p) for t, p in resources if t not in (gp.RESOURCE_FLAVOR, gp.LOCAL_QUEUE)]
    assert gp.violations(stripped) == {"gpu-pools-queued": [
        "GPU pool h100-a has no Kueue ResourceFlavor (spec.nodeLabels gpufleet.io/pool=h100-a): its GPUs are "
        "outside every queue's quota",
        "GPU pool h100-b has no Kueue ResourceFlavor (spec.nodeLabels gpufleet.io/pool=h100-b): its GPUs are "
        "outside every queue's quota",
        "workload namespace training has no Kueue LocalQueue: its jobs cannot be admitted"]}


def _lustre_pv(kind: str, csi: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return gp.PV, {"metadata": {"labels": {gp.VOLUME_LABEL: kind}}, "spec": {"csi": csi}}


@pytest.mark.parametrize(("datasets", "checkpoints"), [
    # AWS's FSx CSI driver: distinct file system ids, one file system behind both (dnsname, mountname).
    ({"driver": "fsx.csi.aws.com", "volumeHandle": "fs-1", "volumeAttributes": {"dnsname": "a", "mountname": "m"}},
     {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-2", "volumeAttributes": {"dnsname": "a", "mountname": "m"}}),
    # Microsoft's Azure Managed Lustre driver: checkpoints a sub-dir of the datasets file system.
    ({"driver": "azurelustre.csi.azure.com", "volumeHandle": "h1",
      "volumeAttributes": {"mgs-ip-address": "10.0.0.4", "fs-name": "lustrefs"}},
     {"driver": "azurelustre.csi.azure.com", "volumeHandle": "h2",
      "volumeAttributes": {"mgs-ip-address": "10.0.0.4", "fs-name": "lustrefs", "sub-dir": "ckpt"}}),
    # GKE's driver: one instance's address and filesystem behind two handles.
    ({"driver": "lustre.csi.storage.gke.io", "volumeHandle": "p/z/a",
      "volumeAttributes": {"ip": "10.1.0.2", "filesystem": "lustreds"}},
     {"driver": "lustre.csi.storage.gke.io", "volumeHandle": "p/z/b",
      "volumeAttributes": {"ip": "10.1.0.2", "filesystem": "lustreds"}}),
])
def test_shared_volumes_are_seen_in_each_cloud_drivers_format(datasets: dict[str, Any],
                                                             checkpoints: dict[str, Any]) -> None:
    # The volumeHandle alone no longer says what a cloud driver mounts (issue 32 point 5): the policy reads the
    # mount source from each driver's volumeAttributes.
    assert gp.volumes_distinct([_lustre_pv("datasets", datasets), _lustre_pv("checkpoints", checkpoints)])
    apart = {**checkpoints, "volumeAttributes": {k: v + "x" for k, v in checkpoints["volumeAttributes"].items()}}
    assert gp.volumes_distinct([_lustre_pv("datasets", datasets), _lustre_pv("checkpoints", apart)]) == []
    # Attributes not known yet (a preview of new file systems): nothing to compare, nothing refused.
    unknown = {**checkpoints, "volumeAttributes": {k: None for k in checkpoints["volumeAttributes"]}}
    assert gp.volumes_distinct([_lustre_pv("datasets", datasets), _lustre_pv("checkpoints", unknown)]) == []

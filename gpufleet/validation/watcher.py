"""The health watcher's controller: every interval, judge every GPU node's report and act with the rate limit.

One replica on a system node (:mod:`gpufleet.infra.health_watch` renders its Deployment). Each cycle it lists
the node agents' pods (:mod:`gpufleet.validation.node_agent`), fetches each agent's bundle from the pod's IP,
judges it with ``health.evaluate_node`` against the stack's expectations for the pool (``run.expectations_for``,
as ``gpufleet validate`` does) and hands the results to ``actions.act``: the plan with the rate limit and the
healthy streak, applied through the taint Job's read-modify-write writer. One code path with
``gpufleet validate --apply``; only where the data comes from differs.

* The node of a report is the pod's ``spec.nodeName`` and its pool the pod's ``gpufleet.io/pool`` label (both
  written by the API server and the DaemonSet, not by the agent).
* A node whose agent did not answer is not judged: no action, no healthy check (its streak does not grow),
  and ``gpufleet_health_watch_reports{state="missing"}`` counts it (alert ``GpufleetHealthReportsMissing``).
* State: what is applied lives on the Node (the ``gpufleet.io/health-taints`` annotation the writer keeps),
  read the first time a node is seen, so a restarted controller knows what it tainted before (and what
  ``gpufleet validate --apply`` tainted); the healthy streak lives in memory, so after a restart clearing
  waits a full streak again (the safe direction).
* Fabric manager: a pod cannot see the systemd unit; where ``nvidia-smi`` has no fabric section (before
  Hopper) that one check is left to ``gpufleet validate`` over SSH instead of tainting every NVSwitch node.

Run as ``python -m gpufleet.validation.watcher --stack S`` (the Deployment's command, no shell).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufleet.infra.node_taints import Transport
from gpufleet.validation.actions import (
    HEALTH_ANNOTATION,
    ActionPlan,
    ActionPolicy,
    ActionState,
    AppliedAction,
    HostState,
    KubernetesExecutor,
    act,
    metrics_text,
)
from gpufleet.validation.health import Expectations, NodeData, NodeHealth, evaluate_node
from gpufleet.validation.node_agent import AGENT_PORT

NAMESPACE = "gpufleet"
EVENTS_NAMESPACE = "default"
AGENT_NAME = "gpufleet-health-agent"
CONTROLLER_NAME = "gpufleet-health-controller"
APP_LABEL = "app.kubernetes.io/name"
POOL_LABEL = "gpufleet.io/pool"
METRICS_PORT = 9477
#: Largest bundle accepted from an agent (nvidia-smi -q -x of an 8-GPU node is a few hundred KiB).
BUNDLE_MAX = 16 << 20
#: Agents asked at once.
FETCH_WORKERS = 32

Fetch = Callable[[str], Any]


def http_fetch(url: str, timeout: float = 90) -> Any:
    """GET a JSON document (an agent's bundle), at most BUNDLE_MAX bytes."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read(BUNDLE_MAX + 1)
    if len(body) > BUNDLE_MAX:
        raise ValueError(f"bundle over {BUNDLE_MAX} bytes")
    return json.loads(body)


@dataclass(frozen=True)
class Report:
    host: str
    pool: str | None
    bundle: dict[str, Any] | None
    error: str | None = None


def _report(pod: dict[str, Any], fetch: Fetch, port: int) -> Report | None:
    host = (pod.get("spec") or {}).get("nodeName")
    if not host:
        return None
    pool = ((pod.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    st = pod.get("status") or {}
    if st.get("phase") != "Running" or not st.get("podIP"):
        return Report(host, pool, None, f"agent pod {st.get('phase') or 'not started'}")
    try:
        bundle = fetch(f"http://{st['podIP']}:{port}/bundle")
    except (OSError, ValueError) as e:
        return Report(host, pool, None, f"agent did not answer: {str(e)[:200]}")
    if not isinstance(bundle, dict):
        return Report(host, pool, None, "agent answered no bundle")
    return Report(host, pool, bundle)


def agent_reports(transport: Transport, fetch: Fetch, namespace: str = NAMESPACE,
                  port: int = AGENT_PORT, workers: int = FETCH_WORKERS) -> list[Report]:
    """One report per agent pod scheduled to a node: its bundle, or why there is none. Fetched in parallel:
    each agent runs nvidia-smi for a second or more, and a fleet's cycle must fit in one interval."""
    selector = urllib.parse.quote(f"{APP_LABEL}={AGENT_NAME}")
    status, obj = transport("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}", None, "")
    if status != 200:
        raise RuntimeError(f"list agent pods: HTTP {status}: {obj}")
    pods = list(obj.get("items") or [])
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(pods)))) as pool:
        found = list(pool.map(lambda p: _report(p, fetch, port), pods))
    return sorted((r for r in found if r is not None), key=lambda r: r.host)


def judge(report: Report, exp: Expectations) -> NodeHealth:
    """``evaluate_node`` over an agent's bundle, the node and pool taken from the API, not the bundle."""
    assert report.bundle is not None
    data = replace(NodeData.from_bundle(report.bundle), host=report.host, pool=report.pool)
    health = evaluate_node(data, exp)
    if data.fabricmanager_state is None:
        health.findings = [f for f in health.findings if f.check != "fabric-manager"]
    return health


def applied_on_node(transport: Transport, host: str) -> str | None:
    """The health action the taint writer recorded on the Node (its annotation), None when none."""
    status, obj = transport("GET", f"/api/v1/nodes/{urllib.parse.quote(host)}", None, "")
    if status != 200:
        return None
    recorded = ((obj.get("metadata") or {}).get("annotations") or {}).get(HEALTH_ANNOTATION)
    try:
        ours = json.loads(recorded) if recorded else []
    except json.JSONDecodeError:
        return None
    return next((str(t["value"]) for t in ours if isinstance(t, dict) and t.get("value")), None)


@dataclass
class Cycle:
    plan: ActionPlan
    applied: list[AppliedAction]
    reports: list[Report]
    nodes: list[NodeHealth]
    finished: float

    def metrics(self) -> str:
        lines = [metrics_text(self.plan, self.applied).rstrip("\n"),
                 "# HELP gpufleet_health_watch_reports GPU nodes by whether their agent's report arrived.",
                 "# TYPE gpufleet_health_watch_reports gauge"]
        pools = sorted({r.pool or "-" for r in self.reports})
        for pool in pools:
            for state in ("ok", "missing"):
                n = sum(1 for r in self.reports
                        if (r.pool or "-") == pool and (r.bundle is None) == (state == "missing"))
                lines.append(f'gpufleet_health_watch_reports{{pool="{pool}",state="{state}"}} {n}')
        lines += ["# HELP gpufleet_health_watch_last_cycle_timestamp_seconds When the last cycle finished.",
                  "# TYPE gpufleet_health_watch_last_cycle_timestamp_seconds gauge",
                  f"gpufleet_health_watch_last_cycle_timestamp_seconds {self.finished:.0f}"]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "applied": [a.to_json() for a in self.applied],
                "missing": [{"host": r.host, "pool": r.pool, "error": r.error} for r in self.reports
                            if r.bundle is None]}


@dataclass
class Watcher:
    transport: Transport
    fetch: Fetch
    expectations: Callable[[str | None], Expectations]
    pool_sizes: Mapping[str | None, int]
    policy: ActionPolicy
    namespace: str = NAMESPACE
    port: int = AGENT_PORT
    clock: Callable[[], float] = time.time
    state: ActionState = field(default_factory=ActionState)

    def once(self) -> Cycle:
        reports = agent_reports(self.transport, self.fetch, self.namespace, self.port)
        for r in reports:
            if r.host not in self.state.hosts:
                self.state.hosts[r.host] = HostState(applied=applied_on_node(self.transport, r.host), pool=r.pool)
        nodes: list[NodeHealth] = []
        for r in reports:
            if r.bundle is None:
                continue
            try:
                nodes.append(judge(r, self.expectations(r.pool)))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                # A bundle of the wrong shape is a missing report, not a verdict on the node.
                reports[reports.index(r)] = Report(r.host, r.pool, None, f"unreadable bundle: {str(e)[:160]}")
        # The pool's size is what the stack says or the agents seen, whichever is larger (autoscaled pools).
        seen: dict[str | None, int] = {}
        for r in reports:
            seen[r.pool] = seen.get(r.pool, 0) + 1
        sizes = {p: max(self.pool_sizes.get(p, 0), n) for p, n in seen.items()}
        # Events about a Node (cluster-scoped) go to "default": core/v1 refuses them in other namespaces.
        plan, applied = act(nodes, self.state, sizes, KubernetesExecutor(self.transport, EVENTS_NAMESPACE),
                            self.policy)
        return Cycle(plan, applied, reports, nodes, self.clock())


class _Metrics:
    def __init__(self) -> None:
        self.text = "# no cycle finished yet\n"


def serve_metrics(port: int, metrics: _Metrics) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.text.encode() if self.path == "/metrics" else b"ok\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpufleet-health-controller", description=__doc__.splitlines()[0])
    p.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<stack>.yaml in the image)")
    p.add_argument("--namespace", default=NAMESPACE)
    p.add_argument("--interval-s", type=float, default=300)
    p.add_argument("--max-share", type=float, default=None, help="default: the stack's healthWatch.max_share")
    p.add_argument("--healthy-streak", type=int, default=None, help="default: the stack's healthWatch.healthy_streak")
    p.add_argument("--agent-port", type=int, default=AGENT_PORT)
    p.add_argument("--metrics-port", type=int, default=METRICS_PORT)
    p.add_argument("--once", action="store_true", help="one cycle, print it as JSON, exit")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from gpufleet.errors import GpufleetError
    from gpufleet.infra.node_taints import in_cluster_transport
    from gpufleet.validation.run import expectations_for
    from gpufleet.workflow import resolve_stack

    ns = parse_args(argv)
    try:
        stack = resolve_stack(ns.stack)
        watch = stack.spec.health_watch
        policy = ActionPolicy(
            max_share=ns.max_share if ns.max_share is not None else (watch.max_share if watch else 0.1),
            healthy_streak=ns.healthy_streak if ns.healthy_streak is not None
            else (watch.healthy_streak if watch else 3))
    except (GpufleetError, ValueError) as e:
        print(f"gpufleet health controller: {e}", file=sys.stderr)
        return 1
    spec, lock = stack.spec, stack.lock
    try:
        transport = in_cluster_transport()
    except (KeyError, OSError) as e:
        print(f"gpufleet health controller: not in a pod with a ServiceAccount token ({e}); it runs as the "
              "gpufleet-health-controller Deployment (gpufleet:healthWatch)", file=sys.stderr)
        return 1
    exps = {p.name: expectations_for(spec, lock, p.name) for p in spec.gpu_pools}
    watcher = Watcher(transport, http_fetch, lambda pool: exps.get(pool or "")
                      or expectations_for(spec, lock, pool), {p.name: p.size for p in spec.pools}, policy,
                      ns.namespace, ns.agent_port)
    metrics = _Metrics()
    if not ns.once:
        serve_metrics(ns.metrics_port, metrics)
    while True:
        try:
            cycle = watcher.once()
        except (RuntimeError, OSError) as e:
            # The API server unreachable for a while: try again next interval (the stale-cycle alert fires).
            print(f"gpufleet health controller: cycle failed: {e}", file=sys.stderr)
        else:
            metrics.text = cycle.metrics()
            print(json.dumps(cycle.to_json()), flush=True)
        if ns.once:
            return 0
        time.sleep(ns.interval_s)


if __name__ == "__main__":
    sys.exit(main())

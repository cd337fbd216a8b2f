"""Findings become actions: plan (rate-limited, healthy streak before clearing) and apply (Kubernetes taint,
Slurm drain, marker file for Ansible-only pools).

Planning is pure (:func:`plan_actions`): per node the most disruptive critical finding gives the taint
``gpufleet.io/gpu-unhealthy=<action>:<effect>`` and the Slurm drain reason (``health.taint_for`` /
``health.drain_reason``, the table in docs/validation.md). Two brakes, after NVIDIA NVSentinel's:

* **rate limit**: at most ``max(1, floor(max_share * pool size))`` nodes of a pool carry an action at once,
  counting those already acted on; findings past it are ``held`` (reported, the
  ``gpufleet_health_actions_held`` metric alerts), never applied. A fleet-wide cause (a bad driver rollout, a
  switch down) must not drain a whole pool through one check.
* **clearing**: a node acted on is untainted/resumed only with ``--clear`` or after ``healthy_streak``
  consecutive healthy checks; one good read after a failure proves little (an Xid burst, a flapping port).

State between runs (what was applied, the healthy streak) is a small JSON file (:class:`ActionState`).
Executors take their I/O as arguments (a Kubernetes transport, a command runner) so tests record them.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpufleet.infra import node_taints
from gpufleet.infra.node_taints import Transport
from gpufleet.validation.health import ACTION_ORDER, NodeAction, NodeHealth
from gpufleet.validation.xid import HEALTH_TAINT_KEY

#: Annotation recording the health taints this writer owns (the pool taint Job owns ``gpufleet.io/taints``).
HEALTH_ANNOTATION = "gpufleet.io/health-taints"
DEFAULT_MAX_SHARE = 0.10
DEFAULT_HEALTHY_STREAK = 3

Decision = Literal["apply", "unchanged", "held", "clear", "keep", "none"]
Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class ActionPolicy:
    #: Share of a pool's nodes that may carry an action at once (0 < share <= 1).
    max_share: float = DEFAULT_MAX_SHARE
    #: Consecutive healthy checks before a node acted on is cleared.
    healthy_streak: int = DEFAULT_HEALTHY_STREAK

    def __post_init__(self) -> None:
        if not (0 < self.max_share <= 1) or not math.isfinite(self.max_share):
            raise ValueError(f"max_share {self.max_share!r}: expected a share in (0, 1], e.g. 0.1")
        if self.healthy_streak < 1:
            raise ValueError(f"healthy_streak {self.healthy_streak!r}: expected 1 or more")

    def budget(self, pool_size: int) -> int:
        """Nodes of a pool that may carry an action at once: the share, at least one."""
        return max(1, math.floor(self.max_share * pool_size + 1e-9))


@dataclass
class HostState:
    #: The action applied to the node (None: nothing of ours on it).
    applied: str | None = None
    #: Consecutive healthy checks since the last unhealthy one.
    streak: int = 0
    #: The node's pool when the action was applied: a node acted on that is not checked this time (down for
    #: the reboot it was tainted for, outside ``--limit``) still counts against its pool's rate limit.
    pool: str | None = None


@dataclass
class ActionState:
    hosts: dict[str, HostState] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ActionState:
        if not path.exists():
            return cls()
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls({h: HostState(applied=v.get("applied"), streak=int(v.get("streak", 0)), pool=v.get("pool"))
                    for h, v in (raw.get("hosts") or {}).items()})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema": 1, "hosts": {h: asdict(s) for h, s in sorted(self.hosts.items())}},
                                  indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)


@dataclass(frozen=True)
class PlannedAction:
    host: str
    pool: str | None
    decision: Decision
    action: str | None
    #: ``key=value:effect`` to set (apply/unchanged) or remove (clear).
    taint: str | None
    drain_reason: str | None
    why: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ActionPlan:
    items: list[PlannedAction]
    budgets: dict[str, int]

    @property
    def held(self) -> list[PlannedAction]:
        return [i for i in self.items if i.decision == "held"]

    def to_json(self) -> dict[str, Any]:
        return {"budgets": self.budgets, "held": len(self.held),
                "items": [i.to_json() for i in self.items if i.decision != "none"]}


def _taint_text(action: NodeAction) -> str | None:
    from gpufleet.validation.health import taint_text

    return taint_text(action)


def plan_actions(nodes: Sequence[NodeHealth], state: ActionState, pool_sizes: Mapping[str | None, int],
                 policy: ActionPolicy | None = None, clear: bool = False) -> ActionPlan:
    """What to do per node; updates ``state``'s streaks and applied actions as if the plan is carried out."""
    policy = policy or ActionPolicy()
    by_pool: dict[str | None, list[NodeHealth]] = {}
    for n in nodes:
        by_pool.setdefault(n.pool, []).append(n)
    items: list[PlannedAction] = []
    budgets: dict[str, int] = {}
    for pool, members in sorted(by_pool.items(), key=lambda kv: kv[0] or ""):
        size = max(pool_sizes.get(pool, 0), len(members))
        budget = policy.budget(size)
        budgets[pool or "-"] = budget
        # Nodes of the pool already carrying an action (and still unhealthy or not yet cleared) use the budget.
        sick = {n.host for n in members if n.taint_text is not None}
        in_use = sum(1 for n in members if state.hosts.get(n.host, HostState()).applied is not None
                     and (n.host in sick or not (clear or state.hosts[n.host].streak + 1 >= policy.healthy_streak)))
        # Acted on, not checked now: it keeps its action (nothing proves it healthy), so it keeps its share.
        checked = {n.host for n in members}
        in_use += sum(1 for h, s in state.hosts.items()
                      if h not in checked and s.applied is not None and s.pool == pool)
        order = sorted(members, key=lambda n: (ACTION_ORDER.index(n.action) if n.action else len(ACTION_ORDER),
                                               n.host))
        for n in order:
            hs = state.hosts.setdefault(n.host, HostState())
            text = n.taint_text
            if text is not None:
                hs.streak = 0
                action = text.rpartition(":")[0].partition("=")[2]
                if hs.applied == action:
                    items.append(PlannedAction(n.host, pool, "unchanged", action, text, n.drain_reason,
                                               "already applied"))
                    continue
                if hs.applied is None and in_use >= budget:
                    items.append(PlannedAction(
                        n.host, pool, "held", action, text, n.drain_reason,
                        f"rate limit: {in_use} of {size} nodes of pool {pool or '-'} already acted on "
                        f"(at most {budget} = max(1, {policy.max_share:g} x {size}))"))
                    continue
                if hs.applied is None:
                    in_use += 1
                hs.applied = action
                hs.pool = pool
                items.append(PlannedAction(n.host, pool, "apply", action, text, n.drain_reason,
                                           "; ".join(f.check for f in n.findings if f.severity == "critical")))
                continue
            hs.streak += 1
            if hs.applied is None:
                items.append(PlannedAction(n.host, pool, "none", None, None, None, "healthy"))
            elif clear or hs.streak >= policy.healthy_streak:
                old = _taint_text(NodeAction(hs.applied))
                items.append(PlannedAction(n.host, pool, "clear", hs.applied, old, None,
                                           "--clear" if clear else f"{hs.streak} healthy checks in a row"))
                hs.applied = None
            else:
                items.append(PlannedAction(n.host, pool, "keep", hs.applied, _taint_text(NodeAction(hs.applied)),
                                           None, f"healthy {hs.streak}/{policy.healthy_streak}: not cleared yet"))
    return ActionPlan(items, budgets)


# --- executors -------------------------------------------------------------------------------------------

def _taint_dict(text: str) -> dict[str, str]:
    return node_taints.parse_taint(text)


class KubernetesExecutor:
    """The health taint through the taint Job's read-modify-write writer (``node_taints.reconcile``) under its
    own annotation, plus a Warning Event on the Node naming the findings (``kubectl describe node`` shows it)."""

    def __init__(self, transport: Transport, namespace: str = "default") -> None:
        self.transport = transport
        self.namespace = namespace

    def __call__(self, item: PlannedAction) -> str:
        if item.decision == "apply" and item.taint:
            node_taints.reconcile(self.transport, item.host, [_taint_dict(item.taint)], HEALTH_ANNOTATION)
            self._event(item, "GpufleetUnhealthy", f"{item.taint}: {item.drain_reason or item.why}")
            return f"tainted {item.taint}"
        if item.decision == "clear":
            node_taints.reconcile(self.transport, item.host, [], HEALTH_ANNOTATION)
            self._event(item, "GpufleetHealthy", f"{HEALTH_TAINT_KEY} removed: {item.why}")
            return "untainted"
        return "nothing to do"

    def _event(self, item: PlannedAction, reason: str, message: str) -> None:
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{item.host}.gpufleet-", "namespace": self.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": item.host, "uid": item.host},
                "reason": reason, "message": message[:1024], "type": "Warning" if reason.endswith("Unhealthy")
                else "Normal", "source": {"component": "gpufleet-validate"}}
        status, obj = self.transport("POST", f"/api/v1/namespaces/{self.namespace}/events", body,
                                     "application/json")
        if status not in (200, 201):
            raise RuntimeError(f"POST event for node {item.host}: HTTP {status}: {obj}")


def _run(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=60, input=stdin)


KubectlRunner = Callable[[Sequence[str], "str | None"], "subprocess.CompletedProcess[str]"]


def _kubectl_status(stderr: str) -> int:
    if "(Conflict)" in stderr or "the object has been modified" in stderr:
        return 409
    if "(NotFound)" in stderr or "not found" in stderr:
        return 404
    if "(Forbidden)" in stderr:
        return 403
    return 500


def kubectl_transport(kubectl: Sequence[str] = ("kubectl",), run: KubectlRunner = _run) -> Transport:
    """The taint writer's transport over ``kubectl`` (the operator's kubeconfig and context), argv only:
    GET as ``get --raw``, the node merge patch as ``patch node --type=merge`` (resourceVersion inside, so a
    concurrent write still answers 409), an Event as ``create --raw -f -``."""

    def send(method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        if method == "GET":
            argv = [*kubectl, "get", "--raw", path]
            stdin = None
        elif method == "PATCH" and path.startswith("/api/v1/nodes/") and content_type.endswith("merge-patch+json"):
            argv = [*kubectl, "patch", "node", path.rsplit("/", 1)[1], "--type=merge", "-p", json.dumps(body),
                    "-o", "json"]
            stdin = None
        elif method == "POST":
            argv, stdin = [*kubectl, "create", "--raw", path, "-f", "-"], json.dumps(body)
        else:
            raise ValueError(f"kubectl transport: {method} {path} not supported")
        r = run(argv, stdin)
        if r.returncode != 0:
            return _kubectl_status(r.stderr or ""), {"message": (r.stderr or r.stdout).strip()[:500]}
        try:
            return 200 if method != "POST" else 201, json.loads(r.stdout or "{}")
        except json.JSONDecodeError:
            return 500, {"message": f"kubectl printed no JSON: {r.stdout[:200]}"}

    return send


def scontrol_argv(item: PlannedAction) -> list[str] | None:
    """``scontrol update`` as an argument list (never a shell string: the reason carries finding text)."""
    if item.decision == "apply" and item.drain_reason:
        return ["scontrol", "update", f"nodename={item.host}", "state=drain", f"reason={item.drain_reason}"]
    if item.decision == "clear":
        return ["scontrol", "update", f"nodename={item.host}", "state=resume"]
    return None


class SlurmExecutor:
    def __init__(self, run: Runner = _run) -> None:
        self.run = run

    def __call__(self, item: PlannedAction) -> str:
        argv = scontrol_argv(item)
        if argv is None:
            return "nothing to do"
        r = self.run(argv)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])}: rc {r.returncode}: {(r.stderr or r.stdout).strip()[:300]}")
        return "drained" if item.decision == "apply" else "resumed"


class MarkerExecutor:
    """Ansible-only pools: ``<dir>/<host>.json`` names the action; the next converge reports it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, item: PlannedAction) -> str:
        path = self.directory / f"{item.host}.json"
        if item.decision == "apply":
            self.directory.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"host": item.host, "action": item.action, "taint": item.taint,
                                        "drain_reason": item.drain_reason, "why": item.why}, indent=2) + "\n",
                            encoding="utf-8")
            return f"marker {path}"
        if item.decision == "clear":
            path.unlink(missing_ok=True)
            return f"marker {path} removed"
        return "nothing to do"


Executor = Callable[[PlannedAction], str]


@dataclass(frozen=True)
class AppliedAction:
    item: PlannedAction
    result: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.item.to_json(), "result": self.result, "error": self.error}


def apply_plan(plan: ActionPlan, execute: Executor) -> list[AppliedAction]:
    """Carry out ``apply`` and ``clear`` items; one node's failure is recorded and the others still run."""
    done: list[AppliedAction] = []
    for item in plan.items:
        if item.decision not in ("apply", "clear"):
            continue
        try:
            done.append(AppliedAction(item, execute(item)))
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
            done.append(AppliedAction(item, "failed", str(e)))
    return done


def metrics_text(plan: ActionPlan, applied: Sequence[AppliedAction]) -> str:
    """Prometheus text (node-exporter textfile format) of the run: actions per decision, held per pool."""
    lines = ["# HELP gpufleet_health_actions Health actions of the last gpufleet validate --apply run.",
             "# TYPE gpufleet_health_actions gauge"]
    for item in plan.items:
        if item.decision in ("apply", "unchanged", "held", "clear", "keep"):
            failed = any(a.item is item and a.error for a in applied)
            lines.append(f'gpufleet_health_actions{{host="{item.host}",pool="{item.pool or "-"}",'
                         f'decision="{item.decision}",action="{item.action or "-"}",'
                         f'failed="{str(failed).lower()}"}} 1')
    lines += ["# HELP gpufleet_health_actions_held Findings not acted on because of the pool's rate limit.",
              "# TYPE gpufleet_health_actions_held gauge"]
    for pool in plan.budgets:
        held = sum(1 for i in plan.held if (i.pool or "-") == pool)
        lines.append(f'gpufleet_health_actions_held{{pool="{pool}"}} {held}')
    return "\n".join(lines) + "\n"


Target = Literal["kubernetes", "slurm", "marker"]


def executor_for(target: Target, markers: Path) -> Executor:
    if target == "kubernetes":
        return KubernetesExecutor(kubectl_transport())
    if target == "slurm":
        return SlurmExecutor()
    return MarkerExecutor(markers)


def act(nodes: Sequence[NodeHealth], state: ActionState, pool_sizes: Mapping[str | None, int],
        execute: Executor, policy: ActionPolicy, clear: bool = False) -> tuple[ActionPlan, list[AppliedAction]]:
    """Plan and apply, updating ``state``: the one path of ``gpufleet validate --apply`` and the watcher
    (:mod:`gpufleet.validation.watcher`)."""
    plan = plan_actions(nodes, state, pool_sizes, policy, clear)
    applied = apply_plan(plan, execute)
    # A failed application is not recorded as applied: the next run tries again.
    for a in applied:
        if a.error is not None:
            hs = state.hosts[a.item.host]
            hs.applied = None if a.item.decision == "apply" else a.item.action
    return plan, applied


def run_actions(nodes: Sequence[NodeHealth], pool_sizes: Mapping[str | None, int], state_path: Path,
                execute: Executor, policy: ActionPolicy, clear: bool = False,
                metrics: Path | None = None) -> dict[str, Any]:
    """Plan, apply, save the state and write the metrics (default: next to the state); the JSON
    ``gpufleet validate`` reports."""
    state = ActionState.load(state_path)
    plan, applied = act(nodes, state, pool_sizes, execute, policy, clear)
    state.save(state_path)
    metrics = metrics or state_path.with_name("gpufleet_health_actions.prom")
    # Written whole, then renamed: node_exporter's textfile collector never reads half a file.
    tmp = metrics.with_suffix(".prom.tmp")
    tmp.write_text(metrics_text(plan, applied), encoding="utf-8")
    tmp.replace(metrics)
    return {**plan.to_json(), "applied": [a.to_json() for a in applied], "state": str(state_path),
            "metrics": str(metrics), "policy": asdict(policy)}

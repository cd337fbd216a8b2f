"""gpufleet validate --apply's planning and executors against recording fakes: the taint written with the taint
Job's read-modify-write (other taints untouched), scontrol as an argument list, markers, the rate limit and the
healthy streak before clearing."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.validation.actions import (
    HEALTH_ANNOTATION,
    ActionPolicy,
    ActionState,
    KubernetesExecutor,
    MarkerExecutor,
    SlurmExecutor,
    apply_plan,
    metrics_text,
    plan_actions,
)
from gpufleet.validation.health import Finding, NodeAction, NodeHealth
from tests.test_node_taints import GPU, KUBELET, UNREACHABLE, FakeApi, node

POOL_TAINTS = '[{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}]'


class EventingApi(FakeApi):
    """FakeApi that also records the Events posted."""

    def __init__(self, nodes: dict[str, dict[str, Any]]) -> None:
        super().__init__(nodes)
        self.events: list[dict[str, Any]] = []

    def __call__(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        if method == "POST" and path == "/api/v1/namespaces/default/events":
            self.events.append(copy.deepcopy(body))
            return 201, body
        return super().__call__(method, path, body, content_type)


def sick(host: str, action: NodeAction = NodeAction.RESET_GPU, pool: str = "h100-a",
         check: str = "ecc-dbe") -> NodeHealth:
    return NodeHealth(host, pool, findings=[Finding(check, "critical", action, "planted fault", 0,
                                                    "00000000:1B:00.0")])


def well(host: str, pool: str = "h100-a") -> NodeHealth:
    return NodeHealth(host, pool, findings=[Finding("thermal", "warning", NodeAction.MONITOR, "warm")])


def test_taint_is_written_by_read_modify_write_and_other_taints_stay() -> None:
    api = EventingApi({"gpu-0": node("gpu-0", [KUBELET, UNREACHABLE, GPU], **{"gpufleet.io/taints": POOL_TAINTS})})
    plan = plan_actions([sick("gpu-0")], ActionState(), {"h100-a": 10})
    done = apply_plan(plan, KubernetesExecutor(api))
    assert [d.result for d in done] == ["tainted gpufleet.io/gpu-unhealthy=reset-gpu:NoSchedule"]
    n = api.nodes["gpu-0"]
    assert n["spec"]["taints"] == [KUBELET, UNREACHABLE, GPU, {"key": "gpufleet.io/gpu-unhealthy",
                                                                "value": "reset-gpu", "effect": "NoSchedule"}]
    # The pool taint Job's record is untouched; ours is separate, so neither removes the other's taints.
    assert n["metadata"]["annotations"]["gpufleet.io/taints"] == POOL_TAINTS
    assert HEALTH_ANNOTATION in n["metadata"]["annotations"]
    assert api.patches[0]["metadata"]["resourceVersion"] == "7"
    (ev,) = api.events
    assert (ev["involvedObject"]["name"], ev["reason"], ev["type"]) == ("gpu-0", "GpufleetUnhealthy", "Warning")
    assert "gpufleet:reset-gpu check=ecc-dbe gpu=00000000:1B:00.0" in ev["message"]


def test_a_worse_action_replaces_ours_and_clearing_removes_only_ours() -> None:
    api = EventingApi({"gpu-0": node("gpu-0", [KUBELET, GPU])})
    state = ActionState()
    apply_plan(plan_actions([sick("gpu-0")], state, {"h100-a": 10}), KubernetesExecutor(api))
    apply_plan(plan_actions([sick("gpu-0", NodeAction.ISOLATE, check="xid-79")], state, {"h100-a": 10}),
               KubernetesExecutor(api))
    assert api.nodes["gpu-0"]["spec"]["taints"] == [KUBELET, GPU, {"key": "gpufleet.io/gpu-unhealthy",
                                                                    "value": "isolate", "effect": "NoExecute"}]
    plan = plan_actions([well("gpu-0")], state, {"h100-a": 10}, clear=True)
    assert [(i.decision, i.why) for i in plan.items] == [("clear", "--clear")]
    apply_plan(plan, KubernetesExecutor(api))
    assert api.nodes["gpu-0"]["spec"]["taints"] == [KUBELET, GPU]


def test_clearing_needs_the_healthy_streak() -> None:
    state = ActionState()
    policy = ActionPolicy(healthy_streak=3)
    plan_actions([sick("gpu-0")], state, {"h100-a": 4}, policy)
    decisions = [plan_actions([well("gpu-0")], state, {"h100-a": 4}, policy).items[0].decision for _ in range(3)]
    assert decisions == ["keep", "keep", "clear"]
    # A relapse restarts the count.
    plan_actions([sick("gpu-0")], state, {"h100-a": 4}, policy)
    assert plan_actions([well("gpu-0")], state, {"h100-a": 4}, policy).items[0].decision == "keep"


def test_rate_limit_acts_on_the_allowed_count_and_reports_the_rest() -> None:
    nodes = [sick(f"gpu-{i}") for i in range(5)] + [sick("gpu-9", NodeAction.ISOLATE)]
    nodes += [well(f"gpu-{i}") for i in range(10, 20)]
    state = ActionState()
    plan = plan_actions(nodes, state, {"h100-a": 20}, ActionPolicy(max_share=0.1))
    assert plan.budgets == {"h100-a": 2}
    applied = [i.host for i in plan.items if i.decision == "apply"]
    assert applied == ["gpu-9", "gpu-0"]  # the most disruptive first, then by name
    assert [i.host for i in plan.held] == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    assert "rate limit: 2 of 20 nodes" in plan.held[0].why
    text = metrics_text(plan, [])
    assert 'gpufleet_health_actions_held{pool="h100-a"} 4' in text
    # Next run: the two acted on still count against the budget, so nothing new is applied.
    again = plan_actions(nodes, state, {"h100-a": 20}, ActionPolicy(max_share=0.1))
    assert [i.decision for i in again.items if i.host in ("gpu-9", "gpu-0")] == ["unchanged", "unchanged"]
    assert len(again.held) == 4


def test_small_pool_gets_at_least_one() -> None:
    plan = plan_actions([sick("a"), sick("b")], ActionState(), {"h100-a": 3})
    assert plan.budgets == {"h100-a": 1} and [i.decision for i in plan.items] == ["apply", "held"]
    with pytest.raises(ValueError, match="max_share"):
        ActionPolicy(max_share=float("nan"))
    with pytest.raises(ValueError, match="healthy_streak"):
        ActionPolicy(healthy_streak=0)


def test_slurm_drain_is_an_argument_list() -> None:
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    state = ActionState()
    host = "gpu-0; rm -rf /"  # would be a second command in a shell string
    apply_plan(plan_actions([sick(host)], state, {"h100-a": 10}), SlurmExecutor(run))
    apply_plan(plan_actions([well(host)], state, {"h100-a": 10}, clear=True), SlurmExecutor(run))
    assert calls == [
        ["scontrol", "update", f"nodename={host}", "state=drain",
         "reason=gpufleet:reset-gpu check=ecc-dbe gpu=00000000:1B:00.0"],
        ["scontrol", "update", f"nodename={host}", "state=resume"],
    ]


def test_a_failing_executor_is_recorded_and_others_still_run() -> None:
    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        rc = 1 if "nodename=a" in argv else 0
        return subprocess.CompletedProcess(list(argv), rc, "", "Invalid node name specified" if rc else "")

    done = apply_plan(plan_actions([sick("a"), sick("b")], ActionState(), {"h100-a": 20},
                                   ActionPolicy(max_share=1)), SlurmExecutor(run))
    assert [(d.item.host, d.result, bool(d.error)) for d in done] == [("a", "failed", True), ("b", "drained", False)]
    assert "Invalid node name" in (done[0].error or "")


def test_marker_for_ansible_only_pools_and_state_round_trip(tmp_path: Path) -> None:
    state = ActionState()
    apply_plan(plan_actions([sick("gpu-0")], state, {"h100-a": 10}), MarkerExecutor(tmp_path / "markers"))
    marker = tmp_path / "markers" / "gpu-0.json"
    assert '"action": "reset-gpu"' in marker.read_text()
    state.save(tmp_path / "state.json")
    loaded = ActionState.load(tmp_path / "state.json")
    assert loaded.hosts["gpu-0"].applied == "reset-gpu"
    apply_plan(plan_actions([well("gpu-0")], loaded, {"h100-a": 10}, clear=True), MarkerExecutor(tmp_path / "markers"))
    assert not marker.exists()


def test_validate_apply_cli_marks_within_the_rate_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli import app
    from gpufleet.validation.run import ValidationResult
    from gpufleet.workflow import resolve_stack

    pool = next(p for p in resolve_stack("local").spec.pools if p.role == "gpu")
    nodes = [sick(f"gpu-{i}", pool=pool.name) for i in range(3)]
    monkeypatch.setattr("gpufleet.validation.run.run_validation",
                        lambda stack, **_: ValidationResult(stack, nodes, None, None))
    state = tmp_path / "state.json"
    r = CliRunner().invoke(app, ["validate", "--stack", "local", "--json", "--no-security", "--apply",
                                 "--apply-to", "marker", "--state", str(state)])
    assert r.exit_code == 1, r.output  # critical findings still fail the run
    actions = json.loads(r.stdout)["actions"]
    assert [i["decision"] for i in actions["items"]] == ["apply", "held", "held"]
    assert (tmp_path / "markers" / "gpu-0.json").is_file() and not (tmp_path / "markers" / "gpu-1.json").exists()
    assert 'gpufleet_health_actions_held{pool="' + pool.name + '"} 2' in (
        tmp_path / "gpufleet_health_actions.prom").read_text()
    bad = CliRunner().invoke(app, ["validate", "--stack", "local", "--json", "--apply", "--max-share", "0"])
    assert bad.exit_code == 1 and json.loads(bad.stdout)["error"]["key"] == "--max-share"
    bad = CliRunner().invoke(app, ["validate", "--stack", "local", "--clear"])
    assert bad.exit_code == 1 and "--clear only acts with --apply" in bad.output


def test_kubectl_transport_is_argv_and_maps_conflicts() -> None:
    from gpufleet.validation.actions import kubectl_transport

    calls: list[tuple[list[str], str | None]] = []
    node_json = json.dumps(node("gpu-0", [KUBELET]))

    def run(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        calls.append((list(argv), stdin))
        if argv[3] == "patch" and len([c for c in calls if c[0][3] == "patch"]) == 1:
            return subprocess.CompletedProcess(list(argv), 1, "", 'Error from server (Conflict): Operation cannot '
                                               'be fulfilled on nodes "gpu-0": the object has been modified')
        return subprocess.CompletedProcess(list(argv), 0, node_json if argv[3] != "create" else "{}", "")

    send = kubectl_transport(("kubectl", "--context", "c1"), run)
    done = apply_plan(plan_actions([sick("gpu-0")], ActionState(), {"h100-a": 10}), KubernetesExecutor(send))
    assert [d.error for d in done] == [None]
    argvs = [c[0][3:5] for c in calls]
    assert argvs == [["get", "--raw"], ["patch", "node"], ["get", "--raw"], ["patch", "node"], ["create", "--raw"]]
    patch = json.loads(calls[3][0][calls[3][0].index("-p") + 1])
    assert patch["spec"]["taints"][-1] == {"key": "gpufleet.io/gpu-unhealthy", "value": "reset-gpu",
                                           "effect": "NoSchedule"}
    assert json.loads(calls[-1][1] or "")["reason"] == "GpufleetUnhealthy"

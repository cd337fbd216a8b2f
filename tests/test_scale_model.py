"""The scale model (gpufleet.bench.scale_model), its CLI, the scale bench's counting, and the model's check
against the committed bench: its 16-node prediction for this machine within 30% of the measured wall time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.scale import (
    Measurement,
    baseline_ratios,
    cgroup_cpu_s,
    count_events,
    count_tasks,
    goal_ratios,
    render_markdown,
)
from gpufleet.bench import scale_model as sm
from gpufleet.cli import app
from gpufleet.cli.bench import shipped_forks

OP = sm.OpCost(name="no-op converge (site.yml)", tasks_per_host=100, module_runs_per_host=50,
               controller_fixed_cpu_s=5.0, controller_cpu_per_host_task_s=0.01, node_cpu_per_host_task_s=0.1)


def test_latency_bound_fleet_with_control_persist() -> None:
    # 1000 hosts, 50 forks: 20 rounds of (0.01 controller + 0.1 node + 0.02 channel x half the tasks) = 2.4 s per
    # step; the controller's CPU per step, 1000 x 0.01 / 8 cores = 1.25 s, is below it.
    p = sm.predict(OP, sm.Fleet(nodes=1000, forks=50, controller_cores=8, connection_s=0.02))
    assert p.bound == "host latency"
    assert p.hosts_per_slice == 1000
    assert p.step_s == pytest.approx(2.4)
    assert p.wall_s == pytest.approx(5 + 100 * 2.4)
    assert p.controller_cpu_s == pytest.approx(5 + 1000 * 100 * 0.01)


def test_new_ssh_connection_per_module_run() -> None:
    # Half the tasks start a module: +0.25 s wall and +0.02 s controller CPU per module run, i.e. +0.125 s and
    # +0.01 s per host-task: 20 x (0.02 + 0.1 + 0.125) = 4.9 s per step.
    p = sm.predict(OP, sm.Fleet(nodes=1000, forks=50, controller_cores=8, connection_s=0.25, connection_cpu_s=0.02))
    assert p.step_s == pytest.approx(4.9)
    assert p.wall_s == pytest.approx(5 + 490)
    assert p.controller_cpu_s == pytest.approx(5 + 1000 * 100 * 0.02)


def test_job_slicing() -> None:
    # 4 slices of 250 hosts: 5 rounds of 0.12 s; each slice pays the fixed cost, the wall one job start.
    p = sm.predict(OP, sm.Fleet(nodes=1000, forks=50, slices=4, controller_cores=8, connection_s=0.02,
                                slice_start_s=30))
    assert (p.hosts_per_slice, p.step_s) == (250, pytest.approx(0.6))
    assert p.wall_s == pytest.approx(30 + 5 + 60)
    assert p.controller_cpu_s == pytest.approx(4 * 5 + 1000)


def test_controller_cpu_bound() -> None:
    # 10,000 hosts on 2 cores: 10000 x 0.01 / 2 = 50 s of controller CPU per step > 200 rounds x 0.13 s.
    p = sm.predict(OP, sm.Fleet(nodes=10000, forks=50, controller_cores=2, connection_s=0.02))
    assert p.bound == "controller CPU"
    assert p.step_s == pytest.approx(50)
    # forks bound the cores used: 1 fork cannot use 8 cores (and is latency bound anyway).
    one = sm.predict(OP, sm.Fleet(nodes=10, forks=1, controller_cores=8, connection_s=0.0))
    assert one.step_s == pytest.approx(10 * 0.11)


def test_shared_cores_sandbox() -> None:
    op = sm.OpCost(**{**OP.__dict__, "engine_cpu_per_host_task_s": 0.04})
    p = sm.predict(op, sm.Fleet(nodes=16, forks=50, controller_cores=2, shared_cores=True, connection_s=0.0))
    # Every CPU second (controller 0.01 + node 0.1 + engine 0.04 per host-task) on 2 shared cores.
    assert p.bound == "shared CPU"
    assert p.step_s == pytest.approx(16 * 0.15 / 2)
    assert p.wall_s == pytest.approx(5 + 100 * 1.2)


@pytest.mark.parametrize(("field", "value"), [("tasks_per_host", 0), ("controller_cpu_per_host_task_s", -1),
                                              ("node_cpu_per_host_task_s", math.nan)])
def test_costs_are_checked(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        sm.OpCost(**{**OP.__dict__, field: value})


def test_fleet_is_checked() -> None:
    with pytest.raises(ValueError, match="at most one slice per node"):
        sm.Fleet(nodes=2, forks=50, slices=4)
    with pytest.raises(ValueError, match=">= 1"):
        sm.Fleet(nodes=0, forks=50)


def test_line_fit() -> None:
    assert sm.line_fit([(1, 12.0), (4, 30.0), (16, 102.0)]) == (pytest.approx(6.0), pytest.approx(6.0))
    # A negative intercept is noise: the line through the origin instead.
    assert sm.line_fit([(1, 1.0), (2, 3.0)]) == (0.0, pytest.approx(7 / 5))


def _measurement(n: int, op: str, ctrl: float, node: float, counts: dict[str, Any] | None = None) -> dict[str, Any]:
    m = Measurement(checkout="after", n=n, op=op, wall_s=10.0 * n, rc=0, controller_cpu_s=ctrl,
                    controller_cpu_cgroup_s=ctrl, node_cpu_s=node, node_idle_cpu_s=0.0, engine_shim_cpu_s=n * 1.0,
                    engine_daemon_cpu_s=0.0, hosts=n + 1, gpu_nodes=n, load_start=1.0, load_end=1.0)
    m.counts = counts or {}
    return m.to_json()


def _doc() -> dict[str, Any]:
    counts = {"control-0": {"tasks": 40, "skipped": 10, "module_runs": 20},
              "gpu-0": {"tasks": 200, "skipped": 50, "module_runs": 100}}
    ms = [_measurement(n, "no-op converge (site.yml)", 6 + 4 * n, 2 + 20 * n, counts) for n in (1, 4, 16)]
    ms += [_measurement(n, "drift", 5 + 2 * n, 1 + 10 * n) for n in (1, 4)]
    ms.append(_measurement(1, "drift (recorded)", 7, 11, counts | {"gpu-0": {"tasks": 100, "skipped": 0,
                                                                               "module_runs": 80}}))
    return {"machine": {"cores": 2, "memory_gib": 23.4, "kernel": "6", "docker": "20", "cgroup_version": 1,
                        "python": "3.11"}, "started": "x", "finished": "y",
            "checkouts": [{"label": "after", "commit": "abc", "subject": "s", "ansible_core": "2.19", "forks": "50"}],
            "measurements": ms}


def test_fit_op_from_a_bench_document() -> None:
    c = sm.fit_op(_doc(), "converge")
    assert (c.tasks_per_host, c.module_runs_per_host) == (200, 100)
    assert c.controller_fixed_cpu_s == pytest.approx(6)
    assert c.controller_cpu_per_host_task_s == pytest.approx(4 / 200)
    assert c.node_cpu_per_host_task_s == pytest.approx(20 / 200)
    assert c.engine_cpu_per_host_task_s == pytest.approx(1 / 200)
    d = sm.fit_op(_doc(), "drift")
    assert d.tasks_per_host == 100  # the recorded drift run's counts
    assert d.controller_cpu_per_host_task_s == pytest.approx(2 / 100)
    with pytest.raises(ValueError, match="checkout 'before'"):
        sm.fit_op(_doc(), "converge", checkout="before")


def test_default_checkout_is_the_one_measured_at_the_largest_n() -> None:
    doc = _doc()
    doc["checkouts"].append({"label": "before-again", "commit": "b", "subject": "s", "ansible_core": "2.19",
                             "forks": "50"})
    doc["measurements"].append(_measurement(1, "no-op converge (site.yml)", 9, 9) | {"checkout": "before-again"})
    assert sm.default_checkout(doc) == "after"
    assert sm.fit_op(doc, "converge").controller_fixed_cpu_s == pytest.approx(6)


def test_cli_scale_model_json(tmp_path: Path) -> None:
    bench = tmp_path / "x-scale.json"
    bench.write_text(json.dumps(_doc()))
    r = CliRunner().invoke(app, ["bench", "scale-model", "--nodes", "1000", "--forks", "50", "--slices", "4",
                                 "--bench", str(bench), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [p["op"] for p in data["predictions"]] == ["no-op converge (site.yml)", "drift"]
    conv = data["predictions"][0]
    # 250 hosts a slice, 5 rounds of (0.02 controller + 0.1 node + 0.02 channel x 1/2) = 0.65 s, 200 steps.
    assert conv["hosts_per_slice"] == 250
    assert conv["wall_s"] == pytest.approx(sm.SLICE_START_S + 6 + 200 * 0.65, abs=0.01)


def test_cli_scale_model_errors(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["bench", "scale-model", "--bench", str(tmp_path / "none.json"), "--json"])
    assert r.exit_code == 1
    assert json.loads(r.stdout)["error"]["message"] == "file not found"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"measurements": [], "checkouts": [{"label": "a"}]}))
    r = CliRunner().invoke(app, ["bench", "scale-model", "--bench", str(bad), "--json"])
    assert r.exit_code == 1
    assert "no 'no-op converge (site.yml)' measurement" in json.loads(r.stdout)["error"]["message"]
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(_doc()))
    r = CliRunner().invoke(app, ["bench", "scale-model", "--bench", str(ok), "--nodes", "2", "--slices", "4",
                                 "--json"])
    assert r.exit_code == 1
    assert json.loads(r.stdout)["error"]["key"] == "--nodes"


def test_shipped_forks_is_ansible_cfg() -> None:
    assert shipped_forks() == 50 or shipped_forks() >= 1


# ------------------------------------------------------------------------------------------ the bench's counting


def test_count_tasks() -> None:
    tasks = [
        {"host": "gpu-0", "action": "ansible.builtin.apt", "status": "ok", "items": []},
        {"host": "gpu-0", "action": "ansible.builtin.set_fact", "status": "ok", "items": []},
        {"host": "gpu-0", "action": "ansible.builtin.command", "status": "skipped", "items": []},
        {"host": "gpu-0", "action": "ansible.builtin.file", "status": "ok",
         "items": [{"status": "ok"}, {"status": "skipped"}, {"status": "ok"}]},
    ]
    assert count_tasks(tasks) == {"gpu-0": count_tasks(tasks)["gpu-0"]}
    c = count_tasks(tasks)["gpu-0"]
    assert (c.tasks, c.skipped, c.module_runs) == (4, 1, 3)
    probes = [{"host": "gpu-0", "action": "host_footprint", "status": "ok", "res": {"reread": True}},
              {"host": "gpu-0", "action": "host_footprint", "status": "ok", "res": {"reread": False}}]
    c = count_tasks(tasks + probes)["gpu-0"]
    assert (c.tasks, c.skipped, c.module_runs) == (6, 1, 4)


def test_count_events() -> None:
    ev = [
        {"event": "runner_on_ok", "event_data": {"host": "h", "task_uuid": "1", "task_action": "stat"}},
        {"event": "runner_item_on_ok", "event_data": {"host": "h", "task_uuid": "2", "task_action": "file"}},
        {"event": "runner_item_on_ok", "event_data": {"host": "h", "task_uuid": "2", "task_action": "file"}},
        {"event": "runner_on_ok", "event_data": {"host": "h", "task_uuid": "2", "task_action": "file"}},
        {"event": "runner_on_skipped", "event_data": {"host": "h", "task_uuid": "3", "task_action": "apt"}},
        {"event": "runner_on_ok", "event_data": {"host": "h", "task_uuid": "4", "task_action": "assert"}},
        {"event": "runner_on_start", "event_data": {"host": "h", "task_uuid": "5", "task_action": "apt"}},
        {"event": "runner_on_ok", "event_data": {"host": "h", "task_uuid": "6", "task_action": "host_footprint",
                                                 "res": {"reread": False, "converged": True}}},
    ]
    c = count_events(ev)["h"]
    assert (c.tasks, c.skipped, c.module_runs) == (5, 1, 3)


def test_cgroup_cpu() -> None:
    assert cgroup_cpu_s("usage_usec 2500000\nuser_usec 1\n", v2=True) == 2.5
    assert cgroup_cpu_s("1500000000\n", v2=False) == 1.5


def test_render_markdown_rows() -> None:
    md = render_markdown(_doc())
    rows = [line for line in md.splitlines() if line.startswith("| after |") and line.split(" | ")[1].isdigit()]
    assert len(rows) == 6
    # N=1 converge: 10 s wall, 10 s controller CPU over 2 hosts, 240 host-tasks -> 42 ms per host-task.
    assert rows[0].split(" | ")[3:7] == ["10.0", "10.0 [10.0]", "5.00", "42"]


def test_goal_ratios_compare_medians_at_the_first_size() -> None:
    doc = _doc()
    assert goal_ratios(doc) == []  # no before checkout
    before = [{**m, "checkout": "before"} for m in (
        _measurement(1, "no-op converge (site.yml)", 20, 16), _measurement(1, "no-op converge (site.yml)", 26, 20),
        _measurement(1, "no-op converge (site.yml)", 22, 18), _measurement(4, "no-op converge (site.yml)", 1, 1),
        _measurement(1, "fresh converge of one GPU node (--limit gpu-0)", 1, 1),
        _measurement(1, "no-op rerun of that node (--limit gpu-0)", 1, 1))]
    before[4]["wall_s"], before[5]["wall_s"] = 60.0, 40.0
    after = [_measurement(1, "fresh converge of one GPU node (--limit gpu-0)", 1, 1),
             _measurement(1, "no-op rerun of that node (--limit gpu-0)", 1, 1)]
    after[0]["wall_s"], after[1]["wall_s"] = 40.0, 10.0
    doc["measurements"] += before + after
    goals = {g["goal"]: g for g in goal_ratios(doc)}
    # The N=1 medians: before 22 s over 2 hosts (the N=4 run left out), after 10 s over 2 hosts.
    ctrl = goals["controller CPU s per host, no-op converge"]
    assert (ctrl["before"], ctrl["after"], ctrl["ratio"]) == (11.0, 5.0, pytest.approx(5 / 11))
    assert goals["node CPU s per host, no-op converge"]["before"] == 9.0
    within = goals["a GPU node's no-op rerun / its fresh converge, wall"]
    assert (within["before"], within["after"], within["ratio"]) == (pytest.approx(2 / 3), 0.25, None)
    assert "| a GPU node's no-op rerun / its fresh converge, wall | 0.67 | 0.25 | - | after <= 0.25 |" in (
        render_markdown(doc))


def test_baseline_goals_compare_after_with_the_named_checkout_at_their_size() -> None:
    doc = _doc()
    assert baseline_ratios(doc) == []  # no baseline checkout measured
    # Issue 26's tree: no-op converges at N = 1 of 10 and 12 s wall (median 11); after: 10 s -> 0.91, within 1.20.
    b26 = [{**_measurement(1, "no-op converge (site.yml)", 8, 1), "checkout": "before26"} for _ in range(2)]
    b26[1]["wall_s"] = 12.0
    # Issue 33's pre-skip tree: a 16-node remediation of 100 s; after: 160 s (the _measurement default) -> 1.60.
    pre = {**_measurement(16, "remediate --batch 25% (power limit)", 170, 1), "checkout": "before", "wall_s": 100.0}
    doc["measurements"] += [*b26, pre, _measurement(16, "remediate --batch 25% (power limit)", 153, 1)]
    goals = {g["goal"]: g for g in baseline_ratios(doc)}
    wall = goals["issue 26: no-op converge, wall"]
    assert (wall["baseline"], wall["before"], wall["after"], wall["met"]) == ("before26", 11.0, 10.0, True)
    assert wall["ratio"] == pytest.approx(10 / 11)
    # Controller CPU per host: before26 8 s / 2 hosts = 4.0; after 10 s / 2 hosts = 5.0 -> 1.25, over 1.20.
    assert goals["issue 26: no-op converge, controller CPU s per host"]["met"] is False
    rem = goals["issue 33: remediation of 16 nodes, wall"]
    assert (rem["n"], rem["ratio"], rem["met"]) == (16, 1.6, False)
    assert goals["issue 33: remediation of 16 nodes, controller CPU s per host"]["ratio"] == pytest.approx(0.9)
    # Goals whose baseline was not measured (drift at N = 1 for before26, fresh converge for before) are left out.
    assert "issue 26: drift check, wall" not in goals and "issue 33: fresh converge of one GPU node, wall" not in goals
    assert "| issue 33: remediation of 16 nodes, wall | before | 16 | 100.00 | 160.00 | 1.60 | <= 1.00 | no |" in (
        render_markdown(doc))


# ------------------------------------------------------------------------------------------ against the bench


def _committed() -> dict[str, Any]:
    try:
        return sm.load_bench(sm.latest_bench())
    except FileNotFoundError:
        pytest.skip("no scale bench results committed yet (benchmarks/results/*-scale.json)")


def test_sixteen_node_prediction_within_30_percent_of_the_bench() -> None:
    """Configured for this machine (the nodes share the controller's cores, docker exec), the model's 16-node
    no-op converge and drift check are within 30% of the wall time the committed bench measured."""
    doc = _committed()
    cores = float(doc["machine"]["cores"])
    checked = 0
    for co in doc["checkouts"]:
        walls = {m["op"]: m["wall_s"] for m in doc["measurements"]
                 if m["checkout"] == co["label"] and m["n"] == 16 and m["rc"] in (0, 2)}
        for op, name in sm.OPERATIONS.items():
            if name not in walls:
                continue
            cost = sm.fit_op(doc, op, checkout=co["label"])
            p = sm.predict(cost, sm.Fleet(nodes=16, forks=int(co["forks"]), controller_cores=cores,
                                          shared_cores=True, connection_s=0.0))
            assert p.wall_s == pytest.approx(walls[name], rel=0.30), (co["label"], name, p, walls[name])
            checked += 1
    assert checked >= 2

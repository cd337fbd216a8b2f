"""The slice bench (benchmarks/slices.py, issue 33 point 4): AWX's slicing rule, the AWX-shaped private data dir of a
slice job, the model comparison and the results' rendering. No sandbox and no docker: ansible-runner runs once, on a
fixture playbook against localhost, to prove the layout is one it accepts and whose events give a drift report."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from benchmarks import slices as sl
from benchmarks.scale import Measurement
from gpufleet.ansible_run.job_events import read_job_events
from gpufleet.bench import scale_model as sm
from gpufleet.cli import app
from gpufleet.drift.runner import report_from_events

RUNNER = Path(sys.executable).parent / "ansible-runner"

#: ``ansible-inventory --list --export`` of a small stack (the layout gpufleet up writes: role and pool groups).
EXPORT: dict[str, Any] = {
    "_meta": {"hostvars": {
        "gpu-0": {"ansible_host": {"__ansible_unsafe": "gpufleet-local-gpu-0"}, "gpufleet_pool": "gpu"},
        "gpu-1": {"ansible_host": "gpufleet-local-gpu-1"}, "gpu-10": {}, "gpu-2": {},
        "control-0": {"ansible_host": "gpufleet-local-control-0"}},
        "profile": "inventory_legacy"},
    "all": {"children": ["ungrouped", "gpu", "system", "pool_gpu"], "vars": {"gpufleet_cluster_name": "local"}},
    "gpu": {"hosts": ["gpu-0", "gpu-1", "gpu-2", "gpu-10"]},
    "system": {"hosts": ["control-0"]},
    "pool_gpu": {"hosts": ["gpu-0", "gpu-1", "gpu-2", "gpu-10"], "vars": {"gpu_settings_power_limit": 700}},
}


def test_host_i_goes_to_slice_i_mod_k() -> None:
    hosts = [f"h{i}" for i in range(7)]
    assert sl.slice_hosts(hosts, 3) == [["h0", "h3", "h6"], ["h1", "h4"], ["h2", "h5"]]
    assert sl.slice_hosts(hosts, 1) == [hosts]
    # The order given is kept inside each slice (no re-sorting).
    assert sl.slice_hosts(["b", "a", "d", "c"], 2) == [["b", "d"], ["a", "c"]]
    # Every host in exactly one slice.
    parts = sl.slice_hosts(hosts, 4)
    assert sorted(h for p in parts for h in p) == sorted(hosts) and len(parts) == 4


def test_more_slices_than_hosts_is_one_slice_per_host() -> None:
    # AWX runs min(job_slice_count, hosts) slices (JobTemplate.get_effective_slice_ct): none is empty.
    assert sl.slice_hosts(["a", "b", "c"], 8) == [["a"], ["b"], ["c"]]
    with pytest.raises(ValueError, match="1 slice or more"):
        sl.slice_hosts(["a"], 0)
    with pytest.raises(ValueError, match="no hosts"):
        sl.slice_hosts([], 2)


def test_awx_order_is_by_name_and_inventory_order_is_the_inventorys() -> None:
    hosts = sl.inventory_hosts(EXPORT)
    # all's children in order, a group's hosts where they first appear.
    assert hosts == ["gpu-0", "gpu-1", "gpu-2", "gpu-10", "control-0"]
    # AWX's get_script_data: order_by('name'), then hosts[n::K].
    assert sl.order_hosts(hosts, "name") == ["control-0", "gpu-0", "gpu-1", "gpu-10", "gpu-2"]
    assert sl.slice_hosts(sl.order_hosts(hosts, "name"), 2) == [["control-0", "gpu-1", "gpu-2"], ["gpu-0", "gpu-10"]]
    assert sl.order_hosts(hosts, "inventory") == hosts


def test_a_slices_inventory_has_every_group_and_only_its_hosts() -> None:
    inv = sl.slice_inventory(EXPORT, ["gpu-1", "control-0"])
    assert inv["gpu"] == {"hosts": ["gpu-1"]}
    assert inv["system"] == {"hosts": ["control-0"]}
    assert inv["pool_gpu"] == {"hosts": ["gpu-1"], "vars": {"gpu_settings_power_limit": 700}}
    assert inv["all"] == EXPORT["all"]
    assert inv["_meta"] == {"profile": "inventory_legacy", "hostvars": {
        "gpu-1": {"ansible_host": "gpufleet-local-gpu-1"}, "control-0": {"ansible_host": "gpufleet-local-control-0"}}}


def test_the_drift_job_template_is_gpufleets_awx_object() -> None:
    t = sl.drift_job_template()
    objects = yaml.safe_load(sl.AWX_OBJECTS.read_text())
    task = next(t for t in objects[0]["tasks"] if "awx.awx.job_template" in t)
    item = next(i for i in task["loop"] if i["name"] == "gpufleet drift")
    forks = yaml.safe_load(sl.AWX_SIZING.read_text())["gpufleet_awx_forks"]
    assert (t.playbook, t.job_type, t.extra_vars, t.forks) == (item["playbook"], "check", item["extra_vars"], forks)
    assert t.diff_mode is task["awx.awx.job_template"]["diff_mode"] is True
    # RunJob.build_args: --check for a check job, -u root without a credential, --diff, --forks=N.
    assert t.cmdline() == ["--check", "-u", "root", "--diff", f"--forks={forks}"]


def test_template_variables_resolve_from_the_play_then_the_sizing_file(tmp_path: Path) -> None:
    objects = tmp_path / "awx.yml"
    objects.write_text(yaml.safe_dump([{"hosts": "localhost", "vars": {"f": 7, "pb": "x.yml"}, "tasks": [
        {"awx.awx.job_template": {"name": "{{ item.name }}", "playbook": "{{ pb }}", "job_type": "{{ item.jt }}",
                                  "forks": "{{ f }}", "extra_vars": "{{ item.ev }}"},
         "loop": [{"name": "a", "jt": "run", "ev": {}}, {"name": "gpufleet drift", "jt": "check", "ev": {"k": 1}}]},
    ]}]))
    sizing = tmp_path / "sizing.yml"
    sizing.write_text("f: 9\n")
    assert sl.drift_job_template(objects, None) == sl.JobTemplate("gpufleet drift", "x.yml", "check", False,
                                                                   {"k": 1}, 7)
    assert sl.drift_job_template(objects, sizing).forks == 9
    with pytest.raises(ValueError, match=r"no awx\.awx\.job_template named 'nope'"):
        sl.drift_job_template(objects, None, name="nope")


def test_private_data_dir_is_laid_out_as_awx_does(tmp_path: Path) -> None:
    project = tmp_path / "checkout"
    project.mkdir()
    template = sl.JobTemplate("gpufleet drift", "ansible/site.yml", "check", True, {}, 50)
    inventory = sl.slice_inventory(EXPORT, ["gpu-0", "gpu-2"])
    pdd = tmp_path / "k2" / "slice0"
    env = sl.ee_envvars(pdd, project)
    sl.write_private_data_dir(pdd, project=project, inventory=inventory, template=template, envvars=env,
                              job_timeout=600)
    assert sorted(str(p.relative_to(pdd)) for p in pdd.rglob("*")) == [
        "env", "env/cmdline", "env/envvars", "env/extravars", "env/settings", "inventory", "inventory/hosts",
        "project"]
    assert (pdd / "project").is_symlink() and (pdd / "project").resolve() == project.resolve()
    # inventory/hosts: AWX's executable inventory script, printing the slice's inventory.
    script = pdd / "inventory" / "hosts"
    assert script.stat().st_mode & stat.S_IXUSR
    assert script.read_text().startswith("#! /usr/bin/env python3\n")
    printed = subprocess.run([sys.executable, str(script), "--list"], capture_output=True, text=True, check=True)
    assert json.loads(printed.stdout) == inventory
    assert json.loads((pdd / "env" / "extravars").read_text()) == {}
    assert json.loads((pdd / "env" / "settings").read_text()) == {
        "job_timeout": 600, "suppress_ansible_output": True, "suppress_output_file": True}
    assert (pdd / "env" / "cmdline").read_text() == "--check -u root --diff --forks=50"
    assert json.loads((pdd / "env" / "envvars").read_text()) == {
        "ANSIBLE_CONFIG": str(pdd / "project" / "ansible" / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(project / ".collections")}
    assert sl.ee_envvars(pdd, project, project_callbacks=True)["ANSIBLE_CALLBACK_PLUGINS"] == str(
        pdd / "project" / "gpufleet" / "ansible_run" / "callback_plugins")
    assert sl.runner_command(Path("/v/ansible-runner"), pdd, template, "slice0") == [
        "/v/ansible-runner", "run", str(pdd), "-p", "ansible/site.yml", "--ident", "slice0"]


def test_no_running_stack_stops_before_anything_is_written() -> None:
    with pytest.raises(SystemExit, match=r"inventories/no-such-stack/hosts\.yml: no inventory; run `gpufleet up"):
        sl.preflight("no-such-stack")


def test_slice_counts_start_with_one() -> None:
    assert sl.parse_slices("4,2") == [1, 2, 4]
    assert sl.parse_slices("1,2,2,8") == [1, 2, 8]
    for bad in ("0,2", "two", ""):
        with pytest.raises(SystemExit):
            sl.parse_slices(bad)


def _k1(**kw: Any) -> dict[str, Any]:
    """A K = 1 measurement: 3 hosts (2 GPU nodes of 100 tasks, a control node of 40), 240 host-tasks."""
    m = Measurement(checkout="current", n=2, op="drift, ansible-runner, 1 slice(s)", wall_s=60.0, rc=0,
                    controller_cpu_s=53.0, controller_cpu_cgroup_s=53.5, node_cpu_s=30.0, node_idle_cpu_s=6.0,
                    engine_shim_cpu_s=2.0, engine_daemon_cpu_s=2.8, hosts=3, gpu_nodes=2, load_start=1.0,
                    load_end=2.0, counts={"gpu-0": {"tasks": 100, "skipped": 40, "module_runs": 30},
                                          "gpu-1": {"tasks": 100, "skipped": 40, "module_runs": 50},
                                          "control-0": {"tasks": 40, "skipped": 10, "module_runs": 5}})
    return m.to_json() | kw


def test_model_inputs_come_from_the_k1_run_and_the_fixed_run() -> None:
    op = sl.op_cost_from_k1(_k1(), fixed_cpu_s=5.0, gpu_hosts=["gpu-0", "gpu-1"])
    assert op.tasks_per_host == 100 and op.module_runs_per_host == 40
    assert op.controller_fixed_cpu_s == 5.0
    assert op.controller_cpu_per_host_task_s == pytest.approx((53 - 5) / 240)  # 0.2 s
    assert op.node_cpu_per_host_task_s == pytest.approx((30 - 6) / 240)  # 0.1 s
    assert op.engine_cpu_per_host_task_s == pytest.approx(4.8 / 240)  # 0.02 s
    with pytest.raises(ValueError, match="no per-host task counts"):
        sl.op_cost_from_k1(_k1(counts={}), fixed_cpu_s=5.0, gpu_hosts=["gpu-0"])


def test_measured_against_the_model_on_this_machine() -> None:
    op = sl.op_cost_from_k1(_k1(), fixed_cpu_s=5.0, gpu_hosts=["gpu-0", "gpu-1"])
    rows = sl.compare(op, [{"k": 1, "wall_s": 40.0}, {"k": 2, "wall_s": 30.0}], hosts=3, forks=50, cores=2.0)
    # K = 1: 3 hosts on 2 cores, 0.32 CPU s per host-task (0.2 + 0.1 + 0.02): step = 3 x 0.32 / 2 = 0.48 s, one
    # round of 0.32 s is shorter; wall = 5 fixed + 100 tasks x 0.48.
    assert rows[0] == {"k": 1, "measured_wall_s": 40.0, "predicted_wall_s": pytest.approx(53.0),
                       "ratio": pytest.approx(40 / 53), "bound": "shared CPU", "hosts_per_slice": 3}
    # K = 2 slices share the 2 cores (1 each), ceil(3 / 2) = 2 hosts each: step = 2 x 0.32 / 1 = 0.64 s; no pod
    # start on the sandbox.
    assert rows[1]["predicted_wall_s"] == pytest.approx(5 + 100 * 0.64)
    assert rows[1]["ratio"] == pytest.approx(30 / 69) and rows[1]["hosts_per_slice"] == 2
    # The same numbers as the model itself computes for that fleet.
    p = sm.predict(op, sm.Fleet(nodes=3, forks=50, slices=2, controller_cores=1.0, shared_cores=True,
                                connection_s=0.0, slice_start_s=0.0))
    assert rows[1]["predicted_wall_s"] == p.wall_s
    # More slices than hosts: one per host, as AWX runs them.
    assert sl.compare(op, [{"k": 8, "wall_s": 1.0}], hosts=3, forks=50, cores=2.0)[0]["hosts_per_slice"] == 1


def test_the_goals_are_predicted_as_gpufleet_bench_scale_model_does() -> None:
    op = sl.op_cost_from_k1(_k1(), fixed_cpu_s=5.0, gpu_hosts=["gpu-0", "gpu-1"])
    one, four = sl.goal_predictions(op, forks=50)
    # 1,000 nodes, forks 50, 8 cores, ControlPersist: 1000 x 0.2 / 8 = 25 s of controller CPU per step against
    # 20 rounds of (0.2 + 0.1 + 0.02 x 0.4) = 6.16 s: CPU bound, 5 + 100 x 25 s.
    assert (one["nodes"], one["slices"], one["target_s"], one["bound"]) == (1000, 1, 60.0, "controller CPU")
    assert one["predicted_wall_s"] == pytest.approx(5 + 100 * 25) and one["met"] is False
    # 4 slices of 250 hosts: 6.25 s a step, plus the model's assumed 30 s slice start.
    assert four["predicted_wall_s"] == pytest.approx(sm.SLICE_START_S + 5 + 100 * 6.25)
    assert four["slice_start_s"] == sm.SLICE_START_S and four["target_s"] == 20.0
    cheap = sm.OpCost("x", 10, 5, 1.0, 0.001, 0.01)
    assert sl.goal_predictions(cheap, forks=50)[0]["met"] is True
    assert math.isclose(sl.goal_predictions(cheap, forks=50)[0]["predicted_wall_s"],
                        sm.predict(cheap, sm.Fleet(nodes=1000, forks=50)).wall_s)


def _doc() -> dict[str, Any]:
    op = sl.op_cost_from_k1(_k1(), fixed_cpu_s=5.0, gpu_hosts=["gpu-0", "gpu-1"])
    # The fixed CPU per job as the K runs' controller CPU grows: 10 s (what a job pays once it has hosts too).
    by_slope = sl.op_cost_from_k1(_k1(), fixed_cpu_s=10.0, gpu_hosts=["gpu-0", "gpu-1"])
    slice_rows = [
        {"k": 1, "wall_s": 40.0, "controller_cpu_s": 53.0, "problems": [], "slices": [
            {"index": 0, "hosts": ["control-0", "gpu-0", "gpu-1"], "wall_s": 40.0, "report_ok": True}]},
        {"k": 2, "wall_s": 30.0, "controller_cpu_s": 58.0, "union_equals_k1": True, "items_equal_k1": False,
         "problems": ["drift items differ from K=1's: 2 only in slices"], "slices": [
             {"index": 0, "hosts": ["control-0", "gpu-1"], "wall_s": 29.5, "report_ok": True},
             {"index": 1, "hosts": ["gpu-0"], "wall_s": 21.25, "report_ok": True}]}]
    return {
        "started": "2026-12-04 15:00", "finished": "2026-12-04 15:10", "notes": [], "order": "name",
        "machine": {"cores": 2, "memory_gib": 7.7, "kernel": "6.1", "docker": "27.0", "cgroup_version": 2,
                    "python": "3.11.9"},
        "checkouts": [{"label": "current", "commit": "0123456789abcdef", "subject": "s", "ansible_core": "2.19.14"}],
        "measurements": [_k1()], "slices": slice_rows,
        "template": {"name": "gpufleet drift", "playbook": "ansible/site.yml",
                     "cmdline": ["--check", "-u", "root", "--diff", "--forks=50"]},
        "model": {"inputs": op.__dict__, "fixed_source": "measured", "fixed_from_k_slope_s": 10.0,
                  "inputs_k_slope": by_slope.__dict__,
                  "comparison": sl.compare(op, slice_rows, hosts=3, forks=50, cores=2.0),
                  "comparison_k_slope": sl.compare(by_slope, slice_rows, hosts=3, forks=50, cores=2.0),
                  "goals": [g | {"fixed": name} for name, o in (("empty run", op), ("K runs' slope", by_slope))
                            for g in sl.goal_predictions(o, forks=50)]}}


def test_results_render_with_the_comparison_table_last() -> None:
    md = sl.render(_doc())
    assert md.startswith("# Slices bench, 2026-12-04 15:00 to 2026-12-04 15:10 UTC\n")
    assert "Harness: `python -m benchmarks.slices`" in md
    # scale.py's measurement table (machine facts, load), then the slices.
    assert "| current | 2 | drift, ansible-runner, 1 slice(s) | 60.0 | 53.0 [53.5] |" in md
    assert "| 2 | 2, 1 | 29.5, 21.2 | 30.0 | 2/2 ok | True | False |" in md
    assert "- K=2: drift items differ from K=1's: 2 only in slices" in md
    assert "- controller CPU per host-task: 200.0 ms" in md
    # (53 - 10) / 240 host-tasks.
    assert "with it as the fixed CPU, 179.2 ms per host-task" in md
    assert "| 1000 nodes, one 8-core controller | empty run | 2505 | controller CPU | 60 | no |" in md
    # 10 + 100 x 1000 x 0.1792 / 8.
    assert "| 1000 nodes, one 8-core controller | K runs' slope | 2250 | controller CPU | 60 | no |" in md
    assert ("| 1000 nodes, 4 slices of 8 cores (slice start 30 s, assumed) | empty run | 660 | controller CPU | 20 "
            "| no |") in md
    table = md.rstrip("\n").split("\n\n")[-1].splitlines()
    assert table[0] == ("| K | measured wall s | predicted wall s | measured / predicted | bound "
                        "| predicted wall s, K runs' slope | measured / predicted |")
    # K = 2 with a 10 s fixed CPU: 10 + 100 x 2 hosts x 0.2992 CPU s / 1 core = 69.8 s.
    assert table[2:] == ["| 1 | 40.0 | 53.0 | 0.75 | shared CPU | 54.9 | 0.73 |",
                         "| 2 | 30.0 | 69.0 | 0.43 | shared CPU | 69.8 | 0.43 |"]


@pytest.mark.slow
@pytest.mark.skipif(not RUNNER.exists(), reason="ansible-runner is in requirements-awx.lock (make test)")
def test_ansible_runner_runs_a_slice_job_from_this_layout(tmp_path: Path) -> None:
    # A project with the drift template's playbook path: one task whose file differs, on localhost.
    project = tmp_path / "project"
    (project / "ansible").mkdir(parents=True)
    target = tmp_path / "target.txt"
    target.write_text("have\n")
    (project / "ansible" / "site.yml").write_text(yaml.safe_dump([{
        "name": "Fixture", "hosts": "gpu", "gather_facts": False,
        "tasks": [{"name": "A file that differs", "ansible.builtin.copy": {
            "content": "want\n", "dest": str(target), "mode": "0644"}}]}]))
    (project / "ansible" / "ansible.cfg").write_text("[defaults]\n")
    export = {"all": {"children": ["ungrouped", "gpu"]}, "gpu": {"hosts": ["a", "b", "c"]},
              "_meta": {"hostvars": {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                                     for h in ("a", "b", "c")}}}
    template = sl.drift_job_template()
    part = sl.slice_hosts(sl.order_hosts(sl.inventory_hosts(export), "name"), 2)[0]
    pdd = sl.write_private_data_dir(tmp_path / "pdd", project=project, inventory=sl.slice_inventory(export, part),
                                    template=template, envvars=sl.ee_envvars(tmp_path / "pdd", project),
                                    job_timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{RUNNER.parent}{os.pathsep}{env.get('PATH', '')}"
    run = subprocess.run(sl.runner_command(RUNNER, pdd, template, "slice0"), capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    job = read_job_events(pdd)
    assert (job.status, job.rc, job.check) == ("successful", 0, True)
    report, _ = report_from_events(job)
    assert sorted(report.hosts) == part == ["a", "c"]
    assert report.drifted_hosts == ["a", "c"]
    assert target.read_text() == "have\n", "check mode changed the file"


def test_ansible_runner_runs_a_limited_job_over_the_whole_inventory(tmp_path: Path) -> None:
    # The parallel drift workflow's job: every host in the inventory (so `groups` is the cluster's), one --limit.
    project = tmp_path / "project"
    (project / "ansible").mkdir(parents=True)
    seen = tmp_path / "seen"
    seen.mkdir()
    (project / "ansible" / "site.yml").write_text(yaml.safe_dump([{
        "name": "Fixture", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "What a template reading the groups would see", "ansible.builtin.copy": {
            "content": "{{ groups['gpu'] | join(',') }}\n", "dest": f"{seen}/{{{{ inventory_hostname }}}}",
            "mode": "0644"}}]}]))
    (project / "ansible" / "ansible.cfg").write_text("[defaults]\n")
    hosts = ["a", "b", "c", "d", "e"]
    export = {"all": {"children": ["ungrouped", "gpu"]}, "gpu": {"hosts": hosts},
              "_meta": {"hostvars": {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                                     for h in hosts}}}
    template = sl.drift_job_template()
    limits = sm.drift_limits(len(hosts), 2)
    assert limits == ["all[0:1]", "all[2:]"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{RUNNER.parent}{os.pathsep}{env.get('PATH', '')}"
    reported: list[str] = []
    for i, limit in enumerate(limits):
        pdd = sl.write_private_data_dir(tmp_path / f"pdd{i}", project=project, inventory=export, template=template,
                                        envvars=sl.ee_envvars(tmp_path / f"pdd{i}", project), job_timeout=300,
                                        limit=limit)
        assert (pdd / "env" / "cmdline").read_text().endswith(f"--limit '{limit}'")
        run = subprocess.run(sl.runner_command(RUNNER, pdd, template, f"job{i}"), capture_output=True, text=True,
                             env=env, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        report, _ = report_from_events(read_job_events(pdd))
        reported += sorted(report.hosts)
        # Check mode and a diff per host: every host of the range would get the whole group's list.
        assert report.drifted_hosts == sorted(report.hosts)
        assert all("+a,b,c,d,e\n" in (item.diff or "") for item in report.items) and report.items
    assert sorted(reported) == hosts and len(reported) == len(set(reported))
    # One job over everything gives the report the jobs' events give together (`drift --events A --events B`).
    whole = sl.write_private_data_dir(tmp_path / "whole", project=project, inventory=export, template=template,
                                      envvars=sl.ee_envvars(tmp_path / "whole", project), job_timeout=300,
                                      limit=sm.drift_limits(len(hosts), 1)[0])
    run = subprocess.run(sl.runner_command(RUNNER, whole, template, "whole"), capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    one = CliRunner().invoke(app, ["drift", "--events", str(whole), "--json", "--textfile", str(tmp_path / "1.prom")])
    both = CliRunner().invoke(app, ["drift", "--events", str(tmp_path / "pdd0"), "--events", str(tmp_path / "pdd1"),
                                    "--json", "--textfile", str(tmp_path / "2.prom")])
    assert one.exit_code == both.exit_code == 2, both.output
    a, b = json.loads(one.stdout), json.loads(both.stdout)
    assert sorted(a["hosts"]) == sorted(b["hosts"]) == hosts
    key = lambda i: (i["host"], i["task"])  # noqa: E731
    assert sorted(a["items"], key=key) == sorted(b["items"], key=key)
    def metrics(name: str) -> list[str]:  # the run's timestamp aside
        return sorted(ln for ln in (tmp_path / name).read_text().splitlines() if "_timestamp_seconds{" not in ln)

    assert metrics("1.prom") == metrics("2.prom")
    # The same job's events twice: overlapping ranges are an error, not a silently doubled host.
    twice = CliRunner().invoke(app, ["drift", "--events", str(tmp_path / "pdd0"), "--events", str(tmp_path / "pdd0"),
                                     "--json", "--textfile", str(tmp_path / "3.prom")])
    assert twice.exit_code == 1
    assert any("checked by job 1 and job 2" in e for e in json.loads(twice.stdout)["errors"])
    assert not any(seen.iterdir()), "check mode wrote a file"

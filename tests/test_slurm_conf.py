"""roles/slurm's slurm.conf rendered by Ansible (the role's preflight, defaults, vars and template): the scheduler
parameters and timeouts issue 29 asks for, and the preflight's refusal of values the Slurm documentation rules out
(https://slurm.schedmd.com/slurm.conf.html)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ansible_local import local_host, run_playbook

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, files: list[str], gpu: dict[str, dict[str, object]] | None = None,
         **group: object) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    out.mkdir()
    gpu_hosts = {name: local_host(**hv) for name, hv in (gpu or {"gpu-0": {}}).items()}
    inventory = {"all": {"vars": {"out_dir": str(out), "render_files": files, **group},
                         "children": {"system": {"hosts": {"ctl": local_host()}},
                                      "gpu": {"hosts": gpu_hosts}}}}
    res = run_playbook(tmp_path, "slurm_conf.yml", inventory)
    return res.returncode, res.stdout + res.stderr, out


def _settings(path: Path) -> dict[str, str]:
    """slurm.conf's single-valued lines as key -> value (NodeName and PartitionName lines are left out)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines if not ln.startswith(("NodeName=", "PartitionName=")))


def test_backfill_and_timeouts_for_long_gpu_jobs(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["slurm.conf"])
    assert rc == 0, log
    conf = _settings(out / "ctl.slurm.conf")
    # bf_window covers the partition's MaxTime (7 days, in minutes): no long job starves behind backfill.
    assert conf["SchedulerParameters"] == "bf_continue,bf_window=10080,bf_resolution=600,bf_max_job_test=1000"
    assert (conf["MessageTimeout"], conf["SlurmdTimeout"], conf["UnkillableStepTimeout"]) == ("30", "300", "180")
    partition = [ln for ln in (out / "ctl.slurm.conf").read_text().splitlines() if ln.startswith("PartitionName=")]
    assert partition == ["PartitionName=gpu Nodes=gpu-0 Default=YES MaxTime=10080 State=UP"]
    # Every host gets the same file.
    assert (out / "gpu-0.slurm.conf").read_text() == (out / "ctl.slurm.conf").read_text()


def test_bf_window_follows_a_longer_partition_limit(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["slurm.conf"], slurm_partition_max_time_minutes=20160,
                        slurm_sched_bf_continue=False, slurm_message_timeout_seconds=20)
    assert rc == 0, log
    conf = _settings(out / "ctl.slurm.conf")
    assert conf["SchedulerParameters"] == "bf_window=20160,bf_resolution=600,bf_max_job_test=1000"
    assert conf["MessageTimeout"] == "20"


@pytest.mark.parametrize("group", [
    {"slurm_sched_bf_window_minutes": 60},                                       # shorter than MaxTime
    {"slurm_partition_max_time_minutes": 50000},                                 # bf_window past Slurm's 43200
    {"slurm_message_timeout_seconds": 60},                                       # UnkillableStepTimeout < 5 x
    {"slurm_sched_bf_resolution_seconds": 7200},                                 # past 3600
])
def test_preflight_refuses_what_slurm_documents_as_wrong(tmp_path: Path, group: dict[str, object]) -> None:
    rc, log, _ = _run(tmp_path, ["slurm.conf"], **group)
    assert rc != 0
    assert "Assert the scheduler parameters and timeouts are consistent" in log
    assert "slurm.conf.html says why" in log


def test_real_hosts_isolate_gpus_with_cgroups(tmp_path: Path) -> None:
    # Issue 29 point 1: the role's defaults (a real host): cgroup process tracking and task binding, and cgroup.conf
    # confining each step to its GPUs' device files, cores and memory.
    rc, log, out = _run(tmp_path, ["slurm.conf", "cgroup.conf"])
    assert rc == 0, log
    conf = _settings(out / "gpu-0.slurm.conf")
    assert (conf["ProctrackType"], conf["TaskPlugin"]) == ("proctrack/cgroup", "task/cgroup,task/affinity")
    cgroup = [ln for ln in (out / "gpu-0.cgroup.conf").read_text().splitlines() if ln and not ln.startswith("#")]
    assert cgroup == ["ConstrainDevices=yes", "ConstrainCores=yes", "ConstrainRAMSpace=yes"]
    assert "Not in force" not in (out / "gpu-0.cgroup.conf").read_text()


def test_cgroup_conf_says_when_the_plugins_do_not_read_it(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["cgroup.conf"], slurm_proctrack_type="proctrack/linuxproc",
                        slurm_task_plugin="task/none")
    assert rc == 0, log
    text = (out / "ctl.cgroup.conf").read_text()
    assert "# Not in force on this cluster: the cgroup plugins are not configured" in text


def _place(switch: str | None = None, block: str | None = None) -> dict[str, object]:
    # What gpufleet.inventory.writer puts on a host from the stack's pools[].place / hosts[].place.
    return {"gpufleet_place": {k: v for k, v in (("block", block), ("switch", switch)) if v}}


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def test_topology_conf_from_the_stacks_place(tmp_path: Path) -> None:
    # Issue 29 point 3: two leaves in one block, one leaf in another: a root joins the blocks.
    gpu = {"gpu-a-0": _place("leaf-01", "b1"), "gpu-a-1": _place("leaf-01", "b1"),
           "gpu-b-0": _place("leaf-02", "b1"), "gpu-c-0": _place("leaf-03", "b2")}
    rc, log, out = _run(tmp_path, ["slurm.conf", "topology.conf"], gpu=gpu)
    assert rc == 0, log
    assert _lines(out / "ctl.topology.conf") == [
        "SwitchName=leaf-01 Nodes=gpu-a-0,gpu-a-1", "SwitchName=leaf-02 Nodes=gpu-b-0",
        "SwitchName=leaf-03 Nodes=gpu-c-0",
        "SwitchName=b1 Switches=leaf-01,leaf-02", "SwitchName=b2 Switches=leaf-03",
        "SwitchName=fabric-root Switches=b1,b2"]
    assert _settings(out / "ctl.slurm.conf")["TopologyPlugin"] == "topology/tree"


def test_topology_left_out_when_a_node_has_no_switch(tmp_path: Path) -> None:
    gpu = {"gpu-a-0": _place("leaf-01"), "gpu-a-1": {}}
    rc, log, out = _run(tmp_path, ["slurm.conf", "topology.conf"], gpu=gpu)
    assert rc == 0, log
    assert _lines(out / "ctl.topology.conf") == []
    assert "not every compute node has a leaf switch in the stack (gpu-a-1)" in (out / "ctl.topology.conf").read_text()
    assert "TopologyPlugin" not in _settings(out / "ctl.slurm.conf")


def test_one_leaf_needs_no_root_and_a_bad_name_is_refused(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["topology.conf"], gpu={"gpu-0": _place("leaf-01")})
    assert rc == 0, log
    assert _lines(out / "ctl.topology.conf") == ["SwitchName=leaf-01 Nodes=gpu-0"]
    (tmp_path / "bad").mkdir()
    rc, log, _ = _run(tmp_path / "bad", ["topology.conf"], gpu={"gpu-0": _place("leaf 01\nNodes=x")})
    assert rc != 0 and "refusing to write these into slurm.conf" in log


def test_health_check_program_prolog_and_epilog(tmp_path: Path) -> None:
    # Issue 29 point 5: gpufleet's node health check at HealthCheckInterval, the quick checks as Prolog, the
    # GPU-holder check as Epilog (programs the role installs: tests/test_slurm_health.py).
    rc, log, out = _run(tmp_path, ["slurm.conf"], slurm_healthcheck_interval_seconds=120)
    assert rc == 0, log
    conf = _settings(out / "ctl.slurm.conf")
    assert conf["HealthCheckProgram"] == "/usr/local/sbin/gpufleet-slurm-healthcheck"
    assert (conf["HealthCheckInterval"], conf["HealthCheckNodeState"]) == ("120", "ANY,CYCLE")
    assert conf["Prolog"] == "/usr/local/sbin/gpufleet-slurm-prolog"
    assert conf["Epilog"] == "/usr/local/sbin/gpufleet-slurm-epilog"
    (tmp_path / "off").mkdir()
    rc, log, out2 = _run(tmp_path / "off", ["slurm.conf"], slurm_healthcheck_enabled=False,
                         slurm_healthcheck_prolog=False, slurm_healthcheck_epilog=False)
    assert rc == 0, log
    assert not {"HealthCheckProgram", "Prolog", "Epilog"} & set(_settings(out2 / "ctl.slurm.conf"))


@pytest.mark.parametrize(("group", "line"), [
    ({}, "CPUs=1 RealMemory=1024"),
    ({"slurm_node_cpus": 192, "slurm_node_layout": "Sockets=2 CoresPerSocket=48 ThreadsPerCore=2",
      "slurm_node_real_memory_mb": 2000000},
     "CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=2000000"),
])
def test_node_hardware_compared_with_slurmd_c_is_what_slurm_conf_declares(
        tmp_path: Path, group: dict[str, object], line: str) -> None:
    # Issue 29 point 1: the slurm_node_hardware task (tasks/config.yml) compares slurmd -C with __slurm_node_hardware;
    # the NodeName line slurmctld reads carries the same declaration, so the check and slurmctld judge one thing.
    from gpufleet.module_utils.slurm_node import declared_layout, parse_fields

    rc, log, out = _run(tmp_path, ["slurm.conf"], dump_vars=["__slurm_node_hardware"], **group)
    assert rc == 0, log
    declared = json.loads((out / "gpu-0.vars.json").read_text())["__slurm_node_hardware"]
    assert declared == line
    node = [ln for ln in _lines(out / "gpu-0.slurm.conf") if ln.startswith("NodeName=")]
    assert node == [f"NodeName=gpu-0 {line} Gres=gpu:8 State=UNKNOWN"]
    assert declared_layout(parse_fields(node[0])) == declared_layout(parse_fields(declared))

"""slurm: slurmctld on the control node, slurmd on the GPU node, the node idle with its 8-GPU gres, gres.conf from
the GPU node's topology (a real 8x H100 matrix) as slurmd itself reads it (slurmd -G)."""

import re
import time

import pytest

CONTROL, NODE = "gpufleet-mol-slurm-0", "gpufleet-mol-slurm-1"
# Every GPU node (molecule.yml); the second is the one grow_shrink.yml removes and adds back before verify.
NODES = (NODE, "gpufleet-mol-slurm-2")


def test_daemons_run_where_they_belong(host):
    name = host.backend.get_hostname()
    assert host.service("munge").is_running
    if name == CONTROL:
        assert host.service("slurmctld").is_running and host.service("slurmctld").is_enabled
        assert not host.service("slurmd").is_running
    else:
        assert host.service("slurmd").is_running and host.service("slurmd").is_enabled
        assert not host.service("slurmctld").is_running


def test_config_names_the_controller_and_the_gres(host):
    conf = host.file("/etc/slurm/slurm.conf").content_string
    assert f"SlurmctldHost={CONTROL}\n" in conf
    layout = "CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2"
    assert f"NodeName={NODE} {layout} RealMemory=1024 Gres=gpu:8 State=UNKNOWN" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf and "SlurmdParameters=config_overrides" in conf


def _links(i):
    return ",".join("-1" if j == i else "18" for j in range(8))


# GPUs 0-3 sit on socket 0 (CPUs 0-47 + their siblings 96-143 = cores 0-47), GPUs 4-7 on socket 1; NV18 everywhere.
GRES = [(f"/dev/nvidia{i}", "0-47" if i < 4 else "48-95", _links(i)) for i in range(8)]


def test_gres_conf_one_line_per_gpu_from_topology(host):
    lines = [ln for ln in host.file("/etc/slurm/gres.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    # Each GPU node carries its own lines; the controller none (slurmd reports them when it registers).
    name = host.backend.get_hostname()
    want = [f"NodeName={name} Name=gpu File={f} Cores={c} Links={lk}" for f, c, lk in GRES]
    assert lines == ["AutoDetect=off", *(want if name in NODES else [])]


def test_slurmd_reads_cores_and_links(host):
    # slurmd -G prints the GRES configuration as slurmd parses it from slurm.conf and gres.conf, then exits.
    if host.backend.get_hostname() != NODE:
        pytest.skip("slurmd runs on the GPU node")
    r = host.run("slurmd -G")
    out = r.stdout + r.stderr
    assert r.rc == 0, out
    seen = {}
    for m in re.finditer(r"Gres Name=gpu .*?Index=(\d+) .*?File=(\S+) Cores=(\S+) CoreCnt=(\d+) Links=(\S+)", out):
        seen[int(m.group(1))] = (m.group(2), m.group(3), m.group(5), m.group(4))
    # CoreCnt is the node's CPU count as slurmd takes it from slurm.conf (CPUs=192), the range Cores= must fit in.
    assert seen == {i: (f, c, lk, "192") for i, (f, c, lk) in enumerate(GRES)}, out


@pytest.mark.parametrize("gpu_node", NODES)
def test_node_is_idle_with_eight_gpus(host, gpu_node):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    assert host.check_output(f"sinfo --noheader --Node --nodes {gpu_node} --format %T") == "idle"
    node = host.check_output(f"scontrol --oneliner show node {gpu_node}")
    # The socket list comes from gres.conf's Cores= (both sockets have GPUs).
    assert "Gres=gpu:8(S:0-1)" in node, node


def test_a_job_runs_on_every_gpu_node(host):
    # One task per GPU node, one GPU each: slurmd on both nodes runs it (the second after it was removed from the
    # cluster and added back, grow_shrink.yml).
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("submitted from the controller")
    r = host.run(f"srun --nodes={len(NODES)} --ntasks-per-node=1 --gres=gpu:1 --time=1 hostname")
    assert r.rc == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(NODES)


def _runner(host):
    """gpufleet.validation.bench Runner over testinfra: stdin goes through a file on the controller."""
    import shlex
    import subprocess

    def run(cmd, stdin):
        path = "/tmp/gpufleet-bench.sbatch"
        host.run(f"printf '%s' {shlex.quote(stdin)} > {path}")
        r = host.run(" ".join(shlex.quote(c) for c in cmd) + (f" {path}" if stdin else ""))
        return subprocess.CompletedProcess(cmd, r.rc, r.stdout, r.stderr)

    return run


def test_nccl_tests_sbatch_template_accepted_by_real_slurm(host):
    # The acceptance-benchmark job (issue 7) checked with `sbatch --test-only` against this real controller.
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("checked on the controller")
    from gpufleet.validation.bench import BenchSettings, check_sbatch, plan_jobs, render_sbatch

    job = next(j for j in plan_jobs([NODE]) if j.scope == "single-node")
    good = render_sbatch(job, BenchSettings(gpus_per_node=8, gpus_directive="gres"))
    bad = render_sbatch(job, BenchSettings(gpus_per_node=9, gpus_directive="gres"))
    checks = {c.job: c for c in check_sbatch({"good": good, "too-many-gpus": bad}, _runner(host))}
    assert checks["good"].status == "ok", checks["good"].message
    assert "to start at" in checks["good"].message
    assert checks["too-many-gpus"].status == "rejected", checks["too-many-gpus"].message


def _show_config(host):
    """`scontrol show config` as key -> value: what slurmctld runs with, not only what the file says."""
    out = host.check_output("scontrol show config")
    return {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in out.splitlines()) if _}


def test_controller_runs_the_backfill_and_timeouts_for_long_gpu_jobs(host):
    # Issue 29 point 4: bf_window covers the partition's MaxTime (10080 minutes), timeouts for large nodes.
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    conf = _show_config(host)
    assert conf["SchedulerParameters"] == "bf_continue,bf_window=10080,bf_resolution=600,bf_max_job_test=1000", conf
    assert conf["MessageTimeout"] == "30 sec", conf
    assert conf["SlurmdTimeout"] == "300 sec", conf
    assert conf["UnkillableStepTimeout"] == "180 sec", conf
    part = host.check_output("scontrol --oneliner show partition gpu")
    assert "MaxTime=7-00:00:00" in part, part


def test_cgroup_conf_constrains_devices_cores_and_memory(host):
    # Issue 29 point 1: the file the cgroup plugins read (every Slurm host, as slurm.conf).
    lines = [ln for ln in host.file("/etc/slurm/cgroup.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert lines == ["ConstrainDevices=yes", "ConstrainCores=yes", "ConstrainRAMSpace=yes"]


def test_containers_give_slurmd_no_writable_cgroup_tree(host):
    # Why the sandbox runs proctrack/linuxproc and task/none: slurmd could not create its job cgroups here. Should
    # this start to pass (a writable, delegated tree), the sandbox can run the real-host plugins instead.
    if host.backend.get_hostname() != NODE:
        pytest.skip("slurmd runs on the GPU node")
    r = host.run("mkdir /sys/fs/cgroup/gpufleet-probe")
    if r.rc == 0:
        host.run("rmdir /sys/fs/cgroup/gpufleet-probe")
    assert r.rc != 0 and "Read-only file system" in r.stderr, (r.rc, r.stderr)


def _node_line(host, node):
    """The NodeName line slurm.conf declares for ``node`` (the same file on every Slurm host)."""
    conf = host.file("/etc/slurm/slurm.conf").content_string
    return next(ln for ln in conf.splitlines() if ln.startswith(f"NodeName={node} "))


@pytest.mark.parametrize("gpu_node", NODES)
def test_scontrol_show_node_is_what_slurm_conf_declares(host, gpu_node):
    # Issue 29 point 1, where isolation cannot be proven (molecule.yml): slurmctld holds each GPU node as slurm.conf
    # declares it (config_overrides: the declared 8x H100 layout, not the container's CPUs), read with the role's
    # grammar of Slurm node records (gpufleet/module_utils/slurm_node.py).
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    from gpufleet.module_utils.slurm_node import parse_fields

    conf = parse_fields(_node_line(host, gpu_node))
    shown = parse_fields(host.check_output(f"scontrol --oneliner show node {gpu_node}"))
    keys = ("Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    assert (shown["CPUTot"], *(shown[k] for k in keys)) == (conf["CPUs"], *(conf[k] for k in keys)), shown
    # scontrol adds the sockets gres.conf's Cores= put the GPUs on: gpu:8(S:0-1) for slurm.conf's gpu:8.
    assert re.sub(r"\(S:[^)]*\)$", "", shown["Gres"]) == conf["Gres"] == "gpu:8", shown


def test_the_roles_slurmd_c_reading_is_the_containers_and_is_reported(host):
    # The role's check (module slurm_node_hardware, tasks/config.yml) with what the role gives it: slurm.conf's
    # declaration for the node and config_overrides. Its reading is slurmd -C's on this container (2 CPUs on the test
    # machine against the 192 declared), reported as the run summary's notice; without config_overrides the same
    # reading fails, as slurmctld would drain the node.
    name = host.backend.get_hostname()
    if name not in NODES:
        pytest.skip("slurmd runs on the GPU nodes")
    from gpufleet.module_utils.slurm_node import (
        NOTICE_EVENT,
        declared_layout,
        parse_fields,
        parse_slurmd_c,
        verdict,
    )

    r = host.run("slurmd -C")
    assert r.rc == 0, r.stdout + r.stderr
    _, found = parse_slurmd_c(r.stdout)
    declared = declared_layout(parse_fields(_node_line(host, name)))
    assert declared.cpus == 192 and found.cpus < declared.cpus, (found, declared)
    args = f"declared='{_node_line(host, name)}' node={name}"
    res = host.ansible("slurm_node_hardware", f"{args} config_overrides=true", check=False)
    assert res["changed"] is False and res["found"] == found.to_dict(), res
    notice = res["gpufleet_notice"]
    assert notice == verdict(name, declared, found, True).notice, res
    assert notice["event"] == NOTICE_EVENT
    assert notice["detail"].startswith(f"CPUs declared 192, slurmd -C {found.cpus};"), notice
    # Without config_overrides the same reading is the failure slurmctld's drain would be. Asked of the verdict the
    # module returns on: testinfra's ad-hoc module call did not report the module's failure here (the module's
    # fail_json path runs as Ansible runs it in tests/test_slurm_node_hardware.py).
    msg = verdict(name, declared, found, False).failure
    assert msg is not None, (found, declared)
    assert msg.startswith(f"slurm: {name}: slurm.conf declares more than slurmd -C finds (CPUs declared 192, "
                          f"slurmd -C {found.cpus};") and "INVALID_REG" in msg, msg


def test_controller_runs_the_plugins_the_inventory_set(host):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    conf = _show_config(host)
    assert (conf["ProctrackType"], conf["TaskPlugin"]) == ("proctrack/linuxproc", "task/none"), conf


def test_munge_key_is_the_clusters_and_readable_by_munge_only(host):
    # Issue 29 point 6: 0400 munge:munge on every Slurm host (restored after the breaks); one key for the cluster
    # is proven by test_a_job_crosses_munge_between_controller_and_node.
    key = host.file("/etc/munge/munge.key")
    assert (key.mode, key.user, key.group) == (0o400, "munge", "munge")
    assert key.size >= 32


def test_a_job_crosses_munge_between_controller_and_node(host):
    # slurmctld and slurmd authenticate every message with munge: a job started on the node after the broken key
    # was restored proves both hosts hold the same key again.
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("submitted from the controller")
    r = host.run("srun --nodes=1 --time=1 sha256sum /etc/munge/munge.key")
    assert r.rc == 0, r.stderr
    assert r.stdout.split()[0] == host.check_output("sha256sum /etc/munge/munge.key").split()[0]


def test_topology_follows_the_stacks_place(host):
    # Issue 29 point 3: topology.conf from the GPU node's gpufleet_place (molecule.yml host_vars), as slurmctld has
    # it: the leaf switch with the node, the block above it.
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    assert _show_config(host)["TopologyPlugin"] == "topology/tree"
    out = host.check_output("scontrol show topology")
    switches = {m.group(1): m.group(0) for m in re.finditer(r"SwitchName=(\S+) .*", out)}
    assert set(switches) == {"leaf-01", "b1"}, out
    leaf_nodes = re.search(r"\bNodes=(\S+)", switches["leaf-01"])
    assert re.search(r"Level=0\b", switches["leaf-01"]) and leaf_nodes, out
    # Both GPU nodes sit under leaf-01 (molecule.yml host_vars); scontrol prints them as a hostlist.
    assert host.check_output(f"scontrol show hostnames {leaf_nodes.group(1)}").split() == list(NODES), out
    assert re.search(r"Level=1\b", switches["b1"]) and "Switches=leaf-01" in switches["b1"], out


def _node_state(host):
    """(State=, Reason= without its [user@time] suffix, the whole record) of the GPU node as slurmctld has it."""
    out = host.check_output(f"scontrol show node {NODE}")
    reason = re.search(r"^\s*Reason=(.*?)(?: \[[^\]]*\])?\s*$", out, re.M)
    return re.search(r"\bState=(\S+)", out).group(1), reason.group(1) if reason else "", out


def test_a_planted_gpu_fault_drains_the_node_and_a_new_job_avoids_it(host):
    # Issue 29 point 5: slurmd runs gpufleet's node health check (HealthCheckProgram, every HealthCheckInterval;
    # run here directly, for determinism); a volatile double-bit ECC error planted on GPU 3 (as the node_validation
    # scenario plants it) drains the node with the finding as the reason, a new job pends instead of landing on it,
    # and the node comes back only when the operator resumes it (a clean check does not return it).
    if host.backend.get_hostname() != NODE:
        pytest.skip("planted and checked on the GPU node")
    conf = _show_config(host)
    program = conf.get("HealthCheckProgram", "(none)")
    assert program == "/usr/local/sbin/gpufleet-slurm-healthcheck", conf
    assert conf["HealthCheckInterval"] == "300 sec", conf
    assert (conf["Prolog"], conf["Epilog"]) == ("/usr/local/sbin/gpufleet-slurm-prolog",
                                                "/usr/local/sbin/gpufleet-slurm-epilog"), conf
    state, _, out = _node_state(host)
    assert "DRAIN" not in state, out
    healthy = host.run(program)
    assert healthy.rc == 0 and "DRAIN" not in _node_state(host)[0], healthy.stdout + healthy.stderr
    job = None
    try:
        host.check_output("gpusim-ctl set --gpu 3 --ecc-dbe-volatile 1")
        r = host.run(program)
        assert r.rc == 0, r.stdout + r.stderr
        state, reason, out = _node_state(host)
        assert "DRAIN" in state, out
        assert reason.startswith("gpufleet:reset-gpu check=ecc-dbe gpu="), out
        # Asked for this node by name (the other GPU node would take it otherwise): it pends, drained.
        job = host.check_output(f"sbatch --parsable --nodelist={NODE} --time=1 --wrap hostname").split(";")[0]
        time.sleep(3)
        queued = host.check_output(f"squeue --noheader --jobs {job} --format '%T %N'")
        assert queued.split()[0] == "PENDING" and NODE not in queued, queued
        # Healthy again: still drained until the operator resumes it (ReturnToService never resumes DRAIN).
        host.check_output("gpusim-ctl set --gpu 3 --ecc-dbe-volatile 0")
        assert host.run(program).rc == 0
        assert "DRAIN" in _node_state(host)[0]
    finally:
        if job:
            host.run(f"scancel {job}")
        host.run("gpusim-ctl set --gpu 3 --ecc-dbe-volatile 0")
        host.run(f"scontrol update nodename={NODE} state=resume")
    state, _, out = _node_state(host)
    assert "DRAIN" not in state, out

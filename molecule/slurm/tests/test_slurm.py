"""slurm: slurmctld on the control node, slurmd on the GPU node, the node idle with its 8-GPU gres."""

import pytest

CONTROL, NODE = "gpufleet-mol-slurm-0", "gpufleet-mol-slurm-1"


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
    assert f"NodeName={NODE} CPUs=16 RealMemory=1024 Gres=gpu:8 State=UNKNOWN" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf and "SlurmdParameters=config_overrides" in conf
    assert f"NodeName={NODE} Name=gpu File=/dev/nvidia[0-7]" in host.file("/etc/slurm/gres.conf").content_string


def test_node_is_idle_with_eight_gpus(host):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    assert host.check_output(f"sinfo --noheader --Node --nodes {NODE} --format %T") == "idle"
    assert "Gres=gpu:8" in host.check_output(f"scontrol --oneliner show node {NODE}")


def test_a_job_runs_on_the_gpu_node(host):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("submitted from the controller")
    r = host.run("srun --nodes=1 --gres=gpu:1 --time=1 hostname")
    assert r.rc == 0, r.stderr
    assert r.stdout.strip() == NODE


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

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
    assert f"NodeName={NODE} CPUs=1 RealMemory=1024 Gres=gpu:8 State=UNKNOWN" in conf
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
